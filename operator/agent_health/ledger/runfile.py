"""One file for a whole local run: every cell's records in ``DIR/run.jsonl``, sealed at the end.

A local ``agent-health run`` records every (test, repeat) that ran the agent as a cell, like a
cluster does, but into one append-only file instead of one file per cell. Each line holds
one record of one cell::

    {"cell":"test_a.py-one.5d2c0b1e.r0","record":{...the cell's record, as in CELL.jsonl...}}

so each cell's records, read in file order, are exactly its chain (:mod:`.chain`) and verify
as they would in their own file. The last line seals the run::

    {"seal":{"cells":{"CELL":{"mac":"<its last mac>","records":N},...},"records":TOTAL,
     "refused":{"CELL":"why"},"version":1},
     "mac":"<HMAC-SHA256(key, 'run-seal:' || canonical(seal))>"}

A cell whose lines were removed whole, or added after the end, leaves the chains intact but
not the seal; a file without a seal is a run that did not finish (or was cut). ``refused``
(only when there are any) names the cells whose records could not be sealed (a value JSON
cannot hold, such as NaN): they have no lines, and the seal says so, so no reader takes
their absence for a run that never had them.

Writing costs the event loop almost nothing: :meth:`RunFile.append_cell` buffers a cell's
records — as JSON objects, or a function that makes them — with the sealer of its chain and
returns; a background task hands the buffer to a worker thread every ``flush_delay`` seconds
(sooner when ``flush_bytes`` are waiting, or at once when the run closes), one batch at a
time and in order, and the thread makes the records, seals them (canonical JSON and an HMAC
each, most of what recording a cell costs), frames them and writes them. A caller that
never waits — tests that answer in-process never let the loop reach the writer — waits in
:meth:`RunFile.room` while ``wait_bytes`` are buffered, so what waits to be written stays
bounded (about two such batches), not the whole run.
:meth:`RunFile.close` writes the rest and the seal, then ``fsync``\\ s once: a run that is
killed mid-way loses at most its last unwritten buffer, which the missing seal tells.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from agent_health.ledger import chain, encoding, errors, strictjson

NAME = "run.jsonl"
"""The run file in a ledger directory (a name no cell may take)."""
SEAL_VERSION = 1
_SEAL_DOMAIN = b"run-seal:"  # a seal's MAC can never be taken for a record's (hex || JSON)


def frame(cell: str, line: str) -> str:
    """The run-file line that holds ``line`` (a sealed record) of ``cell``."""
    return f'{{"cell":{json.dumps(cell)},"record":{line}}}'


def seal_line(
    key: bytes, cells: Mapping[str, tuple[int, str]], refused: Mapping[str, str] | None = None
) -> str:
    """The seal of a run whose cells end as given: ``cell → (records, last mac)``; and the
    cells whose records could not be sealed, with why (``refused``, only when there are)."""
    seal: dict[str, Any] = {
        "cells": {name: {"mac": mac, "records": n} for name, (n, mac) in sorted(cells.items())},
        "records": sum(n for n, _ in cells.values()),
        "version": SEAL_VERSION,
    }
    if refused:  # a seal without refusals is byte for byte what older runs wrote
        seal["refused"] = dict(sorted(refused.items()))
    mac = _seal_mac(key, seal)
    return encoding.canonical({"mac": mac, "seal": seal}).decode("ascii")


def _seal_mac(key: bytes, seal: Any) -> str:
    return hmac.new(key, _SEAL_DOMAIN + encoding.canonical(seal), hashlib.sha256).hexdigest()


@dataclass(eq=False, repr=False)
class Parsed:
    """A run file read back: each cell's record lines, the seal, and lines that are neither."""

    path: Path
    cells: dict[str, list[str]] = field(default_factory=dict)
    seal: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


def parse(path: Path, text: str) -> Parsed:
    """Split a run file into its cells (line order kept), its seal and its problems."""
    parsed = Parsed(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if parsed.seal is not None:
            parsed.problems.append(f"{path.name} line {number}: a line after the seal")
            continue
        try:
            payload = strictjson.loads(line)
        except ValueError as err:
            parsed.problems.append(f"{path.name} line {number}: not JSON ({err})")
            continue
        if isinstance(payload, dict) and set(payload) == {"seal", "mac"}:
            parsed.seal = payload
            continue
        cell = payload.get("cell") if isinstance(payload, dict) else None
        record = payload.get("record") if isinstance(payload, dict) else None
        if not isinstance(cell, str) or not isinstance(record, dict):
            parsed.problems.append(
                f'{path.name} line {number}: not a {{"cell": ..., "record": {{...}}}} line'
            )
            continue
        prefix = f'{{"cell":{json.dumps(cell)},"record":'
        # The record's own text when the line is as written; re-encoded when it was reformatted
        # (the chain recomputes each MAC from the data, so both verify alike).
        if line.startswith(prefix) and line.endswith("}"):
            text_of_record = line[len(prefix) : -1]
        else:
            text_of_record = json.dumps(record)
        parsed.cells.setdefault(cell, []).append(text_of_record)
    return parsed


def refused_in(parsed: Parsed) -> dict[str, str]:
    """The cells the seal says could not be sealed, and why (read it only once
    :func:`check_seal` holds: the seal's mac covers the list)."""
    seal = parsed.seal.get("seal") if parsed.seal is not None else None
    refused = seal.get("refused") if isinstance(seal, dict) else None
    if not isinstance(refused, dict):
        return {}
    return {str(cell): str(why) for cell, why in refused.items()}


def check_seal(key: bytes, parsed: Parsed, chains: Mapping[str, tuple[int, str]]) -> str | None:
    """Why the run file's seal does not hold, given each cell's verified ``(records, last
    mac)``; ``None`` when it holds."""
    if parsed.seal is None:
        return f"{parsed.path.name} has no seal: the run did not finish, or its end was cut off"
    seal, mac = parsed.seal.get("seal"), parsed.seal.get("mac")
    if not isinstance(seal, dict) or not isinstance(mac, str):
        return f"{parsed.path.name}: the seal line is malformed"
    if not hmac.compare_digest(_seal_mac(key, seal), mac):
        return f"{parsed.path.name}: the seal's mac does not match (edited, or another key)"
    sealed = seal.get("cells")
    if not isinstance(sealed, dict):
        return f"{parsed.path.name}: the seal lists no cells"
    for cell in sorted(set(sealed) | set(chains)):
        if cell not in chains:
            return f"{parsed.path.name}: cell {cell} is sealed but its records are gone"
        if cell not in sealed:
            return f"{parsed.path.name}: cell {cell} was added after the run was sealed"
        entry = sealed[cell]
        n, last = chains[cell]
        if not isinstance(entry, dict) or (entry.get("records"), entry.get("mac")) != (n, last):
            return (
                f"{parsed.path.name}: cell {cell} does not end where the seal says "
                "(records removed from its end, or added)"
            )
    return None


Records = list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]
"""A cell's records as JSON objects, or a function the writer thread calls to make them."""


class _Cell(NamedTuple):
    """A cell's records waiting for the writer thread, with the sealer of its chain."""

    name: str
    sealer: chain.Sealer
    items: Records


RECORD_BYTES = 600
"""About what one record's line takes: how a cell waiting to be sealed counts towards
``flush_bytes``."""


class RunFile:
    """Appends framed lines to ``DIR/run.jsonl`` off the event loop, then seals it."""

    def __init__(
        self,
        directory: Path,
        *,
        flush_delay: float = 0.25,
        flush_bytes: int = 1024 * 1024,
        wait_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.directory = directory
        self.path = directory / NAME
        self.url = f"file://{directory}"
        self._delay = flush_delay
        self._limit = flush_bytes
        self._wait = max(wait_bytes, flush_bytes)  # room() waits from here
        self._buffer: list[bytes | _Cell] = []
        self._buffered = 0
        self.chains: dict[str, tuple[int, str]] = {}
        """Each sealed cell's chain end, ``(records, last mac)``: what the seal lists."""
        self.refused: dict[str, str] = {}
        """Cells whose records could not be sealed (not JSON), and why: not written, but
        named in the seal, so ``ledger verify`` counts them."""
        self.refused_kinds: dict[str, str] = {}
        """The kind of each refused cell's record that could not be sealed (``run-result``:
        the agent's answer); none when its records could not even be made."""
        self._wake = asyncio.Event()  # something is buffered
        self._now = asyncio.Event()  # write without waiting: closing, or flush_bytes buffered
        self._taken = asyncio.Event()  # the writer took the buffer (set, then replaced)
        self._closing = False
        self._writer: asyncio.Task[None] | None = None
        self._fd: int | None = None
        self.error: errors.BackendError | None = None

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        """Buffer ``lines`` (already sealed) of ``cell``; they reach the file within
        ``flush_delay`` seconds."""
        data = "".join(frame(cell, line) + "\n" for line in lines).encode("ascii")
        self._buffer.append(data)
        self._buffered += len(data)
        self._kick()

    def append_cell(
        self, cell: str, sealer: chain.Sealer, items: Records, *, count: int | None = None
    ) -> None:
        """Buffer a whole cell's records (JSON objects: ``records.to_object``, or
        :mod:`.objects`), to be sealed by ``sealer`` in the writer thread and written within
        ``flush_delay`` seconds. Its chain's end is then in :attr:`chains`; a cell whose
        records cannot be made or sealed is left out and named in :attr:`refused`.

        ``items`` may be a function that makes the records, called in the writer thread: what
        it reads must not change meanwhile (frozen models, finished observations). ``count``
        is then about how many it makes (what the cell counts towards ``flush_bytes``).
        """
        self._buffer.append(_Cell(cell, sealer, items))
        made = count if callable(items) else len(items)
        self._buffered += RECORD_BYTES * (made or 1)
        self._kick()

    async def room(self) -> None:
        """Return once fewer than ``wait_bytes`` are buffered (at once, usually). While more
        are, wait for the writer to take them: a run whose tests never wait for anything
        would otherwise never let the writer in, and keep every cell in memory to the end.

        Waiting from ``wait_bytes``, not ``flush_bytes``: every batch handed over while the
        tests keep the event loop busy costs both threads their turns at the interpreter (a
        tenth more CPU for 2,000 instant tests at one batch a megabyte)."""
        while self._buffered >= self._wait and self.error is None and not self._closing:
            writer = self._writer
            if writer is None or writer.done():
                return
            taken = asyncio.ensure_future(self._taken.wait())
            try:
                await asyncio.wait({taken, writer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                taken.cancel()

    def _kick(self) -> None:
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_loop())
        if self._buffered >= self._limit:
            self._now.set()
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            if not self._now.is_set():
                # Let more lines gather into one write, but not past close(): a run's end
                # never waits out the delay (it cost every run a quarter of a second).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._delay):
                        await self._now.wait()
            self._wake.clear()
            if not self._closing:
                self._now.clear()
            batch, self._buffer, self._buffered = self._buffer, [], 0
            self._taken.set()
            self._taken = asyncio.Event()
            if batch and self.error is None:
                try:
                    await asyncio.to_thread(self._write_batch, batch)
                except errors.BackendError as err:
                    self.error = err
            if self._closing and not self._buffer:
                return

    def _write_batch(self, batch: list[bytes | _Cell]) -> None:
        """In the writer thread: seal the cells of ``batch``, then write it all at once."""
        parts = []
        for item in batch:
            if isinstance(item, bytes):
                parts.append(item)
                continue
            try:
                made = item.items() if callable(item.items) else item.items
            except Exception as err:  # a cell that cannot be recorded fails alone, named
                self.refused[item.name] = f"its records could not be made: {err!r}"
                continue
            lines: list[bytes] = []
            kind = ""
            try:
                for record in made:
                    kind = str(record.get("kind", ""))
                    lines.append(item.sealer.line_bytes_of(record))
            except errors.LedgerError as err:
                self.refused[item.name] = f"its {kind} record: {err}"
                self.refused_kinds[item.name] = kind
                continue
            if lines:
                # frame() of each line as bytes, the cell's name framed once for all of them:
                # the sealed lines are ASCII bytes, written without a round trip through text.
                head, tail = frame(item.name, "\0").encode("ascii").split(b"\0")
                end = tail + b"\n"
                parts.append(head + (end + head).join(lines) + end)
            self.chains[item.name] = (item.sealer.next_seq, item.sealer.previous_mac)
        self._write(b"".join(parts))

    def _write(self, data: bytes) -> None:
        if not data:
            return
        try:
            if self._fd is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as err:
            raise errors.BackendError(
                f"cannot append to ledger {self.path}: {err.strerror or err}"
            ) from err

    async def close(self, seal: str | None = None, *, key: bytes | None = None) -> None:
        """Write what is buffered and the seal (the last line), ``fsync`` once, close.

        The seal is ``seal`` as given, or, with ``key``, made from :attr:`chains` once every
        buffered cell is sealed (none when no cell was). Raises
        :class:`~agent_health.ledger.errors.BackendError` when a write failed.
        """
        if seal is not None:
            self._buffer.append(seal.encode("ascii") + b"\n")
        await self._drain()
        if key is not None and (self.chains or self.refused) and self.error is None:
            sealed = seal_line(key, self.chains, self.refused)
            self._buffer.append(sealed.encode("ascii") + b"\n")
            self._writer = None
            await self._drain()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            await asyncio.to_thread(_sync_and_close, fd)
        if self.error is not None:
            raise self.error

    async def _drain(self) -> None:
        """Write everything buffered now, and wait for it (the writer then ends)."""
        if self._writer is not None or self._buffer:
            if self._writer is None:
                self._writer = asyncio.create_task(self._write_loop())
            self._closing = True
            self._now.set()
            self._wake.set()
            await self._writer


def _sync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
