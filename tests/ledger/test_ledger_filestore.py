"""The file backend and URL dispatch: durable appends, order under concurrency, clear errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agent_health.ledger import backends, chain, errors, filestore, records, store

KEY = b"f" * 32


async def test_append_read_and_cells(tmp_path: Path) -> None:
    backend = backends.from_url(f"file://{tmp_path}/ledger")
    assert await backend.cells() == []
    assert await backend.read("a") == []
    await backend.append("b", ["one", "two"])
    await backend.append("a", ["x"])
    await backend.append("b", ["three"])
    await backend.append("b", [])
    assert await backend.read("b") == ["one", "two", "three"]
    assert await backend.cells() == ["a", "b"]
    assert (tmp_path / "ledger" / "b.jsonl").read_text() == "one\ntwo\nthree\n"
    await backend.flush()
    await backend.close()


async def test_many_concurrent_writer_appends_keep_seq_order(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    writer = chain.Writer(backend, "cell-0", KEY)
    await writer.append(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    await asyncio.gather(
        *(writer.append(records.SignalRecord(signal={"n": n})) for n in range(200))
    )
    await writer.append(records.CellEnd(status="passed"))
    lines = await backend.read("cell-0")
    assert [json.loads(line)["seq"] for line in lines] == list(range(202))
    assert chain.verify(lines, KEY).ok


async def test_concurrent_raw_batches_never_interleave(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    batches = [[f"{b}-{i}" for i in range(5)] for b in range(50)]
    await asyncio.gather(*(backend.append("c", batch) for batch in batches))
    lines = await backend.read("c")
    assert len(lines) == 250
    assert [lines[i : i + 5] for i in range(0, 250, 5)] == batches


def test_plain_path_is_a_directory(tmp_path: Path) -> None:
    backend = backends.from_url(str(tmp_path))
    assert isinstance(backend, filestore.FileBackend)
    assert backend.url == f"file://{tmp_path}"


def test_unknown_scheme_lists_the_schemes() -> None:
    with pytest.raises(errors.BackendConfigError) as info:
        backends.from_url("ftp://host/ledger")
    message = str(info.value)
    assert "unknown ledger URL scheme 'ftp'" in message
    for scheme in ("configmap://", "file://", "gs://", "s3://"):
        assert scheme in message


def test_user_backends_join_the_table(tmp_path: Path) -> None:
    def make(url: str, options: store.Options) -> store.Backend:
        return filestore.FileBackend(tmp_path / url.removeprefix("mine://"))

    backend = backends.from_url("mine://sub", extra={"mine": make})
    assert isinstance(backend, store.Backend)
    assert backend.url == f"file://{tmp_path}/sub"
    assert "mine" in backends.schemes({"mine": make})


@pytest.mark.parametrize("cell", ["", "../escape", "a/b", "-x", "sp ace", "x" * 201])
async def test_bad_cell_names_are_refused(tmp_path: Path, cell: str) -> None:
    with pytest.raises(errors.BackendConfigError, match="bad cell name"):
        await filestore.FileBackend(tmp_path).append(cell, ["x"])


async def test_a_line_with_a_newline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.BackendError, match="must not contain a newline"):
        await filestore.FileBackend(tmp_path).append("c", ["a\nb"])


async def test_unwritable_directory_is_a_backend_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(errors.BackendError, match=r"cannot append to ledger .*file/c\.jsonl"):
        await filestore.FileBackend(blocker).append("c", ["x"])


def test_empty_file_url_is_refused() -> None:
    with pytest.raises(errors.BackendConfigError, match="names no directory"):
        backends.from_url("file://")
