"""An agent matrix through the real CLI: examples/04-diagnosis against its two example agents
(``triage`` and ``triage-faulty``, whose log tool always fails), each started by the config as
a real process on loopback, side by side in one run."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.cli import common
from support import budget_support
from support.helpers import Run, run_cli

ROOT = Path(__file__).resolve().parents[2]
TESTS = ("payment RCA uses its tools cleanly", "auth RCA stays within its turn budget")
HEALTHY = "a healthy service is cheap"


@pytest.fixture
def diagnosis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of examples/ (the config starts ../agents/triage_agent.py), run from 04."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    suite = tmp_path / "examples" / "04-diagnosis"
    monkeypatch.chdir(suite)
    return suite


def by(run: Run, agent: str) -> dict[str, str]:
    return {t["name"]: t["status"] for t in run.report["tests"] if t["agent"] == agent}


async def test_two_agents_side_by_side_with_paired_changes(
    diagnosis: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = diagnosis / "ledger"
    run = await run_cli(
        diagnosis, "--agent", "triage", "--agent", "triage-faulty", "--ledger", f"file://{ledger}"
    )
    assert run.code == common.EXIT_FAILED
    assert by(run, "triage") == dict.fromkeys((*TESTS, HEALTHY), "passed")
    assert by(run, "triage-faulty") == {TESTS[0]: "failed", TESTS[1]: "failed", HEALTHY: "passed"}
    # interleaved test by test: a budget or Ctrl-C leaves both agents with the same tests
    assert [(t["name"], t["agent"]) for t in run.report["tests"][:2]] == [
        (TESTS[0], "triage"),
        (TESTS[0], "triage-faulty"),
    ]
    matrix = run.report["matrix"]
    assert matrix["agents"] == ["triage", "triage-faulty"]
    assert matrix["summaries"]["triage"]["pass_rate"] == 1.0
    assert matrix["summaries"]["triage-faulty"]["pass_rate"] == pytest.approx(1 / 3, abs=1e-5)
    assert matrix["summaries"]["triage-faulty"]["failed"] == 2
    rows = {row["name"]: row["agents"] for row in matrix["tests"]}
    assert rows[TESTS[0]]["triage"]["passed"] == 1
    assert rows[TESTS[0]]["triage-faulty"]["failed"] == 1
    (pair,) = matrix["pairs"]
    assert (pair["base"], pair["new"], pair["tests"]) == ("triage", "triage-faulty", 3)
    assert pair["pass_rate_delta"] == pytest.approx(-2 / 3, abs=1e-5)
    assert sorted(pair["worse"]) == sorted(f"test_diagnosis.py::{name}" for name in TESTS)
    assert pair["better"] == []
    assert pair["score_delta"] < 0
    # compare's paired test: exact McNemar on the 2 tests that changed, both one way
    paired = pair["paired"]["pass_rate"]
    assert (paired["method"], paired["worse"], paired["better"]) == ("exact McNemar", 2, 0)
    assert paired["p_value"] == pytest.approx(0.5)
    assert paired["significant"] is False
    # each agent's run of a test is its own ledger cell
    cells = {t["ledger_cell"] for t in run.report["tests"]}
    assert len(cells) == 6
    assert all(c.split(".")[-2] in ("triage", "triage-faulty") for c in cells)
    assert {a["name"] for a in run.report["provenance"]["agents"]} == {"triage", "triage-faulty"}
    out = capsys.readouterr().out
    assert "agents side by side" in out
    assert "triage → triage-faulty over 3 tests: pass rate -66.7 pts (2 worse, 0 better)" in out
    assert "pass rate exact McNemar p=0.5, 95% CI [-93.9 pts, +5.9 pts]: not distinguishable" in out
    assert f"FAILED test_diagnosis.py::{TESTS[0]} [triage-faulty]" in out
    verified = await asyncio.to_thread(cli.main, ["ledger", "verify", f"file://{ledger}"])
    assert verified == 0
    # grading the ledger again keeps each cell's agent, and so the matrix
    regraded = diagnosis / "regraded.json"
    argv = ["grade", f"file://{ledger}", "--reporter", f"json:{regraded}"]
    await asyncio.to_thread(cli.main, argv)
    again = json.loads(regraded.read_text())
    assert sorted(again["matrix"]["agents"]) == ["triage", "triage-faulty"]
    (regraded_pair,) = again["matrix"]["pairs"]  # in the ledger's cell order
    changed = regraded_pair["worse"] + regraded_pair["better"]
    assert sorted(changed) == sorted(pair["worse"])
    # A recorded matrix replays as a matrix: each agent's answers from its own cells, with
    # neither agent started (were either called, its test would error, not pass or fail).
    recorded = diagnosis / "matrix.json"
    recorded.write_text(json.dumps(run.report))
    for source in (recorded, ledger):
        replayed = await run_cli(diagnosis, "--replay", str(source))
        assert replayed.code == common.EXIT_FAILED
        assert by(replayed, "triage") == by(run, "triage")
        assert by(replayed, "triage-faulty") == by(run, "triage-faulty")
        assert all(t["replayed"] for t in replayed.report["tests"])
        assert replayed.report["provenance"]["agents"] == []  # no agent was started
        (again_pair,) = replayed.report["matrix"]["pairs"]
        assert (again_pair["base"], again_pair["new"]) == ("triage", "triage-faulty")
        assert again_pair["pass_rate_delta"] == pair["pass_rate_delta"]
        ids = {(t["agent"], t["name"]): t["run_id"] for t in replayed.report["tests"]}
        assert ids == {(t["agent"], t["name"]): t["run_id"] for t in run.report["tests"]}


async def test_junit_names_each_agents_testcase(diagnosis: Path) -> None:
    import xml.etree.ElementTree as ET

    await run_cli(
        diagnosis, "--no-ledger", "--agent", "triage", "--agent", "triage-faulty",
        "--reporter", "junit:junit.xml",
    )  # fmt: skip
    names = [c.get("name") for c in ET.parse(diagnosis / "junit.xml").iter("testcase")]
    assert f"{TESTS[0]} [triage]" in names
    assert f"{TESTS[0]} [triage-faulty]" in names
    assert len(set(names)) == 6


async def test_a_budget_stops_both_agents_at_the_same_test(diagnosis: Path) -> None:
    run = await run_cli(
        diagnosis, "--agent", "triage", "--agent", "triage-faulty", "-j", "1", "--max-tokens", "1"
    )
    got = [(t["name"], t["agent"], t["status"]) for t in run.report["tests"]]
    assert got[0] == (TESTS[0], "triage", "passed")
    # the first test ran for one agent, then the budget stopped everything for both
    assert all(status == "skipped" for _, _, status in got[1:])
    assert run.report["matrix"]["pairs"][0]["tests"] == 0


async def test_test_info_names_the_agent(write_suite: Any) -> None:
    served = await budget_support.start()
    try:
        suite = write_suite(
            **{
                "test_who.py": """
                from agent_health import test

                @test("who")
                async def who(agent, test_info, expect):
                    await agent.run("x", env={"TOKENS": "10"})
                    expect(str(test_info.agent)).to_contain("rest+http://127.0.0.1")
                """
            }
        )
        one, two = f"rest+{served.url}", f"rest+{served.url}?second"
        run = await run_cli(suite, "--no-ledger", "--agent", one, "--agent", two)
    finally:
        await served.close()
    assert [(t["agent"], t["status"]) for t in run.report["tests"]] == [
        (one, "passed"),
        (two, "passed"),
    ]
    assert run.report["matrix"]["agents"] == [one, two]


def test_the_same_agent_twice_is_a_usage_error(
    diagnosis: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "--no-ledger", "--agent", "triage", "--agent", "triage"])
    assert code == common.EXIT_USAGE
    assert "--agent triage is given twice" in capsys.readouterr().err


async def test_one_agent_has_no_matrix(diagnosis: Path) -> None:
    run = await run_cli(diagnosis, "--no-ledger", "--agent", "triage")
    assert run.report["matrix"] is None
    assert {t["agent"] for t in run.report["tests"]} == {None}
