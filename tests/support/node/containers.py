"""One run of one container: a process started through :mod:`node.launcher`.

The process's stdout and stderr go to its log file (one per run, so ``previous`` logs
exist after a restart); its exit is reported as a container runtime does (a signal ``N``
is exit code ``128 + N``); its termination message is what it wrote to its
``terminationMessagePath`` (at most 4096 bytes), or, under ``FallbackToLogsOnError`` and a
failed exit, the tail of its log (80 lines, 2048 bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LAUNCHER = Path(__file__).with_name("launcher.py")
MESSAGE_LIMIT = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class Run:
    """A started container: its process (the process runtime's container *is* the process
    it started; :mod:`node.podman` subclasses this for a container a runtime started)."""

    process: asyncio.subprocess.Process
    log: Path
    termination_log: Path
    started_at: str
    exit_code: int | None = None
    finished_at: str | None = None
    reason: str | None = None
    """Why it ended when not by itself: ``OOMKilled``, ``StartError``."""

    @property
    def pid(self) -> int:
        """The container's first process, as the host sees it (signals, ``nsenter``)."""
        return self.process.pid

    @property
    def container_id(self) -> str:
        return f"node://{self.pid}"

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def wait(self) -> int:
        code = await self.process.wait()
        if self.exit_code is None:
            self.exit_code = 128 - code if code < 0 else code
            self.finished_at = now()
        return self.exit_code

    def signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, number)

    async def stop(self, grace: float) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds, as the kubelet stops a container."""
        if self.process.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), grace)
            except TimeoutError:
                self.signal(signal.SIGKILL)
        return await self.wait()

    def message(self, policy: str) -> str:
        try:
            text = self.termination_log.read_bytes()[:MESSAGE_LIMIT].decode(errors="replace")
        except OSError:
            text = ""
        if text or policy != "FallbackToLogsOnError" or self.exit_code == 0:
            return text
        return tail(self.log, FALLBACK_LINES, FALLBACK_BYTES)


def tail(path: Path, lines: int | None = None, limit: int | None = None) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:]) if lines else b""
    if limit is not None:
        data = data[-limit:]
    return data.decode(errors="replace")


def prepare(spec: dict[str, Any], state: Path, log: Path) -> tuple[Path, Path]:
    """The run's state directory, its empty termination-message file and its spec file."""
    state.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    termination = state / "termination-log"
    termination.write_bytes(b"")
    termination.chmod(0o666)  # the container's user writes it
    spec = spec | {"state": str(state)}
    if spec.get("termination_log"):
        spec["termination_log"] = {**spec["termination_log"], "source": str(termination)}
    spec_file = state / "spec.json"
    spec_file.write_text(json.dumps(spec))
    return spec_file, termination


async def start(spec: dict[str, Any], state: Path, log: Path) -> Run:
    """Start the container described by ``spec`` (see :mod:`node.launcher`)."""
    spec_file, termination = await asyncio.to_thread(prepare, spec, state, log)
    process = await spawn([sys.executable, str(LAUNCHER), str(spec_file)], log)
    return Run(process, log, termination, now())


async def spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """A container run's process, in a session of its own, its output appended to ``log``."""
    out = await asyncio.to_thread(log.open, "ab")
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        out.close()
