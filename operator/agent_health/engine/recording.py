"""A local run records through the in-process gateway, so its ledger has a cell's shape.

``agent-health run`` starts one gateway listener (``controller → target``) in its own event
loop and points the connector at it; every (test, repeat) is one ledger cell::

    cell-meta, exchange… (from the gateway), run-result, signal…, cell-end (from the engine)

Concurrent tests share the listener: the connector sends each test's run id in
``X-Agent-Health-Run-Id`` and :meth:`LocalLedger.begin` binds that run id to the test's cell.
The connector presents a controller token, so its calls are recorded as the controller's.

The HMAC key is random per run and written next to the ledger (mode 0600) so that
``agent-health ledger verify`` can check it: a local ledger is for inspection; anyone who can
read the key file can rewrite it, unlike a cell's, whose key only the gateway container holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent_health import gateway
from agent_health.connectors import errors as connector_errors
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest
from agent_health.gateway import config as gateway_config
from agent_health.ledger import backends, chain, records, store
from agent_health.ledger import errors as ledger_errors
from agent_health.sdk import context as ctx_mod
from agent_health.sdk.results import RunResult, TestResult

log = logging.getLogger("agent_health.engine")
DEFAULT_ROOT = Path(".agent-health") / "ledger"
FLUSH_WAIT = 30.0  # seconds a cell waits for its exchanges still in flight when the test ends
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_url(root: Path = DEFAULT_ROOT, now: datetime | None = None) -> str:
    """``file://.agent-health/ledger/<UTC timestamp>-<random>/`` (unique per run)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"file://{root / f'{stamp}-{secrets.token_hex(2)}'}"


def cell_name(test_id: str, repeat: int, retry: int = 0) -> str:
    """A ledger cell name for (test, repeat, retry): a readable slug of the id, made unique by
    a hash; a retry (``--retries``) is its own cell, ``.aN`` as the operator's attempts.

    >>> cell_name("test_triage.py::budgets > a healthy service", 0)
    'test_triage.py-budgets-a-healthy-service.bac067be.r0'
    >>> cell_name("test_triage.py::budgets > a healthy service", 0, retry=1)
    'test_triage.py-budgets-a-healthy-service.bac067be.r0.a1'
    """
    slug = _UNSAFE.sub("-", test_id).strip("-._")[:150] or "test"
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:8]
    attempt = f".a{retry}" if retry else ""
    return store.check_cell(f"{slug}.{digest}.r{repeat}{attempt}")


def key_path(url: str) -> Path:
    """Where the run's key is written: ``DIR.key`` beside a file ledger, else under
    ``.agent-health/ledger/``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme == "file":
        return chain.key_beside(url)  # where `ledger verify` looks for it
    safe = _UNSAFE.sub("-", rest).strip("-") or "ledger"
    return DEFAULT_ROOT / f"{safe}.key"


def _write_key(path: Path, key: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # also when the file existed with wider permissions
        os.write(fd, key + b"\n")
    finally:
        os.close(fd)


class LocalLedger:
    """The ledger of one local run: key, backend, in-process gateway and cell bookkeeping."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.key_file = key_path(url)
        self.failures: list[str] = []
        self._key = secrets.token_hex(32).encode("ascii")
        self._token = secrets.token_urlsafe(32)
        self._recorder: gateway.Recorder | None = None
        self._gateway: gateway.Gateway | None = None
        self._open: dict[str, tuple[str, float]] = {}  # run id → (cell, perf_counter start)
        self._via: tuple[str, str] | None = None  # (gateway base URL, agent base URL)

    @property
    def cells(self) -> list[str]:
        return self._recorder.cells if self._recorder is not None else []

    async def __aenter__(self) -> LocalLedger:
        await asyncio.to_thread(_write_key, self.key_file, self._key)
        backend = await asyncio.to_thread(backends.from_url, self.url)
        self.url = backend.url
        self._recorder = gateway.Recorder(backend, self._key)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for run_id in list(self._open):
            await self._end(run_id, [records.CellEnd(status="errored", error="interrupted")])
        if self._gateway is not None:
            await self._gateway.stop()
        if self._recorder is not None:
            await self._recorder.close(wait=FLUSH_WAIT)
            self.failures.extend(self._recorder.failures)

    async def route(self, spec: ConnectorSpec) -> ConnectorSpec:
        """``spec`` pointed at the gateway listener (started now), with the controller token."""
        if spec.url is None or self._recorder is None:
            return spec  # nothing on the wire to record (a subprocess agent)
        parts = urlsplit(spec.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return spec
        settings = gateway_config.build(
            {
                "routes": [
                    {
                        "principal": "controller",
                        "to": "target",
                        "listen": "127.0.0.1:0",
                        "upstream": f"{parts.scheme}://{parts.netloc}",
                    }
                ],
                "connect_timeout": min(10.0, spec.timeout),
                "grace": 5.0,
            }
        )
        self._gateway = gateway.Gateway(
            settings,
            tokens=gateway.Tokens({"controller": self._token}),
            record=self._recorder,
        )
        await self._gateway.start()
        via = self._gateway.url("controller", "target")
        self._via = (via, f"{parts.scheme}://{parts.netloc}")
        target = via + (parts.path or "/")
        if parts.query:
            target += f"?{parts.query}"
        headers = {**spec.headers, gateway.TOKEN_HEADER: self._token}
        return spec.model_copy(update={"url": target, "headers": headers})

    def wrap(self, caller: ctx_mod.AgentCaller) -> ctx_mod.AgentCaller:
        """``caller`` whose errors name the agent, not the gateway in front of it."""
        if self._via is None:
            return caller
        via, agent = self._via
        recorder = self._recorder

        async def call(request: AgentRequest) -> AgentReply:
            try:
                return await caller(request)
            except connector_errors.ConnectorError as err:
                reason = recorder.unreached(request.run_id) if recorder is not None else None
                if isinstance(err, connector_errors.AgentHTTPError) and reason is not None:
                    # The gateway's own 502/504: the agent was never reached.
                    detail = reason.split(": ", 1)[-1]
                    kind = (
                        connector_errors.AgentTimeout
                        if err.status == 504
                        else connector_errors.AgentUnreachable
                    )
                    raise kind(
                        f"cannot connect to agent at {agent}: {detail} (is it running?)"
                    ) from err
                raise _renamed(err, via, agent) from err.__cause__

        return call

    async def begin(self, info: ctx_mod.TestInfo) -> None:
        """Open the cell of a (test, repeat) and route its run id's exchanges to it."""
        if self._recorder is None:
            return
        cell = cell_name(info.id, info.repeat, info.retry)
        meta = records.CellMeta(test_id=info.id, repeat=info.repeat, run_id=info.run_id)
        try:
            await self._recorder.open_cell(cell, meta)
        except ledger_errors.LedgerError as err:
            self.failures.append(f"cell {cell}: {err}")
            return
        self._recorder.bind(info.run_id, cell)
        self._open[info.run_id] = (cell, time.perf_counter())

    async def finish(
        self, result: TestResult, run: RunResult | None, *, agent_error: str | None = None
    ) -> None:
        """Append the run's result, its signals and the cell's end, after its exchanges."""
        await self._end(result.run_id, controller_records(result, run, agent_error=agent_error))

    async def _end(self, run_id: str, items: list[records.Record]) -> None:
        cell, _ = self._open.pop(run_id, (None, 0.0))
        if cell is None or self._recorder is None:
            return
        try:
            await self._recorder.append(cell, *items, wait=FLUSH_WAIT)
        except ledger_errors.LedgerError as err:
            self.failures.append(f"cell {cell}: {err}")
        finally:
            self._recorder.unbind(run_id)


def controller_records(
    result: TestResult, run: RunResult | None, *, agent_error: str | None = None
) -> list[records.Record]:
    """What a cell's controller appends after its test: run-result, signals, cell-end.

    When ``agent.run()`` failed (``agent_error``), the run-result says why instead of what
    the agent answered: the gateway saw the target answer, and the grader needs the
    controller's account of that exchange.
    """
    items: list[records.Record] = []
    if run is None and agent_error is not None:
        items.append(
            records.RunResultRecord(
                run_id=result.run_id,
                prompt=result.prompt,
                error=agent_error,
                cause=result.cause or "agent",
            )
        )
    if run is not None:
        items.append(
            records.RunResultRecord(
                run_id=run.run_id,
                prompt=run.prompt,
                output=run.output,
                trajectory=[s.model_dump(mode="json") for s in run.trajectory],
                token_usage=run.token_usage.model_dump(exclude_none=True),
                duration_ms=max(0.0, run.duration_ms),
                unreported=sorted(run.unreported) or None,
            )
        )
    items.extend(
        records.SignalRecord(signal=_plain(s.model_dump(mode="json"))) for s in result.signals
    )
    items.append(
        records.CellEnd(
            # A cell is one try: a try passes or not; only the run's fold of tries is flaky.
            status="passed" if result.status == "flaky" else result.status,
            exit_code=None,
            error=result.error or result.skip_reason,
            duration_ms=max(0.0, result.duration_ms),
            cause=result.cause,
            content_hash=result.content_hash or None,
        )
    )
    return items


def _plain(value: Any) -> Any:
    """JSON data without NaN/inf, which canonical ledger JSON cannot hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _renamed(err: connector_errors.ConnectorError, via: str, agent: str) -> Exception:
    """``err`` with the gateway's URL in its message replaced by the agent's."""
    if err.args and isinstance(err.args[0], str) and via in err.args[0]:
        err.args = (err.args[0].replace(via, agent), *err.args[1:])
    return err
