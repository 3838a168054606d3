"""Auditing a whole ledger, and the ``agent-health ledger verify`` command."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agent_health import cli
from agent_health.ledger import audit, chain, errors, filestore, records

KEY = b"a" * 32


async def write_cells(directory: Path, *cells: str, end: bool = True) -> None:
    backend = filestore.FileBackend(directory)
    for cell in cells:
        writer = chain.Writer(backend, cell, KEY)
        await writer.append(records.CellMeta(test_id=cell, repeat=0, run_id="r"))
        await writer.append(records.SignalRecord(signal={"passed": True}))
        if end:
            await writer.append(records.CellEnd(status="passed", exit_code=0))


def tamper(path: Path, index: int) -> None:
    lines = path.read_text().splitlines()
    payload = json.loads(lines[index])
    payload["time"] = "2000-01-01T00:00:00Z"
    lines[index] = json.dumps(payload)
    path.write_text("\n".join(lines) + "\n")


async def test_every_cell_is_verified(tmp_path: Path) -> None:
    await write_cells(tmp_path, "c1", "c2", "c3")
    report = await audit.verify_url(str(tmp_path), KEY)
    assert report.ok
    assert [c.cell for c in report.cells] == ["c1", "c2", "c3"]
    assert report.first_bad is None
    assert str(report.cells[0]) == "c1: ok (3 records)"


async def test_first_bad_cell_is_named(tmp_path: Path) -> None:
    await write_cells(tmp_path, "c1", "c2", "c3")
    tamper(tmp_path / "c2.jsonl", 1)
    tamper(tmp_path / "c3.jsonl", 0)
    report = await audit.verify_url(f"file://{tmp_path}", KEY)
    assert not report.ok
    assert report.first_bad is not None
    assert str(report.first_bad) == (
        "c2: line 2 (seq 1): edited: mac mismatch: the record or its mac was changed, "
        "or another key wrote it"
    )


async def test_one_cell_file(tmp_path: Path) -> None:
    await write_cells(tmp_path, "c1", "c2")
    report = await audit.verify_url(str(tmp_path / "c2.jsonl"), KEY)
    assert [c.cell for c in report.cells] == ["c2"]
    with pytest.raises(errors.BackendError, match="no ledger file"):
        await audit.verify_url(str(tmp_path / "c9.jsonl"), KEY)


async def test_open_cells(tmp_path: Path) -> None:
    await write_cells(tmp_path, "c1", end=False)
    assert not (await audit.verify_url(str(tmp_path), KEY)).ok
    assert (await audit.verify_url(str(tmp_path), KEY, complete=False)).ok


async def test_no_cells_is_not_ok(tmp_path: Path) -> None:
    report = await audit.verify_url(str(tmp_path / "nothing"), KEY)
    assert report.cells == []
    assert not report.ok


def run_cli(*args: str) -> int:
    return cli.main(["ledger", "verify", *args])


async def test_cli_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await write_cells(tmp_path / "ledger", "c1", "c2")
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    monkeypatch.delenv(chain.KEY_ENV, raising=False)

    assert (
        await asyncio.to_thread(run_cli, str(tmp_path / "ledger"), "--key-file", str(key_file)) == 0
    )
    assert "2 cells verified" in capsys.readouterr().out

    tamper(tmp_path / "ledger" / "c2.jsonl", 2)
    code = await asyncio.to_thread(run_cli, str(tmp_path / "ledger"), "--key-file", str(key_file))
    assert code == 1
    err = capsys.readouterr().err
    assert "tampered:" in err
    assert "c2: line 3 (seq 2): edited" in err

    monkeypatch.setenv(chain.KEY_ENV, (b"z" * 32).decode())
    one_cell = f"file://{tmp_path / 'ledger' / 'c1.jsonl'}"
    assert await asyncio.to_thread(run_cli, one_cell) == 1
    assert "c1: line 1 (seq 0): edited" in capsys.readouterr().err


async def test_cli_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(chain.KEY_ENV, raising=False)
    assert await asyncio.to_thread(run_cli, str(tmp_path)) == 2
    assert "no ledger key" in capsys.readouterr().err
    monkeypatch.setenv(chain.KEY_ENV, KEY.decode())
    assert await asyncio.to_thread(run_cli, str(tmp_path)) == 2
    assert "no ledger cells found" in capsys.readouterr().err
    assert await asyncio.to_thread(run_cli, "ftp://x/y") == 2
    assert "unknown ledger URL scheme" in capsys.readouterr().err
