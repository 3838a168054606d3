"""Reading case files as upstream writes and validates them, through the real CLI: every
problem of a file at once, --lenient, unknown fields, each form (a list, one case,
{name, testCases}, {benchmarks}, testCaseIds beside their case files, JSONL), the file
names upstream uses, and hostile input that must end in one clear line, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support.helpers import run_cli_sync

GOOD = {
    "name": "payment outage",
    "category": "RCA",
    "difficulty": "Easy",
    "initialPrompt": "Diagnose why the payment service is failing.",
    "expectedOutcomes": ["names db-primary"],
}


def listing(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = cli.main(["list", *args])
    out, err = capsys.readouterr()
    return code, out, err


def errors_of(suite: Path, *args: str) -> list[str]:
    run = run_cli_sync(suite, "--pass-with-no-tests", *args)
    assert run.code == 2, run.report
    return list(run.report["summary"]["load_errors"])


def test_the_invalid_import_fixture_names_every_missing_field_at_once(write_suite: Any) -> None:
    # Upstream's own "invalid schema" fixture: one case with the wrong field names.
    suite = write_suite(**{"invalid-test-cases.json": '[{"title": "Wrong", "priority": "High"}]'})
    assert errors_of(suite) == [
        "invalid-test-cases.json:1: case [0]: name: missing; give the case a name (a non-empty "
        "string)",
        "invalid-test-cases.json:1: case [0]: initialPrompt: missing; give the prompt the case "
        "sends to the agent",
        'invalid-test-cases.json:1: case [0]: category: missing; give "category": "..." or a '
        '"category:..." label (upstream requires one) (--lenient loads it anyway)',
        'invalid-test-cases.json:1: case [0]: difficulty: missing; give "difficulty": "Easy", '
        '"Medium" or "Hard" (or a "difficulty:..." label) (--lenient loads it anyway)',
    ]


BREAKS_UPSTREAMS_RULES = [
    {
        "name": "loose",
        "difficulty": "Extreme",
        "initialPrompt": "Diagnose",
        "context": [{"value": "Connection refused"}],
        "expectedOutcomes": ["", "  "],
    },
    {**GOOD, "name": "fine"},
]


def test_upstreams_rules_are_errors_with_lines_and_lenient_loads_them_with_warnings(
    write_suite: Any, capsys: Any
) -> None:
    suite = write_suite(**{"loose.cases.json": json.dumps(BREAKS_UPSTREAMS_RULES, indent=2)})
    errors = errors_of(suite)
    assert [e.split(": ", 3)[2] for e in errors] == [
        "category",
        "difficulty",
        "context[0].description",
        "expectedOutcomes[0]",
        "expectedOutcomes[1]",
    ]
    assert all(e.startswith("loose.cases.json:") and "case [0] 'loose'" in e for e in errors)
    assert "'Extreme' is not one of Easy, Medium, Hard" in errors[1]
    assert errors[1].startswith("loose.cases.json:4:")  # the line of "difficulty"
    assert "is blank; write the claim the judge checks, or remove it" in errors[3]
    # --lenient (for files written by hand): the same problems, as warnings; the case loads.
    capsys.readouterr()
    code, out, err = listing(capsys, "--lenient", "--json", str(suite))
    assert code == 0, err
    loose = next(t for t in json.loads(out) if t["name"] == "loose")
    assert loose["labels"] == ["difficulty:Extreme"]  # kept as written
    assert loose["context"] == [{"description": "", "value": "Connection refused"}]
    assert loose["expected_outcomes"] == []  # the blank ones left out
    assert (loose["mode"], "nothing to grade" in loose["skip_reason"]) == ("skip", True)
    assert err.count("warning loose.cases.json:") == 5
    # ... and so does the config's switch.
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\nconfig = define_config(lenient_cases=True)\n"
    )
    assert listing(capsys, str(suite))[0] == 0


@pytest.mark.parametrize("text", ["[]", '{"name": "empty", "testCases": []}'])
def test_an_empty_file_is_refused_as_upstream_refuses_it(write_suite: Any, text: str) -> None:
    suite = write_suite(**{"empty.cases.json": text})
    [error] = errors_of(suite)
    assert error.startswith("empty.cases.json:1: ")
    assert 'holds no case (upstream: "Array cannot be empty")' in error


def test_an_unknown_field_warns_with_did_you_mean_and_ci_refuses_it(
    write_suite: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    near_miss = {**GOOD, "expectedOutcome": ["names db-primary"]}
    del near_miss["expectedOutcomes"]
    suite = write_suite(**{"typo.cases.json": json.dumps([near_miss])})
    code, out, err = listing(capsys, str(suite))
    assert code == 0
    assert err.splitlines() == [
        "warning typo.cases.json:1: case [0] 'payment outage': expectedOutcome: unknown field; "
        "did you mean 'expectedOutcomes'? (ignored)"
    ]
    # The case then checks nothing: it is skipped, not passed.
    assert "(skip: nothing to grade" in out
    # In CI (or with --forbid-unknown) the field is an error.
    monkeypatch.setenv("CI", "true")
    [error] = errors_of(suite)
    assert "expectedOutcome: unknown field; did you mean 'expectedOutcomes'? (refused" in error
    assert "fix or remove it" in error
    assert listing(capsys, "--no-forbid-unknown", str(suite))[0] == 0
    monkeypatch.delenv("CI")
    assert errors_of(suite, "--forbid-unknown") == [error]


def test_a_misspelt_required_field_is_named_in_its_error(write_suite: Any) -> None:
    typo = {**GOOD, "intialPrompt": GOOD["initialPrompt"]}
    del typo["initialPrompt"]
    suite = write_suite(**{"typo.cases.json": json.dumps([typo])})
    assert errors_of(suite) == [
        "typo.cases.json:1: case [0] 'payment outage': initialPrompt: missing; the case has "
        "'intialPrompt': did you mean 'initialPrompt'?"
    ]


def _cases(*names: str, **extra: Any) -> list[dict[str, Any]]:
    return [{**GOOD, "name": n, **extra} for n in names]


FORMS = {
    "a list": json.dumps(_cases("one", "two")),
    "one case": json.dumps(_cases("one")[0]),
    "a wrapper": json.dumps({"name": "nightly", "testCases": _cases("one", "two")}),
    "benchmarks": json.dumps(
        {
            "benchmarks": [
                {"name": "a", "testCases": _cases("one")},
                {"name": "b", "testCases": _cases("two")},
            ]
        }
    ),
    "JSONL": "\n".join(json.dumps(c) for c in _cases("one", "two")) + "\n",
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_upstream_writes_is_read(write_suite: Any, capsys: Any, form: str) -> None:
    name = "otel-test-cases.jsonl" if form == "JSONL" else "otel-benchmark-test-cases.json"
    suite = write_suite(**{name: FORMS[form]})
    code, out, err = listing(capsys, "--json", str(suite))  # found in the folder by name
    assert (code, err) == (0, "")
    listed = json.loads(out)
    assert [t["name"] for t in listed] == ["one", "two"][: len(listed)]
    assert len(listed) == (1 if form == "one case" else 2)
    if form == "JSONL":
        assert [t["line"] for t in listed] == [1, 2]
    if form in ("a wrapper", "benchmarks"):
        assert [t["case"]["benchmarks"] for t in listed] == (
            [["nightly"], ["nightly"]] if form == "a wrapper" else [["a"], ["b"]]
        )


def test_a_benchmark_names_cases_of_the_case_files_beside_it(write_suite: Any, capsys: Any) -> None:
    library = [
        {**GOOD, "id": "tc-1", "name": "one"},
        {**GOOD, "id": "tc-2", "name": "two"},
        {**GOOD, "id": "tc-3", "name": "three"},
    ]
    bench = {"id": "b-1", "name": "smoke", "currentVersion": 1, "testCaseIds": ["tc-3", "tc-1"]}
    suite = write_suite(
        **{"otel-test-cases.json": json.dumps(library), "smoke-benchmark.json": json.dumps(bench)}
    )
    # The benchmark alone runs its cases, as tests of their own file (one history).
    code, out, err = listing(capsys, "--json", str(suite / "smoke-benchmark.json"))
    assert (code, err) == (0, "")
    listed = json.loads(out)
    assert [t["id"] for t in listed] == ["otel-test-cases.json::tc-3", "otel-test-cases.json::tc-1"]
    assert all(t["case"]["benchmarks"] == ["smoke"] for t in listed)
    # The folder runs each case once, the benchmark's marked as such.
    code, out, _ = listing(capsys, "--json", str(suite))
    listed = json.loads(out)
    assert [t["id"].split("::")[1] for t in listed] == ["tc-1", "tc-2", "tc-3"]
    assert [t["case"].get("benchmarks") for t in listed] == [["smoke"], None, ["smoke"]]
    # An id no case beside it has is an error naming it and where it looked.
    bench["testCaseIds"] = ["tc-1", "tc-9"]
    write_suite(**{"smoke-benchmark.json": json.dumps(bench)})
    [error] = errors_of(suite / "smoke-benchmark.json")
    assert error.startswith("smoke-benchmark.json:1: benchmark 'smoke': testCaseIds[1]: ")
    assert "no case has the id 'tc-9'" in error
    assert "(looked in: otel-test-cases.json)" in error


def test_a_form_agent_health_does_not_read_says_which_it_reads(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "odd.cases.json": '{"suites": []}',
            "lines.cases.json": "\n".join(json.dumps(c) for c in _cases("one", "two")),
            "cases.csv": "name,initialPrompt\none,Diagnose\n",
        }
    )
    [odd] = errors_of(suite / "odd.cases.json")
    assert odd.startswith("odd.cases.json:1: holds an object with 'suites'; that is not a ")
    assert '{"benchmarks": [...]}' in odd
    assert "JSONL (.jsonl, one case a line)" in odd
    [lines] = errors_of(suite / "lines.cases.json")
    assert lines == (
        "lines.cases.json:2: invalid JSON: Extra data; one JSON value a line is JSONL: "
        "name the file .jsonl"
    )
    [csv] = errors_of(suite / "cases.csv")
    assert csv.startswith("cases.csv: CSV is not a case-file form agent-health reads; it reads ")
    assert "ImportError" not in csv


def test_a_folder_search_says_which_json_files_it_skips(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{"otel-benchmark-test-cases.json": json.dumps(_cases("one")), "cases.json": "[]"}
    )
    code, out, err = listing(capsys, str(suite))
    assert code == 0
    assert out.splitlines()[-1] == "1 tests in 1 files, 1 JSON skipped"
    assert "skipped 1 JSON file whose name matches no test_match pattern: cases.json" in err
    # Playwright's testMatch / testIgnore, in the config, choose instead.
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n"
        "config = define_config(test_match=['*.json'], test_ignore=['otel-*'])\n"
    )
    (suite / "cases.json").write_text(json.dumps(_cases("two")))
    code, out, err = listing(capsys, str(suite))
    assert (code, err) == (0, "")
    assert [line.split()[0] for line in out.splitlines()] == ["cases.json::two", "1"]


OK = """
from agent_health import test

@test("ok")
async def ok():
    pass
"""


def test_reports_written_into_the_suite_are_passed_over_without_a_word(
    write_suite: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's own examples write their reports into the suite (``--reporter
    json:run.json``): every later run used to warn that it skipped them, and a report named
    like a case file (``*benchmark*.json``) failed to load as one. A report is the run's
    output, never a test: a folder search passes over it; other JSON is still named."""
    suite = write_suite(**{"test_ok.py": OK})
    monkeypatch.chdir(suite)
    assert cli.main(["run", ".", "--no-ledger", "--reporter", "json:run.json"]) == 0
    assert cli.main(["run", ".", "--no-ledger", "--reporter", "json:benchmark-run.json"]) == 0
    capsys.readouterr()
    assert cli.main(["run", ".", "--no-ledger"]) == 0
    captured = capsys.readouterr()
    assert "skipped" not in captured.err
    assert "load error" not in captured.out
    assert captured.out.splitlines()[-1].startswith("1 passed, 0 failed")
    (suite / "notes.json").write_text("[]")  # not a report: still said
    code, out, err = listing(capsys, ".")
    assert code == 0
    assert out.splitlines()[-1] == "1 tests in 1 files, 1 JSON skipped"
    assert "no test_match pattern: notes.json;" in err


DEEP = "[" * 100_000 + "]" * 100_000
WRONG_TYPES = [
    {
        **GOOD,
        "name": 5,
        "context": "Connection refused",
        "tools": [{"name": 3}],
        "versions": "v1",
        "isPromoted": "yes",
        "expectedOutcomes": [1],
    }
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DEEP, ["deep.cases.json: nested too deeply to read; a case file nests at most 64"]),
        ("[" * 80 + "]" * 80, ["deep.cases.json: nested more than 64 levels deep; a case file"]),
        ('"just a string"', ["deep.cases.json:1: holds a string; that is not a case-file form"]),
        (
            json.dumps(WRONG_TYPES),
            [
                "deep.cases.json:1: case [0]: name: must be a string, got a number",
                "deep.cases.json:1: case [0]: versions: must be a list, got a string",
                "deep.cases.json:1: case [0]: isPromoted: must be true or false, got a string",
                "deep.cases.json:1: case [0]: context: must be a list, got a string",
                "deep.cases.json:1: case [0]: tools[0].name: must be a string, got a number",
                "deep.cases.json:1: case [0]: expectedOutcomes[0]: must be a string, got a number",
            ],
        ),
    ],
)
def test_hostile_input_is_one_line_per_problem_never_a_crash(
    write_suite: Any, text: str, expected: list[str]
) -> None:
    suite = write_suite(**{"deep.cases.json": text})
    errors = errors_of(suite)
    assert len(errors) == len(expected)
    for error, start in zip(errors, expected, strict=True):
        assert error.startswith(start), error
        assert "\n" not in error
        assert "Traceback" not in error


def _strict(text: str) -> Any:
    """``text`` as JSON, refusing the ``NaN`` / ``Infinity`` that Python's json would take."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the output: not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_key_written_twice_is_an_error_naming_it_and_lenient_reads_the_last(
    write_suite: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reviewer reads the first "expectedOutcomes"; JSON keeps the second, a check that runs.
    text = (
        "[\n"
        '  {"name": "twice", "category": "RCA", "difficulty": "Easy",\n'
        '   "initialPrompt": "Diagnose",\n'
        '   "expectedOutcomes": ["names db-primary as the cause"],\n'
        '   "expectedOutcomes": ["answers politely"]}\n'
        "]\n"
    )
    suite = write_suite(**{"twice.cases.json": text})
    monkeypatch.setenv("CI", "true")  # even in CI it was read silently
    [error] = errors_of(suite)
    assert error.startswith("twice.cases.json:5: case [0] 'twice': expectedOutcomes: the key ")
    assert "'expectedOutcomes' is written 2 times in one object" in error
    assert "JSON reads only the last" in error
    assert "keep one" in error
    capsys.readouterr()
    # --lenient: a warning naming it, and the case loads with the last value, as JSON.parse.
    code, out, err = listing(capsys, "--lenient", "--json", str(suite / "twice.cases.json"))
    assert code == 0, err
    [case] = _strict(out)
    assert case["expected_outcomes"] == ["answers politely"]
    [warning] = err.splitlines()
    assert warning.startswith("warning twice.cases.json:5: case [0] 'twice': expectedOutcomes: ")
    assert "(--lenient: the last is read)" in warning
    # At any depth, in any form: a benchmark's case in JSONL, a key of a context item.
    inner = {**GOOD, "name": "deep", "context": [{"description": "log", "value": "a"}]}
    line = json.dumps(inner).replace('"value": "a"', '"value": "a", "value": "b"')
    write_suite(**{"lines.cases.jsonl": "\n" + line})
    [error] = errors_of(suite / "lines.cases.jsonl")
    assert error.startswith("lines.cases.jsonl:2: line 2 'deep': context[0].value: the key 'value'")


def test_a_number_json_cannot_hold_is_refused_so_list_json_stays_json(
    write_suite: Any, capsys: Any
) -> None:
    text = json.dumps([{**GOOD, "versions": [{"score": 0.5}], "timeout": 30}], indent=1)
    suite = write_suite(**{"odd.cases.json": text.replace("0.5", "NaN").replace("30", "1e999")})
    errors = errors_of(suite)
    assert [e.split(": ")[2] for e in errors] == ["timeout", "versions[0].score"]
    assert errors[0].startswith("odd.cases.json:")
    assert (
        "timeout: is infinite (as JSON's 1e999 reads); a timeout is seconds, a finite "
        in (errors[0])
    )
    assert "versions[0].score: is not a finite number" in errors[1]
    capsys.readouterr()
    code, out, _ = listing(capsys, "--json", str(suite))
    assert code == 2
    assert _strict(out) == []  # never the bare Infinity of a timeout that was read
    # Outside any case too: a wrapper's field.
    wrapper = '{"name": "nightly", "total": NaN, "testCases": ' + json.dumps([GOOD]) + "}"
    write_suite(**{"odd.cases.json": wrapper})
    [error] = errors_of(suite)
    assert error.startswith("odd.cases.json:1: total: is not a finite number")
