"""What a person or a CI system reads is what happened (issue 24): the recording a replay
answers from, the ledger a passing test is sealed in, the files every reader takes.

Each attack is played through the real CLI against a real agent on 127.0.0.1 (the hostile
agent, its own process): an edited ``run.jsonl``, a record without a mac, an unsealed run
file, a NaN in a reply (from the agent over HTTP, and from a custom connector in the run's
own process), deeply nested JSON, a report whose test has ``"repeat": "abc"``, missing paths.
Before, a tampered recording replayed as passed and ``compare`` called it no regression; a
NaN latency passed with no ledger cell while ``ledger verify`` said every cell verified;
nested JSON gave tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.ledger import chain, runfile
from support import ledger_support
from support.helpers import Run, run_cli
from support.hostile_support import free_port, hostile_target

PROMPT = "Diagnose why the payment service is failing."
SUITE = f"""
from agent_health import test


@test("names the database")
async def names(agent, expect):
    result = await agent.run("{PROMPT} [bad]")
    expect(result.output).to_contain("db-primary")


@test("honest")
async def honest(agent, expect):
    result = await agent.run("{PROMPT}")
    expect(result.output).to_contain("db-primary")


@test("answers NaN")
async def answers_nan(agent, expect):
    result = await agent.run("{PROMPT} [nan]")
    expect(result.output).to_contain("db-primary")
"""
BAD = "No idea, everything looks fine to me."  # the hostile agent's [bad] answer
TWO = "names the database|honest"  # the tests a recording below is made of, and replays


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_evidence.py").write_text(SUITE)
    return tmp_path / "suite"


async def recorded(tmp_path: Path, suite: Path, *args: str) -> tuple[Run, Path, Path]:
    """A run against the hostile agent, recorded in ``tmp_path/ledger``; its report, saved."""
    ledger = tmp_path / "ledger"
    port = free_port()
    async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="by-prompt", attacks=""):
        done = await run_cli(
            suite, "--agent", f"rest+http://127.0.0.1:{port}/run", "--ledger", str(ledger), *args
        )
    saved = tmp_path / "base.json"
    saved.write_text(json.dumps(done.report))
    return done, ledger, saved


async def main(*argv: str) -> int:
    """The real CLI, in a worker thread (it runs its own event loop)."""
    return await asyncio.to_thread(cli.main, list(argv))


async def replay(
    suite: Path, report: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, Any], str, str]:
    """``run --replay REPORT`` (no agent is called: nothing to serve); its report and output."""
    out = report.with_name("replayed.json")
    out.unlink(missing_ok=True)
    code = await main(
        "run", str(suite), "--replay", str(report), "--reporter", f"json:{out}", *args
    )
    printed = capsys.readouterr()
    return code, json.loads(out.read_text()) if out.exists() else {}, printed.out, printed.err


async def compare(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = await main("compare", *map(str, args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def edit_the_answer(ledger: Path) -> str:
    """Make the failing test's recorded answer a passing one, as an attacker with write access
    to the ledger would; the edited cell's name."""
    cell = ledger_support.cell_where(ledger, "names the database")
    ledger_support.rewrite(
        ledger, cell, lambda lines: [line.replace(BAD, "db-primary is down.") for line in lines]
    )
    return cell


async def test_an_edited_recording_is_refused_and_without_its_key_replays_marked_unverified(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv(chain.KEY_ENV, raising=False)
    first, ledger, base = await recorded(tmp_path, suite, "--grep", TWO)
    assert first.by_name("names the database")["status"] == "failed"
    cell = edit_the_answer(ledger)
    capsys.readouterr()
    assert await main("ledger", "verify", str(ledger)) == 1

    # The key is beside the ledger (DIR.key): the replay verifies and refuses.
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert f"cell {cell}: line 3 (seq 2): edited: mac mismatch" in err  # the cell, the record
    assert "refusing to replay a recording changed after it was recorded" in err

    # Without the key nothing can tell: it runs, says so, and the report says so.
    key = ledger.parent / f"{ledger.name}.key"
    moved = tmp_path / "elsewhere.key"
    shutil.move(key, moved)
    junit = tmp_path / "junit.xml"
    code, replayed, out, err = await replay(
        suite, base, capsys, "--grep", TWO, "--reporter", f"junit:{junit}"
    )
    assert code == 0
    assert replayed["tests"][0]["status"] == "passed"  # the edit, taken as it is
    assert "replaying an UNVERIFIED recording: no ledger key for" in err
    assert "(recording UNVERIFIED: no key checked it)" in out
    assert replayed["provenance"]["replay_verified"] is False
    assert '<property name="replay_verified" value="false" />' in junit.read_text()

    # compare names the replay, and gates on it only when told to.
    new = tmp_path / "replayed.json"
    code, out, err = await compare(capsys, base, new)
    assert (code, out) == (2, "")
    assert f"NEW {new} is a replay of file://{ledger}" in err
    assert "the recording is UNVERIFIED" in err
    assert "pass --allow-replayed to compare it anyway" in err
    code, out, _ = await compare(capsys, base, new, "--allow-replayed")
    assert code == 0
    assert f"NEW {new} is a replay of file://{ledger} (the recording is UNVERIFIED" in out
    code, out, _ = await compare(capsys, new, base)  # a replayed BASE needs no flag: it is said
    assert code == 1
    assert f"BASE {new} is a replay" in out

    # The key given again, by --key-file or the environment: refused again.
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO, "--key-file", str(moved))
    assert code == 2
    assert f"does not verify with the key file {moved}: cell {cell}" in err
    monkeypatch.setenv(chain.KEY_ENV, moved.read_text())
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert f"does not verify with the ${chain.KEY_ENV}: cell {cell}" in err


async def test_an_untouched_recording_replays_verified_and_compare_says_so(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, ledger, base = await recorded(tmp_path, suite, "--grep", TWO)
    code, replayed, out, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 1  # the failure, replayed
    assert f"the recording verified with the key file {ledger}.key" in err
    assert "(recording verified with its key)" in out
    assert replayed["provenance"]["replay_verified"] is True
    new = tmp_path / "replayed.json"
    assert (await compare(capsys, base, new))[0] == 2
    code, out, _ = await compare(capsys, base, new, "--allow-replayed", "--json")
    assert code == 0
    said = json.loads(out)
    assert said["new_replay"] == {"recording": f"file://{ledger}", "verified": True}
    assert said["base_replay"] is None


@pytest.mark.parametrize("with_key", [True, False])
async def test_a_record_without_a_mac_is_refused_with_or_without_the_key(
    tmp_path: Path,
    suite: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: Any,
    with_key: bool,
) -> None:
    monkeypatch.delenv(chain.KEY_ENV, raising=False)
    _, ledger, base = await recorded(tmp_path, suite, "--grep", "names the database")
    cell = ledger_support.cell_where(ledger, "names the database")

    def unseal(lines: list[str]) -> list[str]:
        run = json.loads(lines[2])
        del run["mac"]
        run["output"] = "db-primary is down."
        return [*lines[:2], json.dumps(run), *lines[3:]]

    ledger_support.rewrite(ledger, cell, unseal)
    if not with_key:
        (ledger.parent / f"{ledger.name}.key").unlink()
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert f"cell {cell}: line 3 (seq 2): unsealed: the record has no mac" in err


async def test_a_run_file_without_its_seal_is_refused(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, ledger, base = await recorded(tmp_path, suite, "--grep", "honest")
    run = ledger / runfile.NAME
    run.write_text("".join(run.read_text().splitlines(keepends=True)[:-1]))  # the seal cut off
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert "run.jsonl has no seal: the run did not finish, or its end was cut off" in err


async def test_a_nan_in_a_reply_is_the_agents_protocol_error_and_is_recorded(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: passed, ``ledger_cell: null``, one stderr line, and ledger verify said all
    cells verified."""
    done, ledger, _ = await recorded(tmp_path, suite)
    test = done.by_name("answers NaN")
    assert (test["status"], test["cause"]) == ("errored", "agent")
    assert (
        "answered malformed JSON (trajectory[1].latency_ms: NaN: JSON has no NaN" in (test["error"])
    )
    assert test["ledger_cell"] is not None  # the failed call is on record, as any other
    assert done.report["summary"]["pass_rate"] == pytest.approx(1 / 3)
    capsys.readouterr()
    assert await main("ledger", "verify", str(ledger)) == 0
    assert "3 cells verified (run file sealed)" in capsys.readouterr().out


NAN_CONNECTOR = """
import math

from agent_health import define_config
from agent_health.connectors.protocol import AgentReply, Step


class Lossy:
    \"\"\"An in-process connector whose answers may hold what JSON cannot: NaN.\"\"\"

    def __init__(self, spec):
        pass

    async def run(self, request):
        latency = math.nan if "[nan]" in request.prompt else 12.0
        return AgentReply(
            output="The payment service cannot reach its database db-primary.",
            trajectory=(Step(type="tool_result", tool_name="search_logs", latency_ms=latency),),
        )

    async def aclose(self):
        pass


config = define_config(connectors={"lossy": Lossy}, agents={"lossy": {"connector": "lossy"}})
"""


async def test_a_result_whose_records_cannot_be_sealed_is_errored_and_ledger_verify_counts_it(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (suite / "agent-health.config.py").write_text(NAN_CONNECTOR)
    ledger = tmp_path / "ledger"
    done = await run_cli(suite, "--grep", "honest|NaN", "--ledger", str(ledger))
    nan = done.by_name("answers NaN")
    assert (nan["status"], nan["cause"], nan["ledger_cell"]) == ("errored", "agent", None)
    assert nan["error"].startswith("not passed: nothing evidences it, its ledger records could")
    assert "trajectory[0].latency_ms is nan" in nan["error"]
    assert done.by_name("honest")["status"] == "passed"
    assert done.code == 3
    capsys.readouterr()

    assert await main("ledger", "verify", str(ledger)) == 1
    out, err = capsys.readouterr()
    cell = next(line.split(":")[0] for line in out.splitlines() if "not recorded" in line)
    assert "answers-NaN" in cell
    assert "1 cells verified (run file sealed)" in err
    assert "but 1 cells hold no records" in err

    saved = tmp_path / "lossy.json"
    saved.write_text(json.dumps(done.report))
    code, replayed, _, _ = await replay(suite, saved, capsys)
    assert code == 3
    again = next(t for t in replayed["tests"] if t["name"] == "answers NaN")
    assert "its records could not be sealed when it ran" in again["error"]


DEEP = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on it


async def test_deeply_nested_json_is_one_line_from_every_reader(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, ledger, base = await recorded(tmp_path, suite, "--grep", "honest")
    cell = ledger_support.cell_where(ledger, "honest")
    ledger_support.rewrite(
        ledger,
        cell,
        lambda lines: [lines[0].replace('"kind":', f'"deep":{DEEP},"kind":'), *lines[1:]],
    )
    capsys.readouterr()
    assert await main("ledger", "verify", str(ledger)) == 1
    assert "run.jsonl line 1: not JSON (nested deeper than 256 levels)" in capsys.readouterr().err
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert "nested deeper than 256 levels" in err
    graded = tmp_path / "graded.json"
    key = f"{ledger}.key"
    grade = ["grade", str(ledger), "--key-file", key, "--reporter", f"json:{graded}"]
    assert await main(*grade) == 3
    (test,) = json.loads(graded.read_text())["tests"]
    assert (test["status"], test["cause"]) == ("errored", "agent")  # as any tampered cell
    assert test["error"].startswith("ledger tampered at record 0")

    deep_report = tmp_path / "deep.json"
    deep_report.write_text('{"version": 2, "summary": {}, "tests": ' + DEEP + "}")
    for argv in (
        ["compare", str(base), str(deep_report)],
        ["report", str(deep_report), "--reporter", "list"],
        ["run", str(suite), "--replay", str(deep_report)],
    ):
        assert await main(*argv) == 2, argv
        printed = capsys.readouterr()
        assert printed.err.count("\n") == 1, printed.err
        assert f"{deep_report}: not JSON we can read (nested deeper than 256 levels)" in (
            printed.err
        )


async def test_a_report_whose_repeat_is_not_a_number_is_refused_naming_the_field(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a ValueError traceback from the replay."""
    _, _, base = await recorded(tmp_path, suite, "--grep", "honest")
    report = json.loads(base.read_text())
    report["tests"][0]["repeat"] = "abc"
    base.write_text(json.dumps(report))
    code, _, _, err = await replay(suite, base, capsys, "--grep", TWO)
    assert code == 2
    assert f"{base}: tests[0].repeat: must be a whole number, at least 0" in err
    assert "'abc'" in err


def test_a_missing_path_is_a_load_error_for_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv(chain.KEY_ENV, "k" * 40)  # no key to miss: the path is what is missing
    there = tmp_path / "there.json"
    there.write_text(json.dumps({"version": 2, "summary": {}, "tests": []}))
    gone = tmp_path / "gone"
    for argv, said in (
        (["compare", str(there), f"{gone}.json"], "no such report file"),
        (["compare", f"{gone}.json", str(there)], "no such report file"),
        (["report", f"{gone}.json"], "no such report file"),
        (["run", str(tmp_path), "--replay", f"{gone}.json"], "no such report or ledger"),
        (["ledger", "verify", str(gone)], "no such ledger"),
        (["ledger", "verify", f"file://{gone}"], "no such ledger"),
        (["ledger", "verify", f"{gone}/run.jsonl"], "no such ledger"),
        (["grade", str(gone)], "no such ledger"),
    ):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err, (argv, err)
        assert str(gone) in err
