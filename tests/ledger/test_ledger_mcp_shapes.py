"""A ledger whose MCP calls are records of their own (version 4, what gateways wrote before
version 5) reads exactly as one whose calls ride inside their exchange's record (version 5):
every reader — ``ledger verify``, the grade (tool claims with server=, in order, in steps;
isError for to_have_no_tool_errors, ignored_tool_errors and the insights' metrics; the
report's mcp_calls and the trajectory as the gateway saw it), ``agent-health grade``'s JSON
and HTML reports, and the OTLP export's MCP tool spans — gives the same answers on both.

``tests/data/mcp_ledger_v4`` was written by a real gateway before version 5 existed
(``make_ledger.py`` there); its version-5 twin is made here by folding each exchange's calls
into its record and sealing again with the same key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.cluster.grading import grading
from agent_health.ledger import chain, objects, records, strictjson
from agent_health.otel import spans

SAVED = Path(__file__).resolve().parents[1] / "data" / "mcp_ledger_v4"
CELL = "cell-1"
EXPECTED = grading.ExpectedCell(
    test_id="t.py::uses its tools",
    repeat=0,
    run_id="run-cell-1",
    peer_tools={"tools": ("echo", "fail", "search")},
    mcp_peers=("tools",),
)


def saved() -> tuple[list[str], bytes]:
    lines = (SAVED / f"{CELL}.jsonl").read_text().splitlines()
    return lines, (SAVED / "key").read_bytes().strip()


def folded(lines: list[str], key: bytes) -> list[str]:
    """The same cell as a version-5 gateway writes it: each exchange carries the calls read
    in it (the mcp records just before it), sealed again with ``key``."""
    sealer = chain.Sealer(key)
    out: list[str] = []
    held: list[dict[str, Any]] = []
    for line in lines:
        record = strictjson.loads(line)
        del record["seq"], record["mac"]
        if record["kind"] == "mcp":
            held.append(record)
            continue
        if record["kind"] == "exchange" and held:
            for call in held:  # what a call shares with its exchange is the exchange's
                assert (call["principal"], call["server"]) == (
                    record["principal"],
                    record["upstream"],
                )
            record["version"] = objects.EXCHANGE_MCP_VERSION
            record["mcp"] = [objects.mcp_entry(call) for call in held]
            held = []
        out.append(sealer.line_of(record))
    assert not held
    return out


def graded(lines: list[str], key: bytes) -> dict[str, Any]:
    return grading.grade_lines(CELL, lines, key, EXPECTED).model_dump(mode="json")


def test_the_saved_ledger_is_in_the_old_shape_and_its_twin_in_the_new() -> None:
    lines, key = saved()
    old = records.parse_lines(lines)
    new = records.parse_lines(folded(lines, key))
    assert sum(r.kind == "mcp" for r in old) == 15
    assert all(r.version == 4 for r in old if r.kind == "mcp")
    assert not any(r.kind == "mcp" for r in new)
    carried = [r for r in new if isinstance(r, records.Exchange) and r.mcp is not None]
    assert sum(len(r.mcp or ()) for r in carried) == 15
    assert {r.version for r in carried} == {5}
    assert len(new) == len(old) - 15


def test_both_shapes_unfold_to_the_same_calls() -> None:
    lines, key = saved()
    skip = {"version", "seq", "mac", "status", "time"}

    def calls(recorded: list[records.Record]) -> list[dict[str, Any]]:
        unfolded = records.unfold(recorded)
        return [
            {k: v for k, v in records.to_object(r).items() if k not in skip}
            for r in unfolded
            if isinstance(r, records.McpRecord)
        ]

    old = calls(records.parse_lines(lines))
    assert old == calls(records.parse_lines(folded(lines, key)))
    assert len(old) == 15
    as_objects = [strictjson.loads(line) for line in folded(lines, key)]
    from_objects = [
        {k: v for k, v in r.items() if k not in skip}
        for r in objects.unfold(as_objects)
        if r["kind"] == "mcp"
    ]
    assert from_objects == old


def test_the_grade_is_the_same_on_both_shapes() -> None:
    lines, key = saved()
    old, new = graded(lines, key), graded(folded(lines, key), key)
    assert (old.pop("records"), new.pop("records")) == (40, 25)  # one line fewer per call
    assert old == new
    # ... and it is the grade of what happened, not of nothing.
    assert old["status"] == "failed"
    signals = {s["name"]: (s["passed"], s["error"]) for s in old["result"]["signals"]}
    assert signals["to_have_called_tool('echo', server='tools')"] == (True, None)
    assert signals["to_have_called_tool('search')"][0] is False
    assert signals["to_have_no_tool_errors()"][0] is False
    assert old["result"]["metrics"]["ignored_tool_errors"] == 2
    assert len(old["result"]["mcp_calls"]) == 15
    sources = {s.get("source") for s in old["result"]["trajectory"]}
    assert "gateway" in sources  # calls the agent left out, added as the gateway saw them


def test_the_otlp_export_names_the_same_mcp_tools_on_both_shapes() -> None:
    lines, key = saved()
    made = []
    for cell in (lines, folded(lines, key)):
        result = grading.grade_lines(CELL, cell, key, EXPECTED).result
        run = spans.RunContext(trace_id=1, span_id=2)
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        recorded = spans.Recorded(traceparent=parent, agent_window=(1.0, 2.0))
        made.append(
            [(s.name, s.attributes, s.error) for s in spans.test_spans(result, recorded, run)]
        )
    assert made[0] == made[1]
    mcp_spans = [a for _, a, _ in made[0] if "mcp.method.name" in a]
    assert mcp_spans  # the MCP tool spans are there to compare


@pytest.mark.parametrize("shape", ["old", "new"])
def test_ledger_verify_and_grade_read_either_shape(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, key = saved()
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / f"{CELL}.jsonl").write_text(
        "\n".join(lines if shape == "old" else folded(lines, key)) + "\n"
    )
    key_file = tmp_path / "key"
    key_file.write_bytes(key)
    assert cli.main(["ledger", "verify", str(ledger), "--key-file", str(key_file)]) == 0
    assert "1 cells verified" in capsys.readouterr().out
    report, page = tmp_path / "report.json", tmp_path / "report.html"
    argv = ["grade", str(ledger), "--key-file", str(key_file), "--no-history"]
    argv += ["--reporter", f"json:{report}", "--reporter", f"html:{page}"]
    assert cli.main(argv) == 1  # the test failed: the agent ignored a tool error
    (test,) = json.loads(report.read_text())["tests"]
    assert len(test["mcp_calls"]) == 15
    assert "peer:tools" in (page / "index.html").read_text()  # the inspector's MCP calls


def test_grade_reports_the_same_test_on_both_shapes(tmp_path: Path) -> None:
    lines, key = saved()
    tests = []
    for shape in (lines, folded(lines, key)):
        ledger = tmp_path / f"ledger-{len(tests)}"
        ledger.mkdir()
        (ledger / f"{CELL}.jsonl").write_text("\n".join(shape) + "\n")
        key_file = tmp_path / "key"
        key_file.write_bytes(key)
        report = tmp_path / f"report-{len(tests)}.json"
        argv = ["grade", str(ledger), "--key-file", str(key_file), "--no-history"]
        assert cli.main([*argv, "--reporter", f"json:{report}"]) == 1
        (test,) = json.loads(report.read_text())["tests"]
        tests.append(test)
    assert tests[0] == tests[1]
    assert len(tests[0]["mcp_calls"]) == 15
