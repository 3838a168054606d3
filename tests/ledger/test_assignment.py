"""A pooled cell's assignment (ledger/assignment.py) and its wrapped ledger key (ledger/keys.py)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from agent_health.ledger import assignment, keys


def _assignment(**changes: object) -> assignment.Assignment:
    fields: dict[str, object] = {
        "cell": "run-a-0123456789-r0",
        "ledger_cell": "run-a-0123456789-r0",
        "test_id": "suite/test_a.py::test_a",
        "repeat": 0,
        "attempt": 0,
        "evaluation_run": "run-a",
        "timeout": 60,
        "ledger_key": "c2VjcmV0",
    }
    fields |= changes
    return assignment.Assignment(**fields)  # type: ignore[arg-type]


def test_wrapped_key_unwraps_only_with_its_sandbox_key_and_cell() -> None:
    run_key = b"r" * 44
    cell_key = keys.cell_key(run_key, "run-a-0123456789-r0")
    sandbox_key = b"s" * 43
    wrapped = keys.wrap_cell_key(sandbox_key, "run-a-0123456789-r0", cell_key)
    assert base64.b64decode(wrapped) != cell_key  # the annotation does not show the key
    assert keys.unwrap_cell_key(sandbox_key, "run-a-0123456789-r0", wrapped) == cell_key
    assert keys.unwrap_cell_key(b"t" * 43, "run-a-0123456789-r0", wrapped) != cell_key
    assert keys.unwrap_cell_key(sandbox_key, "run-a-0123456789-r0.a1", wrapped) != cell_key
    with pytest.raises(ValueError, match="not base64"):
        keys.unwrap_cell_key(sandbox_key, "c", "not base64 !")


def test_annotation_round_trips_and_names_a_bad_field() -> None:
    one = _assignment(agent="fast", judge_model="gpt-4o", skip_simulate=True, max_cell_bytes=9)
    assert assignment.Assignment.parse(one.annotation()) == one
    body = json.loads(one.annotation())
    body["repeat"] = True
    with pytest.raises(assignment.AssignmentError, match="'repeat' must be a int"):
        assignment.Assignment.parse(json.dumps(body), source="f.json")
    body["v"] = 2
    with pytest.raises(assignment.AssignmentError, match="version 2"):
        assignment.Assignment.parse(json.dumps(body))
    with pytest.raises(assignment.AssignmentError, match="not JSON"):
        assignment.Assignment.parse("{")


def test_wait_returns_once_the_file_holds_one(tmp_path: Path) -> None:
    path = tmp_path / "assignment.json"
    path.write_text("")  # the kubelet's projection of an annotation not yet set
    assert assignment.read(path) is None

    async def scenario() -> assignment.Assignment:
        waiting = asyncio.ensure_future(assignment.wait(path, interval=0.01))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        path.write_text(_assignment(test_id="t2").annotation())
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(scenario()).test_id == "t2"
    path.write_text("[1]")
    with pytest.raises(assignment.AssignmentError, match="not a JSON object"):
        asyncio.run(assignment.wait(path))
