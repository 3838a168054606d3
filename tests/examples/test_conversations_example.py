"""examples/05-conversations runs green through the CLI: the support agent it starts, the
deterministic simulator playing its simulated user (started here, as its README says), a
replay that asks the simulated user only through the cache, and --no-simulate."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import simulated_user_server
from support.helpers import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the example and the agents it starts, so a run writes nothing into the repo."""
    ignore = shutil.ignore_patterns("__pycache__", ".agent-health", ".report.json")
    shutil.copytree(EXAMPLES / "agents", tmp_path / "agents", ignore=ignore)
    shutil.copytree(EXAMPLES / "05-conversations", tmp_path / "05-conversations", ignore=ignore)
    return tmp_path / "05-conversations"


@pytest.fixture
async def simulator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[str]:
    runner, url = await simulated_user_server.start()
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_BASE_URL", url)  # the README's port, any free one
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    try:
        yield url
    finally:
        await runner.cleanup()


async def _completions(base: str) -> int:
    async with httpx.AsyncClient() as client:
        return int((await client.get(base.removesuffix("/v1") + "/stats")).json()["completions"])


@pytest.mark.slow
async def test_the_conversations_example(example: Path, simulator: str, tmp_path: Path) -> None:
    run = await run_cli(example)
    assert run.code == 0, [(t["name"], t["status"], t["error"]) for t in run.report["tests"]]
    assert run.report["summary"]["passed"] == 4
    simulated = run.by_name("a simulated customer learns its refund status")
    assert simulated["ended"]["reason"] == "goal-met"
    assert [t["user"] for t in simulated["turns"]] == [
        "Hi, did my refund go through?",
        "My order number is 5678.",
    ]
    case = run.by_name("looks the order up once it has the number")
    assert [t["user"] for t in case["turns"]] == [
        "Where is my parcel?",
        "It is order 1234",
        "thanks",
    ]
    asked = await _completions(simulator)
    assert asked == 2

    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(run.report))
    again = await run_cli(example, "--replay", str(recorded))
    assert again.code == 0, [(t["name"], t["error"]) for t in again.report["tests"]]
    assert await _completions(simulator) == asked  # the cache answered the simulated user

    skipping = await run_cli(example, "--no-simulate")
    assert skipping.code == 0
    skipped = skipping.by_name("a simulated customer learns its refund status")
    assert skipped["status"] == "skipped"
    assert skipping.report["summary"]["passed"] == 3
    assert await _completions(simulator) == asked
