"""Start the agent for the run when its config gives a ``command`` (like Playwright's webServer),
and keep agent-health's credentials out of every agent a run starts.

``{port}`` in the command, ``url`` and ``ready_url`` is replaced by a free port. The engine
waits until ``ready_url`` (or ``url``) answers, and stops the process group after the run.
The agent's environment is an allow-list of agent-health's and its config's ``env``
(:mod:`agent_health.connectors.environment`); ``told`` adds what the run tells it (the run's
OTLP receiver: ``OTEL_EXPORTER_OTLP_ENDPOINT``).

Before any agent starts, :func:`refuse_credentials` checks that no agent's ``env`` hands it
the judge's key, the ledger's key or the export's headers — by the variable it names, or by
a value equal to one of theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING

from agent_health.connectors import environment
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.errors import ConnectorConfigError
from agent_health.ledger import chain
from agent_health.sdk import errors

if TYPE_CHECKING:
    from agent_health.sdk.config import Config, JudgeConfig


def credentials(config: Config, judge: JudgeConfig | None) -> dict[str, str]:
    """Each variable that holds a credential of agent-health's, and whose it is: the
    judge's key (and a Bedrock judge's AWS keys), the ledger's key, the OTLP export's
    headers, the traces source's login."""
    held = {
        chain.KEY_ENV: "the ledger's key",
        "OTEL_EXPORTER_OTLP_HEADERS": "the OTLP export's headers",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "the OTLP export's headers",
    }
    if config.otlp is not None and config.otlp.headers_env:
        held[config.otlp.headers_env] = "the OTLP export's headers"
    if judge is not None:
        if judge.api_key_env:
            held[judge.api_key_env] = "the judge's API key"
        if judge.provider == "bedrock":
            for aws in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                held[aws] = "the judge's AWS credentials"
    opensearch = config.traces.opensearch
    if opensearch is not None:
        for login in (opensearch.username_env, opensearch.password_env):
            if login:
                held[login] = "the traces source's login"
    return held


def refuse_credentials(
    lanes: Sequence[tuple[str | None, ConnectorSpec]],
    config: Config,
    judge: JudgeConfig | None,
    environ: Mapping[str, str],
) -> None:
    """Refuse, before any agent starts, an agent ``env`` that would hand it one of
    agent-health's credentials (:func:`credentials`, or any ``AGENT_HEALTH_*`` variable):
    by naming its variable in ``from_env``, or by a value equal to one (``os.environ[...]``
    in the config). A ``from_env`` that names an unset variable is refused here too."""
    held = credentials(config, judge)
    # A value shorter than this is no secret (a flag, a word); comparing it would misfire.
    values = {environ[n]: whose for n, whose in held.items() if len(environ.get(n, "")) >= 8}
    for name, spec in lanes:
        agent = name or config.agent_name(None) or spec.connector
        for key, value in spec.env.items():
            where = f"agents.{agent}.env.{key}"
            if isinstance(value, environment.FromEnv):
                source = value.from_env
                named = held.get(source) or (
                    "one of agent-health's own" if source.startswith("AGENT_HEALTH_") else None
                )
                if named is not None:
                    raise errors.ConfigError(
                        f"{where}: from_env names ${source}, {named}; an agent never gets "
                        "agent-health's credentials: give it its own, in a variable of its own"
                    )
            try:
                given = environment.resolved({key: value}, environ)[key]
            except ConnectorConfigError as err:
                raise errors.ConfigError(f"agents.{agent}.{err}") from err
            whose = values.get(given)
            if whose is not None:
                raise errors.ConfigError(
                    f"{where}: its value is {whose}; an agent never gets agent-health's "
                    "credentials: give it its own"
                )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fill(value: str | None, port: int) -> str | None:
    return value.replace("{port}", str(port)) if value else value


@contextlib.asynccontextmanager
async def serving(
    spec: ConnectorSpec, told: Mapping[str, str] | None = None
) -> AsyncIterator[ConnectorSpec]:
    """Yield the spec to connect with, after starting the agent if the spec has a command
    (with the environment :func:`~agent_health.connectors.environment.started` gives it,
    and ``told``)."""
    if not spec.command or spec.connector == "subprocess":
        yield spec
        return
    try:
        env = {**environment.started(spec.env, os.environ), **(told or {})}
    except ConnectorConfigError as err:
        raise errors.ConfigError(f"cannot start agent {spec.command[0]!r}: {err}") from err
    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in spec.command]
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable  # the interpreter agent-health runs in
    url = _fill(spec.url, port)
    ready = _fill(spec.ready_url, port) or url
    # The agent's output goes to a file, not a pipe nobody drains (a full pipe blocks it).
    with tempfile.TemporaryFile() as log:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=spec.cwd,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=env,  # never agent-health's own: its judge key, ledger key, OTLP headers
            )
        except OSError as err:
            raise errors.ConfigError(f"cannot start agent {argv[0]!r}: {err}") from err
        try:
            await _wait_ready(proc, ready, spec.ready_timeout, log)
            yield spec.model_copy(update={"url": url, "command": None})
        finally:
            await _stop(proc)


async def _wait_ready(
    proc: asyncio.subprocess.Process, url: str | None, timeout: float, log: IO[bytes]
) -> None:
    if url is None:
        return
    import httpx  # only runs that start an agent need it; most runs never import httpx here

    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            if proc.returncode is not None:
                log.seek(0)
                tail = log.read()[-2000:]
                raise errors.ConfigError(
                    f"agent process exited with {proc.returncode} before it was ready: "
                    + tail.decode(errors="replace").strip()[-500:]
                )
            try:
                await client.get(url)
                return
            except httpx.HTTPError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise errors.ConfigError(f"agent did not answer at {url} within {timeout:g} s")
            await asyncio.sleep(0.05)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
