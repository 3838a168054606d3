"""Shared pieces of the hostile-target tests: the target as its own process, a cell's gateway
and judge service on loopback, and reading what the attack left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from agent_health import gateway
from agent_health.engine.controller import cell

from support.cell_support import (
    CELL,
    TEST_ID,
    TOKEN,
    cell_gateway,
    cell_settings,
    grade,
    judge_service,
    ledger_lines,
    private_judge_cache,
)
from support.judge_servers import ScriptedModel

__all__ = [
    "CELL",
    "TEST_ID",
    "TOKEN",
    "cell_gateway",
    "cell_settings",
    "grade",
    "judge_service",
    "ledger_lines",
    "private_judge_cache",
]

HERE = Path(__file__).resolve().parent
OTHER_CELL_TOKEN = "controller-token-of-another-cell-19fe33a0"
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, 'says "db-primary"')
"""


def free_port() -> int:
    """A loopback port that is free now, for a server another process binds a moment later.

    Drawn below the kernel's ephemeral range (32768–60999 on Linux), so the outgoing
    connections of this and every other test on the machine cannot take it in between.
    """
    chooser = random.Random()
    for _ in range(200):
        port = chooser.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32767")


@contextlib.asynccontextmanager
async def hostile_target(
    port: int,
    report: Path,
    targets: dict[str, Any],
    *,
    answer: str,
    attacks: str,
    env: dict[str, str] | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``hostile_agent.py`` as its own process on ``port``, attacking ``targets`` when called.

    Its environment holds only what the test hands it: no token of this cell."""
    env = {
        "HOSTILE_TARGETS": json.dumps(targets),
        "HOSTILE_OTHER_TOKEN": OTHER_CELL_TOKEN,
        "HOSTILE_REPORT": str(report),
        "PATH": "/usr/bin:/bin",
        **(env or {}),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "hostile_agent.py"),
        "--port",
        str(port),
        "--answer",
        answer,
        "--attack",
        attacks,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert json.loads(ready) == {"port": port}, ready
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


@contextlib.asynccontextmanager
async def serving(
    proc: asyncio.subprocess.Process,
    healthz: str,
    *,
    attempts: int = 2400,
    stop_seconds: float = 30,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A gateway process, once ``healthz`` answers 200 (polled up to ``attempts`` times, 50 ms
    apart: generous, as a loaded CI machine starts a gateway in seconds); one that exits
    first fails at once with what it wrote. Stopped with SIGTERM on the way out, waited for
    up to ``stop_seconds``."""
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(attempts):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(healthz)).status_code == 200:
                        break
                if proc.returncode is not None:
                    said = await proc.stderr.read() if proc.stderr else b""
                    raise AssertionError(
                        f"the gateway exited ({proc.returncode}) before it was healthy: "
                        + said.decode(errors="replace")[-2000:]
                    )
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the gateway did not become healthy")
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), stop_seconds)


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class Sampler:
    """The peak RSS of a process, sampled in a thread every few milliseconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = rss(pid)
        self.peak = self.baseline
        self.samples = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, await asyncio.to_thread(rss, self.pid))
            self.samples += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.02)

    def stop(self) -> None:
        self._stop.set()


def read_report(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cached_verdicts(tmp_path: Path) -> int:
    with contextlib.closing(sqlite3.connect(tmp_path / "judge.sqlite")) as db:
        (count,) = db.execute("SELECT count(*) FROM verdicts").fetchone()
        return int(count)


async def run_attacked_cell(
    tmp_path: Path,
    judge: tuple[str, ScriptedModel],
    *,
    answer: str,
    attacks: str,
    suite: str = SUITE,
) -> tuple[int, list[dict[str, Any]], gateway.Gateway]:
    """Run the cell against the hostile target; (exit code, its report, the stopped gateway)."""
    judge_url, _ = judge
    port, report = free_port(), tmp_path / "report.jsonl"
    proxy = await cell_gateway(tmp_path, port, judge_url)
    targets = {
        "admin": proxy.admin_url,
        "routes": [proxy.url("controller", "target")],
        "judge_route": proxy.url("controller", "judge"),
        "judge": judge_url,
    }
    try:
        async with hostile_target(port, report, targets, answer=answer, attacks=attacks):
            code, _ = await cell.run_cell(cell_settings(tmp_path, proxy, suite))
    finally:
        await proxy.stop()
    return code, read_report(report), proxy


def attempts(report: list[dict[str, Any]], attack: str) -> list[dict[str, Any]]:
    return [line for line in report if line.get("attack") == attack]
