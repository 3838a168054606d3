"""A pooled (warm) cell's gateway as its own process: started before its cell exists, with its
tokens and its sandbox's key in the environment, assigned later through its assignment file."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
from agent_health.ledger import assignment, keys

RUN_KEY = b"r" * 48
"""The run's key: the operator derives each cell's key from it; ``ledger verify`` takes it."""
SANDBOX_KEY = "sandbox-key-of-this-pooled-pod-0f3a9c51e27d4b86"
SANDBOX_KEY_ENV = "AGENT_HEALTH_SANDBOX_KEY"
LEDGER_CELL = "evalrun-9-pool-r1.a1"
CELL = "evalrun-9-pool-r1"
UNASSIGNED = "not been assigned a cell yet"


def assigned(
    test_id: str,
    *,
    repeat: int = 1,
    sandbox_key: str = SANDBOX_KEY,
    judge_model: str | None = None,
    agent: str | None = "triage",
    ledger: str | None = None,
) -> assignment.Assignment:
    """The assignment the operator writes for ``test_id``: the cell key derived from the run
    key, wrapped for the sandbox whose key is ``sandbox_key``."""
    key = keys.cell_key(RUN_KEY, LEDGER_CELL)
    return assignment.Assignment(
        cell=CELL,
        ledger_cell=LEDGER_CELL,
        test_id=test_id,
        repeat=repeat,
        attempt=1,
        evaluation_run="evalrun-9",
        timeout=120,
        ledger_key=keys.wrap_cell_key(sandbox_key.encode(), LEDGER_CELL, key),
        agent=agent,
        judge_model=judge_model,
        ledger=ledger,
    )


def assign(path: Path, text: str) -> None:
    """Write the assignment as the kubelet does: a whole new file swapped in at once."""
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(text)
    os.replace(staged, path)


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without any of agent-health's, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_HEALTH_")}
    return env | extra


def gateway_environment(**tokens: str) -> dict[str, str]:
    """A pooled gateway's environment: its sandbox's key and ``tokens``, as from the Secret."""
    return environment(**{SANDBOX_KEY_ENV: SANDBOX_KEY}, **tokens)


async def start_gateway(args: Sequence[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.cli", "gateway", *args,
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def healthy(proc: asyncio.subprocess.Process, healthz: str) -> AsyncIterator[None]:
    """Once ``healthz`` answers 200; the gateway is stopped (SIGTERM) on the way out."""
    try:
        async with httpx.AsyncClient() as client:
            while True:
                if proc.returncode is not None:
                    assert proc.stderr is not None
                    raise AssertionError((await proc.stderr.read()).decode())
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(healthz)).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()


async def until_assigned(client: httpx.AsyncClient, healthz: str) -> None:
    """Until the gateway's ``/healthz`` says it has its cell."""
    while True:
        if (await client.get(healthz)).json().get("assigned"):
            return
        await asyncio.sleep(0.05)


def verify(ledger: Path, key: bytes, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``agent-health ledger verify`` of the pooled cell with ``key`` (the run's)."""
    key_file = tmp_path / "run.key"
    key_file.write_bytes(key)
    return subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "ledger", "verify",
         str(ledger / f"{LEDGER_CELL}.jsonl"), "--key-file", str(key_file)],
        capture_output=True, text=True, timeout=120, env=environment(),
    )  # fmt: skip
