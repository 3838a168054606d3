"""The spool: a cell's lines wait on local disk and reach the store in one append."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from agent_health.ledger import chain, errors, filestore, records, spool
from support import ledger_support

KEY = b"s" * 32


@dataclasses.dataclass
class Counting:
    """A file store that counts its appends (each one a write to the store)."""

    inner: filestore.FileBackend
    appends: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    fail: bool = False
    closed: bool = False

    @property
    def url(self) -> str:
        return self.inner.url

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        if self.fail:
            raise errors.BackendError("the store is down")
        self.appends.append((cell, len(lines)))
        await self.inner.append(cell, lines)

    async def read(self, cell: str) -> list[str]:
        return await self.inner.read(cell)

    async def cells(self) -> list[str]:
        return await self.inner.cells()

    async def flush(self) -> None:
        await self.inner.flush()

    async def close(self) -> None:
        self.closed = True


def _store(tmp_path: Path) -> Counting:
    return Counting(filestore.FileBackend(tmp_path / "ledger"))


def _cell(n_exchanges: int) -> list[records.Record]:
    found: list[records.Record] = [records.CellMeta(test_id="t", repeat=0, run_id="r")]
    found += [
        ledger_support.exchange(
            run_id="r",
            path=f"/run/{n}",
            started_at=datetime.now(UTC),
            ended_at=datetime.now(UTC),
            request_bytes=1,
            response_bytes=1,
            response_sha256="0" * 64,
        )
        for n in range(n_exchanges)
    ]
    return found


async def test_a_cell_reaches_the_store_in_one_append_when_flushed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    spooled = spool.SpooledBackend(store, tmp_path / "spool")
    writer = chain.Writer(spooled, "c1", KEY)
    for record in _cell(3):  # the meta and each exchange come one batch at a time
        await writer.append(record)
    end = records.CellEnd(status="passed", exit_code=0, duration_ms=1)
    await writer.append(end)
    assert store.appends == []  # nothing left the gateway's disk yet
    lines = await spooled.read("c1")  # but the chain reads whole, as a restarted gateway reads it
    assert chain.verify(lines, KEY).ok
    await spooled.flush()
    assert store.appends == [("c1", 5)]
    assert await store.read("c1") == lines
    assert not (tmp_path / "spool" / "c1.jsonl").exists()
    await spooled.flush()  # nothing new: no write
    assert store.appends == [("c1", 5)]
    assert spooled.writes == 1


async def test_a_spool_past_its_limit_is_sent_early(tmp_path: Path) -> None:
    store = _store(tmp_path)
    spooled = spool.SpooledBackend(store, tmp_path / "spool", max_bytes=2000)
    writer = chain.Writer(spooled, "c1", KEY)
    for record in _cell(12):
        await writer.append(record)
    assert len(store.appends) >= 2  # a few early sends, not one per record
    assert len(store.appends) <= 4
    await spooled.flush()
    assert chain.verify(await store.read("c1"), KEY, complete=False).records == 13


async def test_a_restarted_writer_finds_the_spool_and_continues_the_chain(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    first = spool.SpooledBackend(store, tmp_path / "spool")
    writer = chain.Writer(first, "c1", KEY)
    for record in _cell(2):
        await writer.append(record)
    # The process dies here: nothing was sent. Its successor opens the same directory.
    again = spool.SpooledBackend(store, tmp_path / "spool")
    resumed = await chain.Writer.open(again, "c1", KEY)
    assert resumed.next_seq == 3
    await resumed.append(records.CellEnd(status="passed", exit_code=0, duration_ms=1))
    await again.flush()
    assert store.appends == [("c1", 4)]
    assert chain.verify(await store.read("c1"), KEY).ok


async def test_lines_sent_before_a_crash_are_not_sent_twice(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = spool.SpooledBackend(store, tmp_path / "spool")
    writer = chain.Writer(first, "c1", KEY)
    for record in _cell(2):
        await writer.append(record)
    spooled_file = tmp_path / "spool" / "c1.jsonl"
    kept = spooled_file.read_bytes()
    await first.flush()
    spooled_file.write_bytes(kept)  # as if the process died between the send and the truncate
    again = spool.SpooledBackend(store, tmp_path / "spool")
    resumed = await chain.Writer.open(again, "c1", KEY)
    assert resumed.next_seq == 3
    await resumed.append(records.CellEnd(status="passed", exit_code=0, duration_ms=1))
    await again.flush()
    assert store.appends == [("c1", 3), ("c1", 1)]
    assert chain.verify(await store.read("c1"), KEY).ok


async def test_a_failed_send_keeps_the_lines_for_the_next_flush(tmp_path: Path) -> None:
    store = _store(tmp_path)
    spooled = spool.SpooledBackend(store, tmp_path / "spool")
    writer = chain.Writer(spooled, "c1", KEY)
    for record in _cell(1):
        await writer.append(record)
    store.fail = True
    with pytest.raises(errors.BackendError, match="the store is down"):
        await spooled.close()
    assert store.closed  # closed even so
    assert await spooled.cells() == ["c1"]
    store.fail = False
    await spooled.flush()
    assert store.appends == [("c1", 2)]


async def test_cells_lists_the_store_and_the_spool(tmp_path: Path) -> None:
    store = _store(tmp_path)
    spooled = spool.SpooledBackend(store, tmp_path / "spool")
    await chain.Writer(spooled, "a", KEY).append(_cell(0)[0])
    await spooled.flush()
    await chain.Writer(spooled, "b", KEY).append(_cell(0)[0])
    assert await spooled.cells() == ["a", "b"]


def test_an_unusable_spool_directory_is_a_clear_error(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    with pytest.raises(errors.BackendConfigError, match=r"spool directory .* not writable"):
        spool.check_directory(taken / "spool")


def test_the_spool_refuses_a_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(errors.BackendConfigError, match="max_bytes"):
        spool.SpooledBackend(_store(tmp_path), tmp_path, max_bytes=0)
