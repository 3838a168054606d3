"""``agent-health cell``: one test body inside a cell pod (the controller container).

The operator starts one pod per (test, repeat). Its controller container runs this command,
which finds the test in the suite, runs it once against the target through the cell's
gateway, and appends what it saw — the run-result, the signals and a final cell-end — to
the cell's ledger through the gateway's admin listener, presenting the controller's token.
The cell holds no ledger key and no LLM credentials: ``judge()`` goes to the operator's
judge service through the gateway.

Settings come from the environment the cell pod sets (see ``cluster/cellpod.py``):

=============================  =============================================================
``AGENT_HEALTH_AGENT_URL``     the target through the gateway, e.g. ``rest+http://127.0.0.1:15001/run``
``AGENT_HEALTH_TOKEN_FILE``    the controller's token (presented to the gateway and judge);
                               else ``AGENT_HEALTH_TOKEN``, the token itself (a pooled cell's)
``AGENT_HEALTH_RUN_ID``        the cell's run id (the gateway wrote it in the cell-meta)
``AGENT_HEALTH_GATEWAY_ADMIN`` where the controller appends its records
``AGENT_HEALTH_JUDGE_URL``     the judge service through the gateway (absent: judging skipped)
``AGENT_HEALTH_*_SOCKET``      the gateway's Unix sockets for the agent, admin (``GATEWAY_ADMIN``)
                               and judge URLs: the connections go there, so the token never
                               reaches a port the target could hold
``AGENT_HEALTH_JUDGE_MODEL``   the model a custom evaluator's ``llm`` asks for (optional)
``AGENT_HEALTH_SKIP_JUDGE``    ``1`` skips every ``judge()``
``AGENT_HEALTH_TIMEOUT``       the test's timeout in seconds
``AGENT_HEALTH_AGENT``         the agent's name in an agent matrix (``test_info.agent``)
``OTEL_EXPORTER_OTLP_*``       export the test as OTLP traces (RunSpec ``spec.otlp``, docs/otel.md)
=============================  =============================================================

A pooled cell's controller (``--assignment FILE``) takes its test, run id, timeout, judging
and agent from its assignment instead (:mod:`.warmcell`); the rest as above.

Exit codes: 0 passed or skipped, 1 failed, 3 errored, 2 the cell is misconfigured (no such
test, unreadable token), 4 the results could not be recorded (the grader will then find no
final record and grade the cell ``errored``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from agent_health import connectors, timeouts, tls
from agent_health.connectors.base import ConnectorSpec
from agent_health.engine import outcome, recording, running, visible
from agent_health.engine.controller import cellsuite
from agent_health.ledger import objects, strictjson
from agent_health.sdk import config as config_mod
from agent_health.sdk import context, errors, otlpconfig
from agent_health.sdk.results import RunResult, TestResult

if TYPE_CHECKING:
    from agent_health.otel import export as otel_export

TOKEN_HEADER = "X-Agent-Health-Token"  # the gateway's (gateway.config.TOKEN_HEADER; tested)
EXIT = {"passed": 0, "skipped": 0, "flaky": 0, "failed": 1, "errored": 3}
EXIT_MISCONFIGURED, EXIT_UNRECORDED = 2, 4


CellError = cellsuite.CellError


class RecordingFailed(errors.AgentHealthError):
    """The gateway refused or lost the controller's records; exit 4."""


@dataclass(frozen=True)
class CellSettings:
    """Where the test is and how the cell reaches its target, judge and ledger."""

    suite: Path
    test_id: str
    repeat: int
    agent: str
    run_id: str
    token: str | None
    admin: str | None
    judge_url: str | None
    judge_model: str | None
    skip_judge: bool
    timeout: float | None
    agent_socket: str | None = None
    """Unix sockets of the gateway (a cell's): the connections go there, never to a port
    the target could bind while the gateway restarts, so the token goes only to the gateway."""
    admin_socket: str | None = None
    judge_socket: str | None = None
    matrix_agent: str | None = None
    """The agent's name in an agent matrix (``AGENT_HEALTH_AGENT``): ``test_info.agent``."""
    skip_simulate: bool = False
    """``AGENT_HEALTH_SKIP_SIMULATE``: skip a test whose conversation needs a simulated user."""
    otlp: otlpconfig.Settings | None = None
    """Where the test's spans go (``OTEL_EXPORTER_OTLP_*``, from the RunSpec's ``spec.otlp``
    or the operator's ``--otlp-endpoint``); ``None``: no export."""
    evaluation_run: str | None = None

    @classmethod
    def from_env(
        cls, *, suite: Path, test_id: str, repeat: int, environ: Mapping[str, str] | None = None
    ) -> CellSettings:
        env = os.environ if environ is None else environ
        agent = env.get("AGENT_HEALTH_AGENT_URL")
        run_id = env.get("AGENT_HEALTH_RUN_ID")
        if not agent or not run_id:
            raise CellError(
                "a cell needs AGENT_HEALTH_AGENT_URL and AGENT_HEALTH_RUN_ID "
                "(the operator sets them in the cell pod)"
            )
        token = None
        if env.get("AGENT_HEALTH_TOKEN_FILE"):
            path = Path(env["AGENT_HEALTH_TOKEN_FILE"])
            try:
                token = path.read_text(encoding="utf-8").strip()
            except OSError as err:
                raise CellError(f"cannot read the controller token {path}: {err}") from err
        elif env.get("AGENT_HEALTH_TOKEN"):  # a pooled cell's, from its sandbox's Secret
            token = env["AGENT_HEALTH_TOKEN"].strip()
        timeout = env.get("AGENT_HEALTH_TIMEOUT")
        try:
            seconds = float(timeout) if timeout else None
        except ValueError as err:
            raise CellError(f"AGENT_HEALTH_TIMEOUT={timeout!r} is not a number") from err
        wrong = timeouts.problem(seconds) if seconds is not None else None
        if wrong is not None:
            raise CellError(f"AGENT_HEALTH_TIMEOUT={timeout!r} {wrong}")
        try:
            otlp = otlpconfig.resolve(None, None, env)
        except otlpconfig.SettingsError as err:
            raise CellError(f"the cell's OTLP export: {err}") from err
        return cls(
            otlp=otlp,
            evaluation_run=env.get("AGENT_HEALTH_EVALUATION_RUN") or None,
            suite=suite,
            test_id=test_id,
            repeat=repeat,
            agent=agent,
            run_id=run_id,
            token=token or None,
            admin=env.get("AGENT_HEALTH_GATEWAY_ADMIN") or None,
            judge_url=env.get("AGENT_HEALTH_JUDGE_URL") or None,
            agent_socket=env.get("AGENT_HEALTH_AGENT_SOCKET") or None,
            admin_socket=env.get("AGENT_HEALTH_GATEWAY_ADMIN_SOCKET") or None,
            judge_socket=env.get("AGENT_HEALTH_JUDGE_SOCKET") or None,
            judge_model=env.get("AGENT_HEALTH_JUDGE_MODEL") or None,
            skip_judge=env.get("AGENT_HEALTH_SKIP_JUDGE", "") not in ("", "0"),
            timeout=seconds,
            matrix_agent=env.get("AGENT_HEALTH_AGENT") or None,
            skip_simulate=env.get("AGENT_HEALTH_SKIP_SIMULATE", "") not in ("", "0"),
        )

    @property
    def token_headers(self) -> dict[str, str]:
        return {TOKEN_HEADER: self.token} if self.token else {}


class GatewayRecords:
    """The controller's half of the cell's ledger: its records, appended via the gateway."""

    def __init__(
        self, client: httpx.AsyncClient, admin: str, token: str | None, socket: str | None = None
    ) -> None:
        self._client = client
        self._url = admin.rstrip("/") + "/ledger/records"
        self._where = self._url + (f" (through {socket})" if socket else "")
        self._headers = {TOKEN_HEADER: token} if token else {}

    async def begin(self, info: context.TestInfo) -> None:
        """Nothing: the gateway wrote the cell-meta record when it started."""

    async def finish(
        self, result: TestResult, run: RunResult | None, *, agent_error: str | None = None
    ) -> None:
        await self.append(recording.controller_records(result, run, agent_error=agent_error))

    async def append(self, items: list[objects.Object]) -> None:
        """Post records (as JSON objects, :mod:`agent_health.ledger.objects`) to the gateway,
        which seals them; it validates each."""
        body = [{k: v for k, v in item.items() if k != "seq"} for item in items]
        try:
            response = await self._client.post(self._url, json=body, headers=self._headers)
        except httpx.HTTPError as err:
            raise RecordingFailed(f"cannot reach the gateway at {self._where}: {err}") from err
        if not response.is_success:
            raise RecordingFailed(
                f"the gateway refused the controller's records (HTTP {response.status_code}): "
                f"{response.text[:300]}"
            )

    async def spans(self, run_id: str) -> Mapping[str, Any] | None:  # its received spans
        return await recording.gateway_spans(self._client, self._url, self._headers, run_id)

    async def peer_calls(self, run_id: str) -> outcome.PeerCalls:
        """The target's calls to peers the gateway has on record for ``run_id``: what the
        test's tool claims are held to, and its insights read, as a local run reads its own
        gateway. One the gateway cannot give leaves the run as the agent told it (a warning;
        the operator holds the claims to the ledger all the same)."""
        url = self._url.removesuffix("/ledger/records") + "/peers/calls"
        try:
            response = await self._client.get(url, params={"run_id": run_id}, headers=self._headers)
            found = response.json() if response.is_success else None
        except (httpx.HTTPError, ValueError) as err:
            found, why = None, f"cannot reach it at {url}: {err}"
        else:
            why = f"it answered HTTP {response.status_code}: {response.text[:300]}"
        if isinstance(found, dict):
            calls, partial = found.get("calls"), found.get("partial")
            if isinstance(calls, list) and all(isinstance(c, dict) for c in calls):
                return outcome.PeerCalls(calls, whole=partial is False)
            why = "its answer holds no list of calls"
        print(f"warning: the gateway's calls to peers are not read ({why})", file=sys.stderr)
        return outcome.PeerCalls([], whole=False)


@contextlib.asynccontextmanager
async def _judge(
    settings: CellSettings, config: config_mod.Config
) -> AsyncIterator[context.JudgeBackend | None]:
    if settings.skip_judge or settings.judge_url is None:
        yield None
        return
    from agent_health.judging import remote  # only a judged cell loads the judge client

    async with remote.remote_backend(
        settings.judge_url,
        settings.token,
        model=settings.judge_model,
        evaluators=config.evaluators,
        headers=settings.token_headers,
        transport=through(settings.judge_socket),
    ) as backend:
        yield backend


def through(socket: str | None) -> httpx.AsyncHTTPTransport | None:
    """A transport whose connections go to the Unix socket ``socket`` (None: TCP as usual)."""
    return httpx.AsyncHTTPTransport(uds=socket, verify=tls.unused()) if socket else None


SetUpError = (CellError, errors.ConfigError, connectors.ConnectorError)


def connector_of(settings: CellSettings, config: config_mod.Config) -> connectors.Connector:
    """The target's connector, through the gateway's agent socket, with the controller's
    token."""
    spec = ConnectorSpec.parse(settings.agent)
    headers = {**spec.headers, **settings.token_headers}
    spec = spec.model_copy(update={"headers": headers, "uds": settings.agent_socket})
    return connectors.create(spec, config.connectors)


async def run_cell(
    settings: CellSettings, loaded: cellsuite.Loaded | Exception | None = None
) -> tuple[int, TestResult | None]:
    """Run the cell's one test and record it; the exit code and the result. ``loaded``: the
    suite loaded beforehand (or why it could not be), else it is loaded now."""
    admin_transport = through(settings.admin_socket)
    timeout = httpx.Timeout(60.0, connect=10.0)
    verify = tls.for_url(settings.admin or "")
    async with httpx.AsyncClient(
        timeout=timeout, transport=admin_transport, verify=verify
    ) as client:
        ledger = (
            GatewayRecords(client, settings.admin, settings.token, settings.admin_socket)
            if settings.admin
            else None
        )
        try:
            if isinstance(loaded, Exception):
                raise loaded
            found = loaded or cellsuite.load(settings.suite)
            config = found.config
            case = cellsuite.find(found.suite, settings.test_id)
            connector = found.connector or connector_of(settings, config)
        except SetUpError as err:
            # Say why in the ledger too, so the grade names the reason, not a missing record.
            if ledger is not None:
                end = objects.cell_end(
                    at=objects.stamp(datetime.now(UTC)),
                    status="errored",
                    error=str(err),
                    cause="test",
                )
                await ledger.append([end])
            raise
        return await _run(settings, case, config, connector, ledger)


async def _run(
    settings: CellSettings,
    case: Any,
    config: config_mod.Config,
    connector: connectors.Connector,
    ledger: GatewayRecords | None,
) -> tuple[int, TestResult | None]:
    export = _export(settings)
    async with _judge(settings, config) as judge:
        env = running.RunEnv(  # the gateway's OTLP receiver: spans fill what a reply left out
            agent_caller=recording.Joined(connector.run, ledger.spans) if ledger else connector.run,
            judge_backend=judge,
            skip_judge=settings.skip_judge or settings.judge_url is None,
            skip_simulate=settings.skip_simulate,
            timeout=settings.timeout,
            config=config,
            ledger=ledger,
            read_spans=ledger.spans if ledger is not None else None,
            peer_calls=ledger.peer_calls if ledger is not None else None,
            # Insights ask the judge service's model (through its cache), as judge() does.
            insights_llm=getattr(judge, "ask", None),
            lane=settings.matrix_agent,
            spans=export,
        ).with_prices()
        try:
            result = await running.run_case(case, settings.repeat, env, run_id=settings.run_id)
        finally:
            await connector.aclose()
            if export is not None:
                dropped = await export.aclose()
                if dropped is not None:
                    print(f"warning: {dropped}", file=sys.stderr)
    return EXIT[result.status], result


def _export(settings: CellSettings) -> otel_export.Export | None:
    """The test's OTLP export, when the cell was given an endpoint. A controller image without
    the otel extra runs its test unexported (a warning): export never fails a cell."""
    if settings.otlp is None:
        return None
    from agent_health.otel import export as otel_export

    try:
        return otel_export.Export.open(
            settings.otlp, agent=settings.matrix_agent, evaluation_run=settings.evaluation_run
        )
    except otel_export.ExportUnavailable as err:
        print(f"warning: {err}; the test runs unexported", file=sys.stderr)
        return None


def report(result: TestResult) -> str:
    """One JSON line for the pod's log: what the controller saw (the ledger is the record)."""
    fields = ("repeat", "status", "score", "error", "run_id")
    return strictjson.dumps({"test": result.id} | {name: getattr(result, name) for name in fields})


def main(suite: Path, test_id: str, repeat: int) -> int:
    """The ``agent-health cell`` command."""
    try:
        settings = CellSettings.from_env(suite=suite, test_id=test_id, repeat=repeat)
        code, result = asyncio.run(run_cell(settings))
    except (CellError, errors.ConfigError, connectors.ConnectorError) as err:
        print(f"error: {visible.line(str(err))}", file=sys.stderr)  # may quote the agent
        return EXIT_MISCONFIGURED
    except RecordingFailed as err:
        print(f"error: {visible.line(str(err))}", file=sys.stderr)
        return EXIT_UNRECORDED
    if result is not None:
        print(report(result))
    return code
