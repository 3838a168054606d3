"""Start the agent for the run when its config gives a ``command`` (like Playwright's webServer).

``{port}`` in the command, ``url`` and ``ready_url`` is replaced by a free port. The engine
waits until ``ready_url`` (or ``url``) answers, and stops the process group after the run.
``env`` adds variables to the agent's environment (the run's OTLP receiver:
``OTEL_EXPORTER_OTLP_ENDPOINT``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import IO

from agent_health.connectors.base import ConnectorSpec
from agent_health.sdk import errors


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _fill(value: str | None, port: int) -> str | None:
    return value.replace("{port}", str(port)) if value else value


@contextlib.asynccontextmanager
async def serving(
    spec: ConnectorSpec, env: Mapping[str, str] | None = None
) -> AsyncIterator[ConnectorSpec]:
    """Yield the spec to connect with, after starting the agent if the spec has a command."""
    if not spec.command or spec.connector == "subprocess":
        yield spec
        return
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
                env={**os.environ, **env} if env else None,
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
