"""The recorder: which cell an exchange goes to, and exchanges before the controller's records."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_health.cluster.grading import grading
from agent_health.gateway import recorder
from agent_health.ledger import chain, errors, filestore, objects, observation, records, usage
from support import ledger_support
from support.gateway_support import KEY


def _seen(run_id: str | None, path: str = "/run", **fields: Any) -> observation.Observation:
    now = time.time()
    return ledger_support.seen(run_id=run_id, path=path, started_at=now, ended_at=now, **fields)


def _meta(name: str) -> records.CellMeta:
    return records.CellMeta(test_id=name, repeat=0, run_id=name)


async def _kinds(backend: filestore.FileBackend, cell: str) -> list[str]:
    return [json.loads(line)["kind"] for line in await backend.read(cell)]


async def test_exchanges_go_to_the_cell_bound_to_their_run_id(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    for name in ("a", "b"):
        await rec.open_cell(name, _meta(name))
        rec.bind(f"run-{name}", name)
    rec.start("run-b").finish(_seen("run-b", "/b"))
    rec.start("run-a").finish(_seen("run-a", "/a"))
    rec.start("other").finish(_seen("other"))  # two cells open: no guessing
    await rec.flush_all()
    assert await _kinds(backend, "a") == ["cell-meta", "exchange"]
    assert json.loads((await backend.read("b"))[1])["path"] == "/b"
    assert (rec.recorded, rec.unrouted) == (2, 1)


async def test_with_one_open_cell_an_unbound_exchange_goes_to_it(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    await rec.open_cell("only", _meta("only"))
    rec.start(None).finish(_seen(None))
    await rec.append("only", records.CellEnd(status="passed"))
    rec.start(None).finish(_seen(None))  # the cell has ended: counted, not written
    await rec.close()
    assert await _kinds(backend, "only") == ["cell-meta", "exchange", "cell-end"]
    assert rec.unrouted == 1


async def test_append_waits_for_the_cells_exchanges_in_flight(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, default_cell="c")
    await rec.open_cell("c", _meta("c"))
    ticket = rec.start("run")
    ending = asyncio.ensure_future(rec.append("c", records.CellEnd(status="passed")))
    await asyncio.sleep(0)
    assert not ending.done()  # the exchange has not finished yet
    ticket.finish(_seen("run"))
    await ending
    lines = await backend.read("c")
    assert [json.loads(line)["kind"] for line in lines] == ["cell-meta", "exchange", "cell-end"]
    assert chain.verify(lines, KEY).ok


async def test_open_refuses_a_tampered_cell_and_a_second_open(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    await rec.open_cell("c", _meta("c"))
    with pytest.raises(errors.ChainError, match="already open"):
        await rec.open_cell("c", _meta("c"))
    (tmp_path / "c.jsonl").write_text((tmp_path / "c.jsonl").read_text().replace('"c"', '"d"'))
    with pytest.raises(errors.ChainError, match="does not verify"):
        await recorder.Recorder(backend, KEY).open_cell("c", _meta("c"))


async def test_an_exchange_is_dated_when_it_ended_as_a_local_runs_are(tmp_path: Path) -> None:
    """The gateway's record of an exchange is made from what it saw, as a local run's is:
    dated when the exchange ended, not when its batch happened to be written."""
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, default_cell="c")
    await rec.open_cell("c", _meta("c"))
    at = ledger_support.T0.timestamp()
    rec.start("run").finish(ledger_support.seen(run_id="run", started_at=at, ended_at=at + 1.5))
    await rec.close()
    lines = await backend.read("c")
    sealed = json.loads(lines[1])
    assert (sealed["started_at"], sealed["ended_at"], sealed["time"]) == (
        "2025-01-01T00:00:00Z",
        "2025-01-01T00:00:01.500000Z",
        "2025-01-01T00:00:01.500000Z",
    )
    assert chain.verify(lines, KEY, complete=False).ok


def test_the_exchange_record_carries_the_usage_the_proxy_read() -> None:
    read = usage.TokenUsage(input_tokens=4, output_tokens=2, total_tokens=6)
    parsed = records.parse_object(objects.exchange(_seen("r", usage=read)))
    assert isinstance(parsed, records.Exchange)
    assert parsed.usage == read
    assert objects.exchange(_seen("r"))["usage"] is None


async def test_past_its_caps_a_cell_drops_exchanges_and_says_so_at_once(tmp_path: Path) -> None:
    """A target that makes many calls with 8 KiB paths fills only its own share: the rest
    are dropped and counted, the count goes on record at once and before the controller's
    records, blaming the agent (everything but its own calls fits), and the grade is not
    passed: errored, cause agent, naming how many were dropped."""
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, caps=recorder.Caps(records=50, bytes=20_000))
    await rec.open_cell("c", _meta("c"))
    for n in range(10):
        rec.start(None).finish(_seen("c", "/" + f"{n}" * 8192, principal="target"))
    await rec.flush_all()
    lines = await backend.read("c")
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds == ["cell-meta", "exchange", "exchange", "cell-meta"]  # 2 fit 20,000 bytes
    mark = json.loads(lines[-1])
    assert (mark["dropped"], mark["dropped_cause"]) == (8, "agent")
    assert (
        "the cell's share of the ledger (50 exchanges, 20000 bytes of exchanges) is full: "
        "the target's own traffic filled it" in (mark["dropped_why"])
    )
    assert sum(len(line) for line in lines) < 20_000 + 1_000
    rec.start(None).finish(_seen("c", "/later", principal="target"))  # dropped too
    await rec.append("c", records.CellEnd(status="passed"))
    lines = await backend.read("c")
    assert [json.loads(line)["kind"] for line in lines][-2:] == ["cell-meta", "cell-end"]
    assert json.loads(lines[-2])["dropped"] == 9
    assert (rec.dropped("c"), rec.recorded) == (9, 2)
    assert chain.verify(lines, KEY).ok
    expected = grading.ExpectedCell(test_id="c", repeat=0, run_id="c")
    grade = grading.grade_lines("c", lines, KEY, expected)
    assert (grade.status, grade.cause, grade.infra) == ("errored", "agent", False)
    # No run-result beside the target's calls: doubtful, and the gap is said with it.
    assert "the gateway had to drop 9 of the cell's exchanges" in (grade.error or "")


async def test_a_share_too_small_for_the_controllers_own_records_blames_the_infra(
    tmp_path: Path,
) -> None:
    """The controller's own calls overflow the cell's share (no target traffic at all): the
    operator's sizing is at fault, not the agent."""
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, caps=recorder.Caps(records=2, bytes=None))
    await rec.open_cell("c", _meta("c"))
    for n in range(4):
        rec.start(None).finish(_seen("c", f"/turn/{n}"))
    rec.start(None).finish(_seen("c", "/peer", principal="target", upstream="peer:logs"))
    await rec.append("c", records.CellEnd(status="passed"))
    lines = await backend.read("c")
    mark = json.loads(lines[-2])
    assert (mark["dropped"], mark["dropped_cause"]) == (3, "infra")
    assert "the controller's and peers' own records do not fit it" in mark["dropped_why"]
    grade = grading.grade_lines(
        "c", lines, KEY, grading.ExpectedCell(test_id="c", repeat=0, run_id="c")
    )
    assert (grade.status, grade.cause, grade.infra) == ("errored", "infra", True)


async def test_a_target_flooding_spans_and_calls_is_blamed_for_what_it_crowds_out(
    tmp_path: Path,
) -> None:
    """Spans take at most half the byte cap, the target's calls the rest: the controller's
    call after them is dropped, and that is the target's doing too."""
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, caps=recorder.Caps(records=None, bytes=6_000))
    await rec.open_cell("c", _meta("c"))
    spans = records.SpansRecord(
        principal="target", run_id="c", trace_id="ab" * 16, content_type="application/json",
        request_bytes=1, request_sha256="0" * 64,
        spans=[{"span_id": "cd" * 8, "note": "x" * 2_000}],
    )  # fmt: skip
    rec.note(spans)
    for n in range(6):
        rec.start(None).finish(_seen("c", f"/{n}" + "y" * 500, principal="target"))
    rec.start(None).finish(_seen("c", "/run"))  # the controller's: crowded out
    await rec.append("c", records.CellEnd(status="passed"))
    lines = await backend.read("c")
    assert json.loads(lines[-2])["dropped_cause"] == "agent"
    assert '"path":"/run"' not in "".join(lines)


async def test_a_cell_within_its_caps_records_everything(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY, caps=recorder.Caps(records=3, bytes=None))
    await rec.open_cell("c", _meta("c"))
    for _ in range(3):
        rec.start(None).finish(_seen("c"))
    await rec.append("c", records.CellEnd(status="passed"))
    assert await _kinds(backend, "c") == ["cell-meta", *["exchange"] * 3, "cell-end"]
    rec.start(None).finish(_seen("c"))  # after cell-end: unrouted, as before
    assert rec.dropped("c") == 0


async def test_a_write_the_store_refuses_is_counted_as_dropped(tmp_path: Path) -> None:
    """The store refuses a batch (a full ConfigMap): the cell is marked, not graded passed."""
    backend = filestore.FileBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    await rec.open_cell("c", _meta("c"))
    real = backend.append
    calls = 0

    async def refuse_once(cell: str, lines: list[str]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise errors.LedgerTooLarge("ledger configmap://ns/x would hold 2000000 bytes")
        await real(cell, lines)

    backend.append = refuse_once  # type: ignore[method-assign]
    rec.start(None).finish(_seen("c"))
    await rec.append("c", records.CellEnd(status="passed"))
    lines = await backend.read("c")
    assert [json.loads(line)["kind"] for line in lines] == ["cell-meta", "cell-meta", "cell-end"]
    assert "the ledger refused a write" in json.loads(lines[1])["dropped_why"]
    assert json.loads(lines[1])["dropped_cause"] == "infra"
    grade = grading.grade_lines(
        "c", lines, KEY, grading.ExpectedCell(test_id="c", repeat=0, run_id="c")
    )
    assert (grade.status, grade.infra) == ("errored", True)


class _CountingBackend(filestore.FileBackend):
    """A file ledger that counts its appends (each one a batch: a thread hop, a store call)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.batches: list[int] = []

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        self.batches.append(len(lines))
        await super().append(cell, lines)


async def test_exchanges_finishing_one_by_one_share_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls that end on different turns of the loop (a wave of answers) are written in one
    batch, not one write each; a flush writes what waits at once."""
    monkeypatch.setattr(recorder, "BATCH_SECONDS", 3600.0)  # only a flush or a full batch
    backend = _CountingBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    await rec.open_cell("c", _meta("c"))
    assert backend.batches == [1]  # the cell-meta
    for n in range(20):
        rec.start(None).finish(_seen("c", f"/{n}"))
        for _ in range(5):  # the drain gets every chance to run
            await asyncio.sleep(0)
    assert backend.batches == [1]
    await rec.append("c", records.CellEnd(status="passed"))
    assert backend.batches == [1, 20, 1]
    assert await _kinds(backend, "c") == ["cell-meta", *["exchange"] * 20, "cell-end"]
    assert rec.recorded == 20


async def test_a_full_batch_is_written_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "BATCH_SECONDS", 3600.0)
    monkeypatch.setattr(recorder, "BATCH_MAX", 4)
    backend = _CountingBackend(tmp_path)
    rec = recorder.Recorder(backend, KEY)
    await rec.open_cell("c", _meta("c"))
    for n in range(4):
        rec.start(None).finish(_seen("c", f"/{n}"))
    for _ in range(2000):  # a condition, generously bounded: no flush is coming
        if rec.recorded == 4:
            break
        await asyncio.sleep(0.01)
    assert backend.batches == [1, 4]
    assert rec.recorded == 4
