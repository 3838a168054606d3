"""The HMAC chain: keys, sealing, and tamper detection that names the first bad record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from agent_health.ledger import chain, errors, filestore, records
from hypothesis import given
from hypothesis import strategies as st

KEY = b"k" * 32
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
OTHER_KEY = b"x" * 32


def sealed_cell(signals: int = 4, key: bytes = KEY) -> list[str]:
    """A finished cell: meta, ``signals`` signals, end — as canonical lines."""
    sealer = chain.Sealer(key)
    items: list[records.Record] = [records.CellMeta(test_id="t", repeat=0, run_id="r")]
    items += [records.SignalRecord(signal={"i": i}) for i in range(signals)]
    items.append(records.CellEnd(status="passed", exit_code=0))
    return [records.dump_line(sealer.seal(item)) for item in items]


def edit(line: str, **changes: object) -> str:
    payload = json.loads(line)
    payload.update(changes)
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def test_an_untouched_chain_verifies() -> None:
    lines = sealed_cell()
    result = chain.verify(lines, KEY)
    assert result.ok
    assert result.records == 6
    assert result.ended
    assert result.last_mac == json.loads(lines[-1])["mac"]


def test_first_record_links_to_genesis() -> None:
    first = json.loads(sealed_cell()[0])
    assert first["seq"] == 0
    assert first["mac"] == chain.link(KEY, chain.GENESIS, first)


def test_delete_is_named() -> None:
    lines = sealed_cell()
    del lines[2]
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq, problem.reason) == (3, 2, "removed")
    assert "seq 2 removed" in problem.message


def test_delete_of_the_first_record_is_named() -> None:
    problem = chain.verify(sealed_cell()[1:], KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq, problem.reason) == (1, 0, "removed")


def test_reorder_is_named() -> None:
    lines = sealed_cell()
    lines[2], lines[3] = lines[3], lines[2]
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq, problem.reason) == (3, 2, "reordered")


def test_duplicate_is_named() -> None:
    lines = sealed_cell()
    lines.insert(3, lines[2])
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (4, "reordered")
    assert "appears again" in problem.message


def test_edited_field_is_named() -> None:
    lines = sealed_cell()
    lines[3] = edit(lines[3], signal={"i": 99})
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq, problem.reason) == (4, 3, "edited")
    assert "mac mismatch" in problem.message


def test_edited_mac_is_named() -> None:
    lines = sealed_cell()
    mac = json.loads(lines[1])["mac"]
    lines[1] = edit(lines[1], mac=("0" if mac[0] != "0" else "1") + mac[1:])
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (2, "edited")


def test_removed_mac_is_named() -> None:
    lines = sealed_cell()
    payload = json.loads(lines[2])
    del payload["mac"]
    lines[2] = json.dumps(payload)
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (3, "unsealed")


def test_truncated_last_record_is_named() -> None:
    lines = sealed_cell()[:-1]
    result = chain.verify(lines, KEY)
    assert not result.ok
    assert result.problem is not None
    assert (result.problem.line, result.problem.seq, result.problem.reason) == (6, 5, "truncated")
    # A running cell has no end yet; that is fine when asked for.
    assert chain.verify(lines, KEY, complete=False).ok


def test_half_written_last_line_is_bad_json() -> None:
    lines = sealed_cell()
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (6, "bad-json")


def test_forged_record_with_another_key_is_named() -> None:
    lines = sealed_cell()[:-1]
    last_mac = json.loads(lines[-1])["mac"]
    forger = chain.Sealer(OTHER_KEY, next_seq=len(lines), previous_mac=last_mac)
    lines.append(records.dump_line(forger.seal(records.CellEnd(status="passed"))))
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq, problem.reason) == (6, 5, "edited")


def test_a_whole_chain_with_another_key_fails_at_the_first_record() -> None:
    problem = chain.verify(sealed_cell(key=OTHER_KEY), KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (1, "edited")


def test_record_after_end_is_named() -> None:
    lines = sealed_cell()
    last_mac = json.loads(lines[-1])["mac"]
    late = chain.Sealer(KEY, next_seq=len(lines), previous_mac=last_mac)
    lines.append(records.dump_line(late.seal(records.SignalRecord(signal={}))))
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (7, "after-end")


def test_unknown_version_in_a_sealed_record_is_bad_record() -> None:
    meta = records.to_object(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    meta["version"] = 9
    meta["mac"] = chain.link(KEY, chain.GENESIS, meta)
    problem = chain.verify([json.dumps(meta)], KEY).problem
    assert problem is not None
    assert problem.reason == "bad-record"
    assert "unknown record version 9" in problem.message


def test_nan_in_a_line_is_not_json() -> None:
    lines = sealed_cell()
    lines[1] = lines[1].replace('"signal":{"i":0}', '"signal":{"i":NaN}')
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (2, "bad-json")
    assert "NaN: JSON has no NaN or Infinity" in problem.message


def test_a_line_nested_deeper_than_any_record_is_not_json() -> None:
    lines = sealed_cell()
    deep = "[" * 100_000 + "]" * 100_000  # a RecursionError in json.loads
    lines[1] = lines[1].replace('"signal":{"i":0}', f'"signal":{{"i":{deep}}}')
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.reason) == (2, "bad-json")
    assert "nested deeper than 256 levels" in problem.message


def test_blank_lines_keep_physical_line_numbers() -> None:
    lines = sealed_cell()
    lines.insert(1, "")
    lines[4] = edit(lines[4], signal={"i": -1})
    problem = chain.verify(lines, KEY).problem
    assert problem is not None
    assert (problem.line, problem.seq) == (5, 3)


def test_empty_ledger_is_truncated_when_complete() -> None:
    problem = chain.verify([], KEY).problem
    assert problem is not None
    assert problem.reason == "truncated"
    assert chain.verify([], KEY, complete=False).ok


def test_sealer_rules() -> None:
    sealer = chain.Sealer(KEY)
    with pytest.raises(errors.ChainError, match="first record of a cell must be cell-meta"):
        sealer.seal(records.SignalRecord(signal={}))
    sealer.seal(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    sealer.seal(records.CellEnd(status="failed"))
    with pytest.raises(errors.ChainError, match="cell has ended"):
        sealer.seal(records.SignalRecord(signal={}))


async def test_writer_refuses_a_batch_without_advancing(tmp_path: Path) -> None:
    writer = chain.Writer(filestore.FileBackend(tmp_path), "c", KEY)
    with pytest.raises(errors.ChainError):
        await writer.append(records.SignalRecord(signal={}))
    assert writer.next_seq == 0
    assert await writer.backend.read("c") == []


async def test_writer_open_resumes_a_stored_chain(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    first = chain.Writer(backend, "c", KEY)
    await first.append(records.CellMeta(test_id="t", repeat=0, run_id="r"))
    await first.append(records.SignalRecord(signal={"a": 1}))
    again = await chain.Writer.open(backend, "c", KEY)
    assert again.next_seq == 2
    await again.append(records.CellEnd(status="passed"))
    assert chain.verify(await backend.read("c"), KEY).ok
    with pytest.raises(errors.ChainError, match="cell has ended"):
        await (await chain.Writer.open(backend, "c", KEY)).append(records.SignalRecord(signal={}))


async def test_writer_open_refuses_a_broken_chain(tmp_path: Path) -> None:
    backend = filestore.FileBackend(tmp_path)
    lines = sealed_cell()[:-1]
    lines[2] = edit(lines[2], signal={"i": 7})
    await backend.append("c", lines)
    with pytest.raises(errors.ChainError, match=r"cell c: .*line 3 \(seq 2\): edited"):
        await chain.Writer.open(backend, "c", KEY)


def test_load_key_from_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"s" * 40 + b"\n")
    assert chain.load_key(path) == b"s" * 40


def test_load_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LEDGER_KEY", "e" * 32)
    assert chain.load_key(env="MY_LEDGER_KEY") == b"e" * 32


def test_load_key_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(chain.KEY_ENV, raising=False)
    with pytest.raises(
        errors.LedgerKeyError, match=r"no ledger key: .*--key-file.* or set AGENT_HEALTH_LEDGER_KEY"
    ):
        chain.load_key()
    with pytest.raises(errors.LedgerKeyError, match=r"cannot read the ledger key file .*/nope"):
        chain.load_key(tmp_path / "nope")
    short = tmp_path / "short"
    short.write_text("tiny")
    with pytest.raises(errors.LedgerKeyError, match=r"is 4 bytes; at least 32"):
        chain.load_key(short)


@given(
    data=st.data(),
    signals=st.integers(min_value=1, max_value=6),
)
def test_any_single_change_is_caught_at_or_before_that_record(
    data: st.DataObject, signals: int
) -> None:
    lines = sealed_cell(signals)
    index = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="record")
    action = data.draw(st.sampled_from(["edit", "delete", "swap", "truncate"]), label="action")
    if action == "edit":
        lines[index] = edit(lines[index], time="1999-01-01T00:00:00Z")
    elif action == "delete":
        del lines[index]
    elif action == "swap":
        other = data.draw(
            st.integers(min_value=0, max_value=len(lines) - 1).filter(lambda i: i != index)
        )
        lines[index], lines[other] = lines[other], lines[index]
        index = min(index, other)
    else:
        del lines[index:]
    result = chain.verify(lines, KEY)
    assert not result.ok
    assert result.problem is not None
    assert result.problem.line == index + 1


def test_a_sealed_line_is_the_canonical_json_of_the_sealed_record() -> None:
    """Sealer.line() serializes the keys either side of "mac" once each; the line must be
    byte for byte canonical(record with mac), nested "mac" keys and all."""
    key = b"k" * 32
    items = [
        records.CellMeta(test_id="t", repeat=0, run_id="r"),
        records.SignalRecord(signal={"mac": "nested", "a": [1, {"z": None, "b": 2.5}], "zz": "é"}),
        records.CellEnd(status="passed"),
    ]
    by_line, by_record = chain.Sealer(key), chain.Sealer(key)
    lines = [by_line.line(item) for item in items]
    assert lines == [records.dump_line(by_record.seal(item)) for item in items]
    assert chain.verify(lines, key).ok


def test_a_record_that_holds_the_sealers_placeholder_is_sealed_the_long_way() -> None:
    """Sealer.line() writes a random placeholder as the mac, then replaces it; data that
    holds the same field (a nested "mac" with that value) must not confuse the two."""
    key = b"k" * 32
    by_line, by_record = chain.Sealer(key), chain.Sealer(key)
    placeholder = by_line._placeholder.decode("ascii")
    items = [
        records.CellMeta(test_id="t", repeat=0, run_id="r"),
        records.SignalRecord(signal={"mac": placeholder, "note": f'"mac":"{placeholder}"'}),
        records.CellEnd(status="passed"),
    ]
    lines = [by_line.line(item) for item in items]
    assert lines == [records.dump_line(by_record.seal(item)) for item in items]
    assert chain.verify(lines, key).ok


def test_a_sealed_lines_bytes_are_its_text_the_long_way_too() -> None:
    """What the run file writes (line_bytes_of, no text in between) is line_of's line, also
    for a record sealed the long way (its data holds the placeholder), and chains alike."""
    key = b"k" * 32
    as_text, as_bytes = chain.Sealer(key), chain.Sealer(key)
    placeholder = as_bytes._placeholder.decode("ascii")
    as_text._placeholder, as_text._placeholder_text = as_bytes._placeholder, placeholder
    as_text._placeholder_field = as_bytes._placeholder_field
    items = [
        records.CellMeta(test_id="t", repeat=0, run_id="r"),
        records.SignalRecord(signal={"mac": placeholder, "note": "é"}),
        records.CellEnd(status="passed"),
    ]
    texts = [as_text.line_of(records.to_object(i, with_mac=False)) for i in items]
    raw = [as_bytes.line_bytes_of(records.to_object(i, with_mac=False)) for i in items]
    assert [line.encode("ascii") for line in texts] == raw
    assert as_text.previous_mac == as_bytes.previous_mac
    assert chain.verify(texts, key).ok


def test_a_keyed_mac_is_hmac_sha256_of_its_parts_and_keeps_no_state_between_calls() -> None:
    import hashlib
    import hmac

    mac = chain.Mac(KEY)
    for parts in ([b"a", b"bc"], [b""], [chain.GENESIS.encode(), b'{"k":1}']):
        assert mac.hex(*parts) == hmac.new(KEY, b"".join(parts), hashlib.sha256).hexdigest()
    assert mac.hex(b"abc") == mac.hex(b"abc")


def test_forked_sealers_chain_alike_and_apart() -> None:
    """Cells sealed from forks of one sealer (a local run's) are each their own chain."""
    template = chain.Sealer(KEY)
    lines = {}
    for cell in ("a", "b"):
        sealer = template.fork()
        meta = records.CellMeta(test_id=cell, repeat=0, run_id=cell, time=T0, started_at=T0)
        end = records.CellEnd(status="passed", time=T0)
        lines[cell] = [sealer.line(meta), sealer.line(end)]
        fresh = chain.Sealer(KEY)
        assert lines[cell] == [fresh.line(meta), fresh.line(end)]
        assert chain.verify(lines[cell], KEY).ok
    assert template.next_seq == 0
