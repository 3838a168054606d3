"""A cell's ledger carried on its gateway's log: framed by the real recorder, taken back out
whole or not at all (:mod:`agent_health.ledger.podlog`)."""

from __future__ import annotations

import io
import logging

import pytest
from agent_health.gateway import command, config, recorder
from agent_health.gateway import errors as gateway_errors
from agent_health.ledger import chain, errors, podlog, records
from support.gateway_support import KEY


async def _logged(cell: str = "cell-a", *, end: bool = True) -> tuple[bytes, list[str]]:
    """A gateway's log: a diagnostic line, the cell's framed records, another diagnostic."""
    sink = io.BytesIO()
    sink.write(b"2026-01-01 00:00:00,000 INFO gateway: listening\n")
    backend = podlog.LogBackend(sink)
    recording = recorder.Recorder(backend, KEY, default_cell=cell)
    await recording.open_cell(cell, records.CellMeta(test_id="t", repeat=0, run_id=cell))
    await recording.append(cell, records.SignalRecord(signal={"ok": True}))
    if end:
        await recording.append(cell, records.CellEnd(status="passed"))
    sink.write(b"2026-01-01 00:00:01,000 INFO gateway: stopping (grace 30s)\n")
    if end:
        await recording.close()
    return sink.getvalue(), await backend.read(cell)


async def test_the_records_come_back_whole_between_diagnostics() -> None:
    log, written = await _logged()
    text = log.decode()
    assert all(
        line.startswith(f"{podlog.MARKER} ") or line.startswith("2026-")
        for line in text.splitlines()
    )
    lines = podlog.extract(text, "cell-a")
    assert lines == written
    assert [records.parse_line(line).kind for line in lines] == ["cell-meta", "signal", "cell-end"]
    assert chain.verify(lines, KEY).ok
    # Another cell's frames in the same log are not this cell's.
    other, _ = await _logged("cell-b")
    assert podlog.extract(text + other.decode(), "cell-b") == podlog.extract(
        other.decode(), "cell-b"
    )


async def test_a_log_cut_short_or_missing_holds_no_ledger() -> None:
    log, _ = await _logged()
    text = log.decode()
    frames = [line for line in text.splitlines() if line.startswith(podlog.MARKER)]
    cut = "\n".join(text.splitlines()[:-2]) + "\n"  # the end frame and a diagnostic lost
    with pytest.raises(errors.LedgerLogError, match="without an end frame"):
        podlog.extract(cut, "cell-a")
    with pytest.raises(errors.LedgerLogError, match="holds no ledger record"):
        podlog.extract("2026-01-01 INFO nothing else\n", "cell-a")
    without_one = text.replace(frames[1] + "\n", "")  # a record lost from the middle
    with pytest.raises(errors.LedgerLogError, match=r"counts 3 records .* the log holds 2"):
        podlog.extract(without_one, "cell-a")
    edited = text.replace(frames[-1], frames[-1][:-4] + "0000")  # the head changed
    with pytest.raises(errors.LedgerLogError, match="records were lost or edited"):
        podlog.extract(edited, "cell-a")


async def test_a_gateway_stopped_mid_cell_closes_what_it_sealed() -> None:
    """No cell-end, but its end frame counts what it sealed: the log is whole, and the chain
    (complete=True) says the cell never ended."""
    sink = io.BytesIO()
    recording = recorder.Recorder(podlog.LogBackend(sink), KEY, default_cell="c")
    await recording.open_cell("c", records.CellMeta(test_id="t", repeat=0, run_id="c"))
    await recording.close()
    lines = podlog.extract(sink.getvalue().decode(), "c")
    assert len(lines) == 1
    assert chain.verify(lines, KEY).problem is not None
    assert chain.verify(lines, KEY, complete=False).ok


def test_a_diagnostic_cannot_start_a_frame() -> None:
    """A message quoting what the target sent stays on one line: no line break of it can
    start a line with the frame marker."""
    formatter = command.OneLineFormatter("%(levelname)s %(message)s")
    forged = f"GET /x\n{podlog.MARKER} record cell-a {{}}\r\n"
    record = logging.LogRecord("g", logging.WARNING, __file__, 1, "path %s", (forged,), None)
    text = formatter.format(record)
    assert "\n" not in text
    assert "\r" not in text
    with pytest.raises(errors.LedgerLogError, match="holds no ledger record"):
        podlog.extract(text + "\n", "cell-a")


def test_a_logging_gateway_names_no_store() -> None:
    route = config.parse_route("principal=controller,listen=127.0.0.1:0,upstream=http://x:9")
    with pytest.raises(gateway_errors.GatewayConfigError, match="no ledger_url or spool"):
        config.build({"routes": [route], "ledger_log": True, "ledger_url": "file:///tmp/x"})
    assert config.build({"routes": [route], "ledger_log": True}).ledger_log
