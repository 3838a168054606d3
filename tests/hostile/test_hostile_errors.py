"""An agent that breaks its own tests cannot raise its grade (issue 13, error causes).

The hostile agent runs as its own process and answers HTTP 500, malformed JSON, a reply
without ``output``, or nothing at all, to the tests it chooses (``--answer by-prompt``).
Before, errored tests were left out of the pass rate: one honest pass and three sabotaged
tests scored 100%, and ``compare`` exited 0. Now each of them is ``errored`` with cause
``agent``, counts against the agent, and the comparison with an honest run regresses.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agent_health import cli
from agent_health.ledger import records
from support import ledger_support
from support.helpers import run_cli
from support.hostile_support import free_port, hostile_target

SUITE = """
from agent_health import test

PROMPT = "Diagnose why the payment service is failing."


@test("honest")
async def honest(agent, expect):
    result = await agent.run(PROMPT)
    expect(result.output).to_contain("db-primary")


@test("answers 500")
async def answers_500(agent, expect):
    result = await agent.run(PROMPT + " [500]")
    expect(result.output).to_contain("db-primary")


@test("answers malformed JSON")
async def malformed(agent, expect):
    result = await agent.run(PROMPT + " [malformed]")
    expect(result.output).to_contain("db-primary")


@test("hangs")
async def hangs(agent, expect):
    result = await agent.run(PROMPT + " [hang]", timeout=2)
    expect(result.output).to_contain("db-primary")


@test("answers without output")
async def no_output(agent, expect):
    result = await agent.run(PROMPT + " [no-output]")
    expect(result.output).not_to_contain("db-primary")  # "" would pass this: it must error
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_sabotage.py").write_text(SUITE)
    return tmp_path / "suite"


async def _run(tmp_path: Path, suite: Path, answer: str, *args: str) -> tuple[int, dict]:
    port = free_port()
    async with hostile_target(port, tmp_path / f"{answer}.jsonl", {}, answer=answer, attacks=""):
        done = await run_cli(suite, "--agent", f"rest+http://127.0.0.1:{port}/run", *args)
    return done.code, done.report


async def test_self_inflicted_errors_count_against_the_agent_and_compare_regresses(
    tmp_path: Path, suite: Path
) -> None:
    code, honest = await _run(tmp_path, suite, "good", "--no-ledger")
    assert code == 1  # "answers without output" fails against an honest agent: it names db
    base = tmp_path / "base.json"
    base.write_text(json.dumps(honest))

    code, sabotaged = await _run(tmp_path, suite, "by-prompt", "--no-ledger")
    s = sabotaged["summary"]
    by_name = {t["name"]: t for t in sabotaged["tests"]}
    assert by_name["honest"]["status"] == "passed"
    for name, why in (
        ("answers 500", "answered HTTP 500"),
        ("answers malformed JSON", "answered malformed JSON"),
        ("hangs", "did not answer within 2 s"),
        ("answers without output", "reply has no output"),
    ):
        test = by_name[name]
        assert (test["status"], test["cause"]) == ("errored", "agent"), test
        assert why in test["error"]
    assert s["errored_by_cause"] == {"agent": 4, "judge": 0, "test": 0, "infra": 0}
    assert s["pass_rate"] == 0.2  # 1 / (1 passed + 4 errored[agent]); it was 1.0
    assert code == 3  # errored tests only (each one names its cause)
    new = tmp_path / "new.json"
    new.write_text(json.dumps(sabotaged))

    exit_code = cli.main(["compare", str(base), str(new), "--json"])
    assert exit_code == 1
    loose = cli.main(["compare", str(base), str(new), "--max-pass-rate-drop", "1"])
    assert loose == 1  # errored rose by 4: --max-errored-rise 0 still gates


async def test_a_reply_without_output_is_recorded_as_the_agents_error_in_the_ledger(
    tmp_path: Path, suite: Path
) -> None:
    ledger = tmp_path / "ledger"
    _, report = await _run(
        tmp_path, suite, "by-prompt", "--grep", "without output", "--ledger", f"file://{ledger}"
    )
    assert report["summary"]["errored_by_cause"]["agent"] == 1
    (parsed,) = ledger_support.parsed(ledger).values()
    run = next(r for r in parsed if isinstance(r, records.RunResultRecord))
    end = parsed[-1]
    assert isinstance(end, records.CellEnd)
    assert (run.cause, end.cause, end.status) == ("agent", "agent", "errored")
    assert "reply has no output" in (run.error or "")
    key = ledger.parent / f"{ledger.name}.key"
    out = tmp_path / "regraded.json"
    args = ["grade", str(ledger), "--key-file", str(key), "--reporter", f"json:{out}"]
    regraded = await asyncio.to_thread(cli.main, args)
    assert regraded == 3
    test = json.loads(out.read_text())["tests"][0]
    assert (test["status"], test["cause"]) == ("errored", "agent")
    assert test["content_hash"] == report["tests"][0]["content_hash"]


TWO = """
from agent_health import test


@test("passes")
async def passes(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_contain("db-primary")


@test("fails")
async def fails(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_contain("the cache")
"""


async def test_a_tampered_ledger_cannot_turn_a_failure_into_an_excluded_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_two.py").write_text(TWO)
    ledger = tmp_path / "ledger"
    code, report = await _run(tmp_path, tmp_path / "suite", "good", "--ledger", f"file://{ledger}")
    assert (code, report["summary"]["pass_rate"]) == (1, 0.5)
    key = ledger.parent / f"{ledger.name}.key"

    async def regrade() -> dict:
        out = tmp_path / "regraded.json"
        args = ["grade", str(ledger), "--key-file", str(key), "--reporter", f"json:{out}"]
        await asyncio.to_thread(cli.main, args)
        graded: dict = json.loads(out.read_text())
        return graded

    assert (await regrade())["summary"]["pass_rate"] == 0.5
    failed = next(t for t in report["tests"] if t["status"] == "failed")
    cell = ledger_support.cell_where(ledger, failed["id"])

    def attack(lines: list[str]) -> list[str]:
        # Say the test errored (for the infrastructure), so it leaves the pass rate.
        end = json.loads(lines[-1])
        forged = {**end, "status": "errored", "error": "node lost", "cause": "infra"}
        return [*lines[:-1], json.dumps(forged)]

    ledger_support.rewrite(ledger, cell, attack)
    tampered = await regrade()
    test = next(t for t in tampered["tests"] if t["id"] == failed["id"])
    assert (test["status"], test["cause"]) == ("errored", "agent")
    assert test["error"].startswith("ledger tampered")
    assert tampered["summary"]["pass_rate"] == 0.5  # before: 1.0, the failure was excluded
