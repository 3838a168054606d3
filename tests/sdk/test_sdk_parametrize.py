"""``test.each(rows)("title {key}")``: one test per row, each with its own stable id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_health.engine.loading import loader
from support.helpers import run_cli_sync

EACH = """
from agent_health import test

ROWS = [
    {"service": "payment", "tool": "search_logs"},
    {"service": "search", "tool": "service_status"},
]

async def tenant():
    yield "acme"

test = test.extend(tenant=tenant)

with test.describe("triage"):
    @test.each(ROWS)("diagnoses {service} with {tool} (#{index})", labels=["rca"])
    async def diagnoses(expect, tenant, service, tool):
        expect(tenant).to_equal("acme")
        expect(service).to_equal("payment")

@test.each([{"n": 1}, {"n": 2}]).skip("not yet {n}", reason="later")
async def later(n):
    pass
"""


def test_each_row_is_its_own_test_with_its_values(write_suite: Any) -> None:
    suite = write_suite(**{"test_each.py": EACH})
    run = run_cli_sync(suite, "--no-ledger")
    assert run.code == 1
    names = [t["name"] for t in run.report["tests"]]
    assert names == [
        "triage > diagnoses payment with search_logs (#0)",
        "triage > diagnoses search with service_status (#1)",
        "not yet 1",
        "not yet 2",
    ]
    payment, search = run.report["tests"][:2]
    assert payment["status"] == "passed"
    assert payment["labels"] == ["rca"]
    assert search["status"] == "failed"  # its own row's value reached the body
    [failed] = [s for s in search["signals"] if s["passed"] is False]
    assert failed["evidence"]["actual"] == "search"
    assert [t["status"] for t in run.report["tests"][2:]] == ["skipped", "skipped"]


def test_ids_are_stable_and_a_changed_row_changes_only_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "test_each.py"
    path.write_text(EACH)
    first = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    again = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    assert first == again
    assert "test_each.py::triage > diagnoses payment with search_logs (#0)" in first
    # The title does not show the tool: changing it keeps the id, changes the hash.
    path.write_text(EACH.replace('"service_status"', '"restart_pod"').replace(" with {tool}", ""))
    changed = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    payment = "test_each.py::triage > diagnoses payment (#0)"
    search = "test_each.py::triage > diagnoses search (#1)"
    path.write_text(EACH.replace(" with {tool}", ""))
    before = {c.id: c.content_hash for c in loader.load([tmp_path]).cases}
    assert before[payment] == changed[payment]
    assert before[search] != changed[search]


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (
            '@test.each([{"a": 1}, {"a": 2}])("same title")\nasync def t(a):\n    pass\n',
            "duplicate test name 'same title'",
        ),
        (
            '@test.each([{"a": 1}])("uses {b}")\nasync def t(a):\n    pass\n',
            "test.each title 'uses {b}' cannot be filled from row 0 (keys: a)",
        ),
        (
            '@test.each([{"a": 1}])("t {a}")\nasync def t(a, b):\n    pass\n',
            "takes 'b', which is neither a fixture nor a key of its row (row keys: a)",
        ),
        (
            '@test.each([{"agent": 1}])("t {agent}")\nasync def t(agent):\n    pass\n',
            "row key 'agent' is also a fixture's name",
        ),
        ('@test.each(["payment"])("t")\nasync def t():\n    pass\n', "each row must be a dict"),
        ('@test.each([])("t")\nasync def t():\n    pass\n', "test.each got no rows"),
    ],
)
def test_bad_rows_are_load_errors_that_say_what_to_fix(
    tmp_path: Path, source: str, says: str
) -> None:
    (tmp_path / "test_bad.py").write_text("from agent_health import test\n\n" + source)
    suite = loader.load([tmp_path])
    assert suite.cases == []
    [error] = suite.errors
    assert says in str(error)
    assert str(error).startswith("test_bad.py:")
