"""``agent-health compare``: newly failing/passing tests, deltas, thresholds and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine.comparing import compare, render
from support import examples_support

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "04-diagnosis"


def entry(name: str, status: str, score: float | None, repeat: int = 0, **kw: Any) -> dict:
    return {
        "id": f"test_a.py::{name}",
        "name": name,
        "repeat": repeat,
        "status": status,
        "score": score,
        "content_hash": kw.pop("content_hash", f"h-{name}"),
        "error": kw.pop("error", None),
        **kw,
    }


def report(tests: list[dict[str, Any]], **summary: Any) -> dict[str, Any]:
    passed = sum(t["status"] == "passed" for t in tests)
    failed = sum(t["status"] == "failed" for t in tests)
    scores = [t["score"] for t in tests if t["score"] is not None]
    return {
        "version": 1,
        "summary": {
            "total": len(tests),
            "passed": passed,
            "failed": failed,
            "pass_rate": passed / (passed + failed) if passed + failed else None,
            "score": sum(scores) / len(scores) if scores else None,
            "tokens": 100,
            "cost_usd": 0.01,
            **summary,
        },
        "tests": tests,
    }


BASE = report(
    [
        entry("a", "passed", 1.0),
        entry("b", "passed", 1.0),
        entry("c", "failed", 0.0),
        entry("d", "passed", 0.9),
        entry("gone", "passed", 1.0),
    ]
)


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = cli.main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_same_report_is_no_regression(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, "base.json", BASE)
    code, out, _ = run(capsys, path, path)
    assert code == 0
    assert "newly failing: 0" in out
    assert "no regression beyond the thresholds" in out


def test_newly_failing_tests_fail_the_gate(tmp_path: Path, capsys: Any) -> None:
    new = report(
        [
            entry("a", "failed", 0.0),  # regression
            entry("b", "errored", None, error="agent down"),
            entry("c", "passed", 1.0),  # fixed
            entry("d", "passed", 0.5, content_hash="edited"),
            entry("added", "passed", 1.0),
        ],
        tokens=150,
        cost_usd=0.02,
    )
    base_path, new_path = write(tmp_path, "base.json", BASE), write(tmp_path, "new.json", new)
    code, out, _ = run(capsys, base_path, new_path)
    assert code == 1
    assert "passed → failed  test_a.py::a" in out
    assert "passed → errored  test_a.py::b — agent down" in out
    assert "failed → passed  test_a.py::c" in out
    assert "changed tests: test_a.py::d" in out
    assert "added: test_a.py::added" in out
    assert "removed: test_a.py::gone" in out
    assert "REGRESSION: pass rate dropped" in out
    # a big enough allowance lets it through
    code, _, _ = run(capsys, base_path, new_path, "--max-pass-rate-drop", "0.5")
    assert code == 0
    code, out, _ = run(capsys, base_path, new_path, "--max-pass-rate-drop", "0.5", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["regressed"] is False
    assert [c["id"] for c in data["newly_failing"]] == ["test_a.py::a", "test_a.py::b"]
    assert [c["id"] for c in data["newly_passing"]] == ["test_a.py::c"]
    assert data["tokens"] == {"base": 100.0, "new": 150.0, "delta": 50.0}
    assert data["cost_usd"]["delta"] == 0.01
    assert data["score_changes"][0]["id"] == "test_a.py::a"  # the biggest drop first
    d = next(c for c in data["score_changes"] if c["id"] == "test_a.py::d")
    assert d["changed"] is True


def test_a_pass_rate_difference_is_said_in_points(tmp_path: Path, capsys: Any) -> None:
    """39% → 22% is 16.7 points (a relative drop would be 43%): the text said 16.7%."""
    names = [f"t{i}" for i in range(18)]
    base = report([entry(n, "passed" if i < 7 else "failed", None) for i, n in enumerate(names)])
    new = report([entry(n, "passed" if i < 4 else "failed", None) for i, n in enumerate(names)])
    paths = write(tmp_path, "b.json", base), write(tmp_path, "n.json", new)
    code, out, _ = run(capsys, *paths, "--max-pass-rate-drop", "0.1")
    assert code == 1
    assert "pass rate 39% → 22% (-16.7 pts)" in out
    assert (
        "REGRESSION: pass rate dropped 16.7 points (39% → 22%), more than "
        "--max-pass-rate-drop 0.1 (10 points)"
    ) in out
    assert "%)" not in out.replace("(39% → 22%)", "")  # no difference is a percentage


def test_score_drop_gate(tmp_path: Path, capsys: Any) -> None:
    base = report([entry("a", "passed", 1.0), entry("b", "passed", 1.0)])
    new = report([entry("a", "passed", 0.8), entry("b", "passed", 0.9)])
    paths = write(tmp_path, "b.json", base), write(tmp_path, "n.json", new)
    assert run(capsys, *paths)[0] == 0  # no score gate unless asked
    code, out, _ = run(capsys, *paths, "--max-score-drop", "0.1")
    assert code == 1
    assert "REGRESSION: score dropped 0.150" in out
    assert run(capsys, *paths, "--max-score-drop", "0.2")[0] == 0


def test_repeats_are_matched_by_id_and_repeat() -> None:
    base = report([entry("a", "passed", 1.0, 0), entry("a", "failed", 0.0, 1)])
    new = report([entry("a", "failed", 0.0, 0), entry("a", "passed", 1.0, 1)])
    result = compare.compare(base, new)
    assert [(c.id, c.repeat) for c in result.newly_failing] == [("test_a.py::a", 0)]
    assert [(c.id, c.repeat) for c in result.newly_passing] == [("test_a.py::a", 1)]
    # The pass rate is unchanged, but a repeat that passed now fails: a regression by default,
    # tolerated when the threshold allows that share of the compared tests to flip.
    assert result.regressions == [
        "1 of 2 tests newly failing (0 of them errored), more than --max-pass-rate-drop 0 allows"
    ]
    assert not compare.compare(base, new, max_pass_rate_drop=0.5).regressed


def test_repeats_are_labelled_as_every_reporter_labels_them() -> None:
    base = report([entry("a", "passed", 1.0, 0), entry("a", "failed", 0.0, 1)], repeats=2)
    new = report([entry("a", "failed", 0.0, 0), entry("a", "passed", 1.0, 1)], repeats=2)
    lines = render.render(compare.compare(base, new))
    assert "  passed → failed  test_a.py::a [1/2]" in lines
    assert "  failed → passed  test_a.py::a [2/2]" in lines
    assert not any("[repeat" in line for line in lines)
    single = render.render(
        compare.compare(report([entry("b", "passed", 1.0)]), report([entry("b", "failed", 0.0)]))
    )
    assert "  passed → failed  test_a.py::b" in single  # one run per test: no label


def _with(change: Any) -> str:
    """BASE as JSON text, changed by ``change`` (a function of the loaded report)."""
    data = json.loads(json.dumps(BASE))
    change(data)
    return json.dumps(data)


DEEP = "[" * 100_000 + "]" * 100_000  # a RecursionError in json.loads


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such report file"),
        ("{not json", "not JSON"),
        ('{"summary": {}}', "not an agent-health JSON report"),
        ('{"version": 3, "summary": {}, "tests": []}', "version: 3 is not a report version"),
        ('{"version": true, "summary": {}, "tests": []}', "version: True is not a report version"),
        ('{"version": 1, "summary": {}}', "no summary object or tests list"),
        ('{"version": 1, "summary": {}, "tests": [{"status": "passed"}]}', "tests[0].id: must be"),
        ('{"version": 1, "summary": {}, "tests": ' + DEEP + "}", "nested deeper than 256 levels"),
        (
            _with(lambda r: r["tests"][2].update(score=float("nan"))),
            "tests[2].score: NaN: JSON has no NaN or Infinity",
        ),
        (_with(lambda r: r["summary"].update(score=1e999)), "summary.score: Infinity: JSON has"),
        (_with(lambda r: r["tests"][1].update(score=1.5)), "tests[1].score: must be a number"),
        (_with(lambda r: r["tests"][0].update(repeat="abc")), "tests[0].repeat: must be a whole"),
        (_with(lambda r: r["tests"][0].update(status="great")), "tests[0].status: 'great' is not"),
        (_with(lambda r: r["summary"].update(errored=-5)), "summary.errored: must be a whole"),
        (_with(lambda r: r["summary"].update(tokens=-1)), "summary.tokens: must be a whole"),
        (_with(lambda r: r["summary"].update(cost_usd=-0.5)), "summary.cost_usd: must be a"),
        (_with(lambda r: r["summary"].update(repeats=1e9)), "summary.repeats: must be a whole"),
        (_with(lambda r: r["summary"].update(repeats=10**9)), "from 1 to 100,000, not 1000000000"),
        (
            _with(lambda r: (r["summary"].update(repeats=1), r["tests"][3].update(repeat=2))),
            "summary.repeats: 1, but tests[3] is repeat 2",
        ),
        (
            _with(lambda r: r["tests"].append(r["tests"][0])),
            "tests[5]: test 'test_a.py::a' repeat 0 is listed twice (also tests[0])",
        ),
        (_with(lambda r: r.update(provenance=[])), "provenance: must be an object or null"),
        (_with(lambda r: r["tests"][0].update(partial="x")), "tests[0].partial: must be an obj"),
        (
            _with(lambda r: r["tests"][0].update(partial={"source": "smoke"})),
            "tests[0].partial.source: 'smoke' is not one of body, events, stdout",
        ),
        (
            _with(lambda r: r["tests"][0].update(partial={"source": "body", "text": 5})),
            "tests[0].partial.text: must be a string, not 5",
        ),
        (
            _with(lambda r: r["tests"][0].update(partial={"source": "body", "bytes": -1})),
            "tests[0].partial.bytes: must be a whole number",
        ),
        (
            _with(lambda r: r["tests"][0].update(partial={"source": "events", "trajectory": 1})),
            "tests[0].partial.trajectory: must be a list of steps",
        ),
    ],
)
def test_bad_files_exit_2_naming_the_file_and_the_field(
    tmp_path: Path, capsys: Any, content: str | None, message: str
) -> None:
    """Each on either side: one line naming the file and the field, exit 2 (a load error),
    never a traceback, never a comparison of what the reports do not say."""
    base = write(tmp_path, "base.json", {**BASE, "summary": {**BASE["summary"], "repeats": 1}})
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for args in ((base, bad), (bad, base)):
        code, out, err = run(capsys, *args)
        assert (code, out) == (2, ""), err
        assert err.count("\n") == 1, err
        assert err.startswith(f"error: {bad}: ")
        assert message in err, err


def test_negative_threshold_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, "base.json", BASE)
    code, _, err = run(capsys, path, path, "--max-pass-rate-drop", "-1")
    assert code == 2
    assert "must not be negative" in err


@pytest.mark.slow
def test_example_04_compares_a_healthy_and_a_faulty_agent(tmp_path: Path) -> None:
    example = examples_support.copy(tmp_path, EXAMPLE.name)

    def agent_health(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent_health.cli", *args],
            cwd=example,
            capture_output=True,
            text=True,
            timeout=300,
        )

    base, new = tmp_path / "base.json", tmp_path / "new.json"
    healthy = agent_health("run", "--reporter", f"json:{base}")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    data = json.loads(base.read_text())
    assert data["summary"]["cost_usd"] > 0
    assert set(data["summary"]["labels"]) == {"category:RCA", "category:cost"}
    assert all(t["insights"]["summary"].startswith("passed") for t in data["tests"])
    faulty = agent_health("run", "--agent", "triage-faulty", "--reporter", f"json:{new}")
    assert faulty.returncode == 1, faulty.stdout + faulty.stderr
    payment = next(t for t in json.loads(new.read_text())["tests"] if "payment" in t["name"])
    assert payment["metrics"]["ignored_tool_errors"] == 1
    assert payment["metrics"]["retries"] == 1
    assert "handle tool errors" in payment["insights"]["recommendations"][0]
    gate = agent_health("compare", str(base), str(new))
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "passed → failed  test_diagnosis.py::payment RCA uses its tools cleanly" in gate.stdout
    assert agent_health("compare", str(base), str(base)).returncode == 0


def test_a_test_that_now_errors_is_a_regression_even_when_the_pass_rate_holds(
    tmp_path: Path, capsys: Any
) -> None:
    # The attack of issue 13: errored results left the pass rate, so "passed → errored"
    # printed as newly failing and still exited 0. An infra error keeps the pass rate.
    base = report([entry("a", "passed", 1.0), entry("b", "passed", 1.0)], errored=0)
    new = report(
        [entry("a", "passed", 1.0), entry("b", "errored", None, cause="infra", error="evicted")],
        errored=1,
    )
    assert base["summary"]["pass_rate"] == new["summary"]["pass_rate"] == 1.0
    paths = write(tmp_path, "base.json", base), write(tmp_path, "new.json", new)
    code, out, _ = run(capsys, *paths)
    assert code == 1
    assert "passed → errored (infra)  test_a.py::b — evicted" in out
    assert "REGRESSION: 1 of 2 tests newly failing (1 of them errored)" in out
    assert "REGRESSION: errored tests rose by 1 (0 → 1), more than --max-errored-rise 0" in out
    # Thresholds as before: half the tests may flip, and one more error may be tolerated.
    assert run(capsys, *paths, "--max-pass-rate-drop", "0.5")[0] == 1  # the errors still rose
    loose = run(capsys, *paths, "--max-pass-rate-drop", "0.5", "--max-errored-rise", "1")
    assert loose[0] == 0
    assert run(capsys, *paths, "--max-errored-rise", "-1")[0] == 2


def test_a_fix_that_removes_errors_is_no_regression(tmp_path: Path, capsys: Any) -> None:
    base = report([entry("a", "errored", None, cause="agent")], errored=1)
    new = report([entry("a", "passed", 1.0)], errored=0)
    code, out, _ = run(capsys, write(tmp_path, "b.json", base), write(tmp_path, "n.json", new))
    assert code == 0
    assert "errored 1 → 0 (-1)" in out
