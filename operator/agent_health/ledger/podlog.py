"""A cell's ledger on its gateway's standard output, for the operator to collect.

With a ConfigMap ledger, a cell's gateway does not talk to the Kubernetes API at all: it
writes each batch of sealed ledger lines to its standard output (the container's log) as it
seals them, and the operator, once the cell's pod has ended, reads that log (``GET
pods/NAME/log``, a read), verifies the chain and writes many cells into the run's ConfigMap
in one merge patch (``agent_health.cluster.reconcile.collector``). So a cell costs the API
server no ledger write of its own, and the gateway holds no API credential.

The log carries the gateway's diagnostics too (on standard error; the kubelet merges the
two), so ledger lines are framed::

    agent-health-ledger/1 record CELL {"kind":"cell-meta",...,"seq":0}
    agent-health-ledger/1 record CELL {"kind":"exchange",...,"seq":1}
    ...
    agent-health-ledger/1 end CELL 7 4f1c...e2

A ``record`` line carries one ledger line exactly as a store would hold it (already sealed
with the cell's key). An ``end`` line, written when the gateway flushes (the cell's
``cell-end`` is sealed, and when it stops), carries how many records the cell has and the
``mac`` of the last one (the chain's head). :func:`extract` returns a cell's lines only when
the last of its frames is an ``end`` line matching what came before it: a log cut short, a
gateway killed before it closed the cell, or a frame edited in between is a
:class:`~agent_health.ledger.errors.LedgerLogError`, never a shorter ledger. What the
records say is still checked by the chain (:func:`agent_health.ledger.chain.verify`): a
line forged into the log fails it, for it needs the cell's key.

Nothing else in a gateway writes to standard output, and its diagnostics are one line each
(``agent_health.gateway.command`` escapes line breaks in them), so no text the target
controls can start a line with the marker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from typing import BinaryIO

from agent_health.ledger import errors, store, strictjson

MARKER = "agent-health-ledger/1"
"""What every ledger line of a gateway's log starts with (``/1``: the framing's version)."""
URL = "log:stdout"
"""The :attr:`LogBackend.url` of a gateway writing to its own standard output."""


@dataclasses.dataclass
class _Cell:
    lines: list[str] = dataclasses.field(default_factory=list)
    closed: int = -1
    """How many records the last ``end`` frame covered (-1: none written)."""


class LogBackend:
    """A :class:`~agent_health.ledger.store.Backend` that frames ledger lines onto a file
    descriptor (the gateway's standard output); see the module doc.

    It also keeps each cell's lines, so :meth:`read` answers as a store would for what this
    process wrote (a gateway reads its cell once, when it opens it). Each batch is one
    ``write`` of whole lines, so a line of the ledger is never split by another writer.
    """

    def __init__(self, stream: BinaryIO | None = None, *, url: str = URL) -> None:
        self.stream = stream
        """Where the frames go; ``None``: file descriptor 1 (standard output), unbuffered."""
        self.url = url
        self._cells: dict[str, _Cell] = {}
        self._lock = asyncio.Lock()

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        store.check_cell(cell)
        if not lines:
            return
        for line in lines:
            if "\n" in line or "\r" in line:
                raise errors.BackendError("a ledger line must not contain a newline")
        text = "".join(f"{MARKER} record {cell} {line}\n" for line in lines)
        async with self._lock:
            await asyncio.to_thread(self._write, text.encode("utf-8"))
            self._cells.setdefault(cell, _Cell()).lines.extend(lines)

    async def read(self, cell: str) -> list[str]:
        store.check_cell(cell)
        found = self._cells.get(cell)
        return list(found.lines) if found else []

    async def cells(self) -> list[str]:
        return sorted(name for name, found in self._cells.items() if found.lines)

    async def flush(self) -> None:
        """Write an ``end`` frame for every cell with records since its last one."""
        async with self._lock:
            frames = []
            for name, found in self._cells.items():
                if found.lines and found.closed != len(found.lines):
                    frames.append(end_frame(name, len(found.lines), _mac(found.lines[-1])))
                    found.closed = len(found.lines)
            if frames:
                await asyncio.to_thread(self._write, "".join(frames).encode("utf-8"))

    async def close(self) -> None:
        await self.flush()

    def _write(self, data: bytes) -> None:
        try:
            if self.stream is not None:
                self.stream.write(data)
                self.stream.flush()
                return
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
        except OSError as err:
            raise errors.BackendError(
                f"cannot write the ledger to the gateway's log: {err.strerror or err}"
            ) from err


def end_frame(cell: str, count: int, head: str) -> str:
    """The ``end`` line of ``cell``: ``count`` records, the last one's mac ``head``."""
    return f"{MARKER} end {cell} {count} {head}\n"


def extract(log: str, cell: str) -> list[str]:
    """The ledger lines of ``cell`` in a gateway's log, checked against its ``end`` frame.

    Raises :class:`~agent_health.ledger.errors.LedgerLogError` when the log holds no
    record of ``cell``, or when its frames do not close with an ``end`` line that counts
    them and names the last one's mac (the log was cut, or the gateway never closed it).
    """
    store.check_cell(cell)
    lines: list[str] = []
    end: tuple[int, str] | None = None
    prefix = f"{MARKER} "
    for number, raw in enumerate(log.split("\n"), start=1):
        text = raw.removesuffix("\r")
        if not text.startswith(prefix):
            continue  # a diagnostic line
        kind, _, rest = text[len(prefix) :].partition(" ")
        name, _, payload = rest.partition(" ")
        if name != cell:
            continue
        if kind == "record":
            lines.append(payload)
            end = None  # an end frame counts only what came before it
        elif kind == "end":
            end = _end(payload, cell, number)
        else:
            raise errors.LedgerLogError(
                f"cell {cell}: line {number} of the gateway's log is a ledger frame of "
                f"unknown kind {kind!r}"
            )
    if not lines:
        raise errors.LedgerLogError(
            f"cell {cell}: the gateway's log holds no ledger record of this cell (the gateway "
            "never started, or its log was lost)"
        )
    if end is None:
        raise errors.LedgerLogError(
            f"cell {cell}: the gateway's log ends after {len(lines)} ledger records without "
            "an end frame: the gateway was stopped before it closed the cell, or the log "
            "was cut short"
        )
    count, head = end
    if count != len(lines) or head != _mac(lines[-1]):
        raise errors.LedgerLogError(
            f"cell {cell}: the gateway's end frame counts {count} records ending at mac "
            f"{head[:16]}…, the log holds {len(lines)}: records were lost or edited"
        )
    return lines


def _end(payload: str, cell: str, number: int) -> tuple[int, str]:
    count, _, head = payload.partition(" ")
    if not count.isdigit() or not head:
        raise errors.LedgerLogError(
            f"cell {cell}: line {number} of the gateway's log is not an end frame (COUNT MAC)"
        )
    return int(count), head


def _mac(line: str) -> str:
    """The ``mac`` of a sealed ledger line ('' when it has none: the chain says why)."""
    try:
        payload = strictjson.loads(line)
    except ValueError:
        return ""
    mac = payload.get("mac") if isinstance(payload, dict) else None
    return mac if isinstance(mac, str) else ""
