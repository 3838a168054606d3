"""Turns what the proxy saw into ``exchange`` records and appends them to the right cell.

The proxy never waits for the ledger: it takes a :class:`Ticket` when a call arrives and hands
back what it saw when the call is over (the ledger's one shape of an exchange seen,
:class:`agent_health.ledger.observation.Observation`, made a record by
:func:`agent_health.ledger.objects.exchange`, as a local run's are); a background task per
cell seals and appends the exchanges in batches: what finishes within :data:`BATCH_SECONDS`
of the first goes in one write (each write is a thread hop and a store call, which an
exchange at a time paid per call), or at once when :data:`BATCH_MAX` are waiting or someone
flushes. Whoever
appends the controller's records (the engine in-process, or the controller through the
admin listener) calls :meth:`Recorder.append`, which first waits for that cell's open
tickets, so a cell always reads ``cell-meta, exchange…, run-result, signal…, cell-end``.

A cell's exchanges are capped (:class:`Caps`: records and bytes of their lines): the target
decides how many calls it makes and how long their paths are, and a ledger shared by a
run's cells (a ConfigMap) must keep room for every cell. Past the cap — or when the store
refuses a write — exchanges are dropped and counted, and a ``cell-meta`` marked ``dropped``
(the count so far) goes on record at once and again before the controller's records, so
the grade says the ledger is not whole and how much is missing. The mark says whom that
blames (``dropped_cause``): the agent when the cell's share would have held every record but
the target's own (its calls, the calls the gateway refused it, its spans) — a target cannot
flood its way out of a failed grade — else the infrastructure (a write the store refused, a
share too small for the controller's and peers' own records).

The OTLP receiver's ``spans`` records (:meth:`Recorder.note`) go the same way, in the same
batches, under the same byte cap.

The MCP calls read on a route to an MCP peer (:meth:`Ticket.note`) wait in their exchange's
ticket, each already written as its entry (``objects.mcp_entry_text``), and are sealed in the
exchange's one record when it ends (version 5, ``objects.exchange_text``): a second sealed
line per call — its HMAC, its escaping, its spooling — was most of what reading MCP cost.
A call whose exchange is still open when its cell must have it on record (:meth:`flush`,
before the controller's records; :meth:`peer_calls`) is sealed alone, as a version-4
``mcp`` record: an exchange may never end (an endless stream), and its calls must not wait
for it; so are those past :data:`HELD_BYTES` an exchange holds, as they come.

What the target called of its peers, as the cell's records keep it — each exchange with a
peer, each MCP call with its tool, arguments and ``isError`` (no results) — stays readable
while the cell runs (:meth:`Recorder.peer_calls`): the controller holds its test's tool
claims to it and explains the test with it, as a local run does with its own gateway. At
most :data:`SEEN_CALLS` calls and :data:`SEEN_BYTES` of their arguments are kept for it;
past either the rest is not, and the answer says it is ``partial``.

Which cell an exchange belongs to: the cell bound to its ``X-Agent-Health-Run-Id`` (the local
engine binds one per test), else the gateway's own cell (a cell pod), else the only open
cell; failing all three it is counted as unrouted and logged, never written to a wrong cell.

One concept: a cell's records from the moment the proxy reports them to their sealed lines;
the batches, the caps and the blame, and what the controller may read back while the cell
runs are its parts, and each needs the others' counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pydantic_core

from agent_health.ledger import chain, encoding, errors, objects, observation, records, store

log = logging.getLogger("agent_health.gateway")
_Item = records.SpansRecord | objects.Object | objects.Written
"""What a cell's writer seals: spans, exchanges as their JSON objects, and MCP calls written
as their lines (as their JSON objects when they cannot be)."""
_Made = records.SpansRecord | objects.Object


@dataclass(frozen=True)
class Caps:
    """The most exchange records, and bytes of their lines, one cell may record."""

    records: int | None = None
    bytes: int | None = None

    def why(self) -> str:
        parts = [f"{self.records} exchanges"] if self.records is not None else []
        parts += [f"{self.bytes} bytes of exchanges"] if self.bytes is not None else []
        return "the cell's share of the ledger (" + ", ".join(parts) + ") is full"


SEEN_CALLS = 10_000
"""The most calls to peers a cell keeps readable for its controller (``peer_calls``)."""
SEEN_BYTES = 8 * 1024 * 1024
"""The most bytes of JSON of those calls' arguments (and errors, and the names of the tools a
server listed) kept readable."""
BATCH_SECONDS = 0.05  # how long the first exchange of a batch waits for others to join it
BATCH_MAX = 512  # a batch this large is written at once
_SEAL_BYTES = 120
"""What sealing adds to a record's line (``seq``, ``mac``), counted against the byte cap."""
HELD_BYTES = 256 * 1024
"""The most bytes of MCP calls an exchange in flight holds for its own record: past it, they
are sealed alone at once (an exchange answering many calls with large results on a stream
it keeps open must not hold them all until it ends)."""


@dataclass
class _Cell:
    writer: chain.Writer
    meta: records.CellMeta
    pending: list[observation.Observation | records.SpansRecord | _Noted | objects.Object] = field(
        default_factory=list
    )
    inflight: set[asyncio.Future[None]] = field(default_factory=set)
    drain: asyncio.Task[None] | None = None
    kick: asyncio.Event = field(default_factory=asyncio.Event)  # write the batch now
    ended: bool = False
    exchanges: int = 0
    bytes: int = 0
    span_bytes: int = 0
    dropped: int = 0
    """Exchanges not recorded: past the caps, or refused by the store."""
    marked: int = 0
    """The ``dropped`` count last put on record."""
    why: str = ""
    own_records: int = 0
    own_bytes: int = 0
    """Exchanges offered that are not the target's (kept or dropped), and their bytes: whether
    the cell's share would have held everything but the target's traffic."""
    refused_write: bool = False
    """The store refused a write of this cell (the infrastructure's failure, whoever filled
    the share)."""
    holding: set[Ticket] = field(default_factory=set)
    """Exchanges in flight that hold MCP calls not yet on record."""
    seen: list[tuple[Any, ...]] = field(default_factory=list)
    """The target's calls to peers on record, flat (``_see``): exchanges, and MCP calls
    without results."""
    seen_bytes: int = 0
    seen_partial: bool = False


class Open(Protocol):
    """An exchange in flight, as the proxy reports it: its MCP calls as they are read
    (:meth:`note`), then the exchange itself, once (:meth:`finish`)."""

    def finish(self, seen: observation.Observation) -> None: ...

    def note(self, call: objects.Object) -> None: ...


class Sink(Protocol):
    """Where a listener's exchanges go: a cell's :class:`Recorder`, or a local run's ledger
    (``engine.recording.recording``), which routes each to its test."""

    def start(self, run_id: str | None) -> Open: ...


class Ticket:
    """An exchange in flight; :meth:`finish` hands it to the recorder exactly once, with the
    MCP calls :meth:`note` gave it and its cell has not yet had to put on record alone."""

    def __init__(self, recorder: Recorder, cell: str | None) -> None:
        self.cell = cell
        self._recorder = recorder
        self._done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.held: list[tuple[str, int | None]] = []
        """The MCP calls noted and not yet on record: each as its entry in the exchange's
        record (``objects.mcp_entry_text``), with the HTTP status it was read under."""
        self.held_bytes = 0  # of their entries (at most HELD_BYTES)
        self.shared: tuple[str, str, str, str | None, str] | None = None
        """What the held calls share with their exchange: principal, evidence, server, run
        id and start (what a call put on record alone takes back, :func:`_alone`)."""
        self.seen: list[tuple[_Seen, int]] = []
        """The held calls as :meth:`Recorder.peer_calls` keeps them (the target's only)."""

    def finish(self, seen: observation.Observation) -> None:
        if not self._done.done():
            self._done.set_result(None)
            self._recorder._finish(self, seen)

    def note(self, call: objects.Object) -> None:
        """An MCP call read in this exchange, answered: sealed inside the exchange's own
        record when the exchange ends, or alone before that if its cell must have it on
        record sooner (:meth:`Recorder.flush`, :meth:`Recorder.peer_calls`)."""
        if not self._done.done():
            self._recorder._note_call(self, call)


class Recorder:
    """Seals exchanges into per-cell chains on ``backend`` with ``key``."""

    def __init__(
        self,
        backend: store.Backend,
        key: bytes,
        *,
        default_cell: str | None = None,
        caps: Caps | None = None,
    ) -> None:
        self.backend = backend
        self.default_cell = default_cell
        self.caps = caps or Caps()
        self._key = key
        self._cells: dict[str, _Cell] = {}
        self._bound: dict[str, str] = {}
        self._unreached: dict[str, str] = {}
        self._clock = objects.Clock()  # dates the exchanges that carry MCP calls
        self.recorded = 0
        self.unrouted = 0
        self.spans_late = 0
        """Spans the OTLP receiver kept after their cell had ended (not recorded)."""
        self.spans_unrecorded = 0
        """Spans past their cell's share of its byte cap (not recorded)."""
        self.failures: list[str] = []

    @property
    def cells(self) -> list[str]:
        """The cells opened so far, in opening order."""
        return list(self._cells)

    async def open_cell(self, cell: str, meta: records.CellMeta) -> None:
        """Open ``cell`` for appending: start it with ``meta``, or continue its stored chain
        after ``meta`` marked ``restarted`` (a gateway started again on a cell under way)."""
        store.check_cell(cell)
        if cell in self._cells:
            raise errors.ChainError(f"cell {cell} is already open in this gateway")
        stored = chain.verify(await self.backend.read(cell), self._key, complete=False)
        if not stored.ok:
            raise errors.ChainError(
                f"cell {cell}: the stored chain does not verify ({stored.problem}); "
                "refusing to append to it"
            )
        sealer = chain.Sealer(
            self._key, next_seq=stored.records, previous_mac=stored.last_mac, ended=stored.ended
        )
        writer = chain.Writer(self.backend, cell, self._key, sealer)
        state = _Cell(writer, meta, ended=stored.ended)
        if stored.records == 0:
            await state.writer.append(meta)
        elif not stored.ended:
            # Started again on a cell under way (the kubelet restarted us): whatever passed
            # while we were down is not on record, and the grade must know it.
            await state.writer.append(meta.model_copy(update={"restarted": True}))
        self._cells[cell] = state

    def bind(self, run_id: str, cell: str) -> None:
        """Send exchanges that carry ``run_id`` to ``cell`` (an open cell)."""
        if cell not in self._cells:
            raise errors.ChainError(f"cell {cell} is not open; open_cell() it before bind()")
        self._bound[run_id] = cell

    def unbind(self, run_id: str) -> None:
        self._bound.pop(run_id, None)
        self._unreached.pop(run_id, None)

    def unreached(self, run_id: str) -> str | None:
        """Why the gateway could not reach the upstream for bound ``run_id``'s last exchange
        (None if it could): lets an in-process caller tell a gateway 502 from an agent's."""
        return self._unreached.get(run_id)

    def start(self, run_id: str | None) -> Ticket:
        """A ticket for an exchange that just arrived, routed to its cell now."""
        cell = self._route(run_id)
        ticket = Ticket(self, cell)
        if cell is not None:
            state = self._cells[cell]
            state.inflight.add(ticket._done)
            ticket._done.add_done_callback(state.inflight.discard)
        return ticket

    def _route(self, run_id: str | None) -> str | None:
        if run_id is not None and run_id in self._bound:
            return self._bound[run_id]
        if self.default_cell is not None and self.default_cell in self._cells:
            return self.default_cell
        open_cells = [name for name, c in self._cells.items() if not c.ended]
        return open_cells[0] if len(open_cells) == 1 else None

    def note(self, spans: records.SpansRecord) -> None:
        """Record spans the OTLP receiver kept for a run, with the cell's exchanges (the
        same batches, caps and order): routed as an exchange of that run would be."""
        cell = self._route(spans.run_id)
        if cell is None:
            self.unrouted += 1
            log.warning("spans of run %s match no open ledger cell; not recorded", spans.run_id)
            return
        if self._cells[cell].ended:
            # An exporter that batches sends after the test ended: nothing may follow cell-end.
            self.spans_late += len(spans.spans)
            log.warning("%d spans of run %s came after the cell ended", len(spans.spans), cell)
            return
        self._queue(cell, spans)

    def _finish(self, ticket: Ticket, seen: observation.Observation) -> None:
        if ticket.cell is not None:
            self._cells[ticket.cell].holding.discard(ticket)
        run_id = seen.run_id
        if run_id is not None and run_id in self._bound:
            if seen.status is None and seen.error is not None:
                self._unreached[run_id] = seen.error
            else:
                self._unreached.pop(run_id, None)
        if ticket.cell is None:
            self.unrouted += 1
            log.warning(
                "exchange %s %s (run id %s) matches no open ledger cell; not recorded",
                seen.method,
                seen.path,
                seen.run_id,
            )
            return
        if ticket.held:
            folded = _Noted.folded(seen, ticket, self._clock)
            ticket.held, ticket.seen, ticket.held_bytes = [], [], 0
            self._queue(ticket.cell, folded)
        else:
            self._queue(ticket.cell, seen)

    def _note_call(self, ticket: Ticket, call: objects.Object) -> None:
        if ticket.cell is None:
            self.unrouted += 1
            return
        state = self._cells[ticket.cell]
        if state.ended:
            return  # counted with its exchange, which comes after cell-end too
        arguments = call["arguments"]
        try:
            # Written once, for the entry and for the call kept readable (peer_calls).
            given = None if arguments is None else encoding.text(arguments)
            entry = objects.mcp_entry_text(call, given)
        except (errors.RecordError, TypeError):
            # What JSON cannot hold: on its own, for the writer to refuse as any such record.
            self._queue(ticket.cell, call)
            return
        ticket.held.append((entry, call["status"]))
        ticket.held_bytes += len(entry)
        if ticket.shared is None:
            ticket.shared = (
                call["principal"],
                call["evidence"],
                call["server"],
                call["run_id"],
                call["started_at"],
            )
        if call["principal"] == "target":
            # Once the cell keeps no more calls readable it only notes that one was left out
            # (:func:`_keep_seen`): the call is not flattened (its arguments written again) for it.
            full = len(state.seen) >= SEEN_CALLS  # the kept calls only ever grow
            ticket.seen.append(_LEFT_OUT if full else _seen_call(call, given))
        if ticket.held_bytes > HELD_BYTES:
            self._spill_ticket(ticket.cell, ticket)
            state.holding.discard(ticket)
        else:
            state.holding.add(ticket)

    def _spill(self, cell: str, state: _Cell) -> None:
        """Put on record alone (version-4 ``mcp`` records) the MCP calls that exchanges
        still in flight hold: the cell must have them now — before the controller's records,
        or for a read of the target's calls — and an exchange may never end (an endless
        stream); whatever the exchange reads later still rides in its own record."""
        for ticket in list(state.holding):
            self._spill_ticket(cell, ticket)
        state.holding.clear()

    def _spill_ticket(self, cell: str, ticket: Ticket) -> None:
        for entry, status in ticket.held:
            assert ticket.shared is not None  # set with the first call held
            self._queue(cell, _noted(_alone(entry, status, ticket.shared)))
        ticket.held, ticket.seen, ticket.held_bytes = [], [], 0

    def _queue(
        self,
        cell: str,
        item: observation.Observation | records.SpansRecord | _Noted | objects.Object,
    ) -> None:
        state = self._cells[cell]
        state.pending.append(item)
        if len(state.pending) >= BATCH_MAX:
            state.kick.set()
        if state.drain is None or state.drain.done():
            state.drain = asyncio.create_task(self._drain(cell, state))

    async def _drain(self, cell: str, state: _Cell) -> None:
        if not state.kick.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(BATCH_SECONDS):
                    await state.kick.wait()
        state.kick.clear()
        while state.pending:
            batch, state.pending = state.pending, []
            exchanges = self._within_caps(
                state,
                [
                    objects.exchange(o) if isinstance(o, observation.Observation) else o
                    for o in batch
                ],
            )
            try:
                if exchanges:
                    await state.writer.write(*exchanges)
            except errors.LedgerError as err:
                self.failures.append(f"cell {cell}: {len(exchanges)} exchanges lost: {err}")
                log.error(
                    "ledger cell %s: cannot append %d exchanges: %s", cell, len(exchanges), err
                )
                state.dropped += len(exchanges)
                state.refused_write = True
                state.why = state.why or f"the ledger refused a write ({err})"
            else:
                self.recorded += sum(
                    (isinstance(r, dict) and r["kind"] == "exchange")
                    or (isinstance(r, objects.Written) and r.kind == "exchange")
                    for r in exchanges
                )
            if state.dropped and not state.marked:
                await self._mark(cell, state)  # at once: the gateway may not live to the end

    def _within_caps(self, state: _Cell, exchanges: list[_Made | _Noted]) -> list[_Item]:
        """The records that fit the cell's caps; the rest are counted as dropped.

        The byte cap counts spans records too, but they may take at most half of it, and one
        that does not fit is left out alone, counted in :attr:`Recorder.spans_unrecorded`: the
        agent's spans are its own optional account, and flooding them must neither crowd out
        the exchanges nor mark the cell incomplete (which grades it an infra error). An
        ``mcp`` record counts as an exchange: it is the target's traffic, recorded in full."""
        kept: list[_Item] = []
        for item in exchanges:
            if isinstance(item, _Noted):
                self._keep_noted(state, item, kept)
                continue
            size = _size(item) + _SEAL_BYTES if self.caps.bytes else 0
            if isinstance(item, records.SpansRecord):
                cap = self.caps.bytes
                if state.dropped or (
                    cap is not None
                    and (state.span_bytes + size > cap // 2 or state.bytes + size > cap)
                ):
                    self.spans_unrecorded += len(item.spans)
                    continue
                state.span_bytes += size
                state.bytes += size
                kept.append(item)
                continue
            principal = item["principal"] if isinstance(item, dict) else item.principal
            if principal != "target":
                state.own_records += 1
                state.own_bytes += size
            over_records = self.caps.records is not None and state.exchanges >= self.caps.records
            over_bytes = self.caps.bytes is not None and state.bytes + size > self.caps.bytes
            if state.dropped or over_records or over_bytes:
                # Once one is dropped, every later one is too: the record stays a prefix.
                state.dropped += 1
                state.why = state.why or self.caps.why()
                continue
            state.exchanges += 1
            state.bytes += size
            kept.append(item)
            if principal == "target":
                _see(state, item)
        return kept

    def _keep_noted(self, state: _Cell, item: _Noted, kept: list[_Item]) -> None:
        """:meth:`_within_caps` for an MCP call written as its line (the same caps)."""
        size = item.size + _SEAL_BYTES
        if not item.target:
            state.own_records += 1
            state.own_bytes += size
        over_records = self.caps.records is not None and state.exchanges >= self.caps.records
        over_bytes = self.caps.bytes is not None and state.bytes + size > self.caps.bytes
        if state.dropped or over_records or over_bytes:
            state.dropped += 1
            state.why = state.why or self.caps.why()
            return
        state.exchanges += 1
        state.bytes += size
        kept.append(item.written)
        for seen, seen_size in item.seen:
            _keep_seen(state, seen, seen_size)

    def _blame(self, state: _Cell) -> tuple[Literal["agent", "infra"], str]:
        """Whom the cell's dropped exchanges blame, and why, as the mark says it."""
        if state.refused_write:
            return "infra", state.why
        caps = self.caps
        fits = (caps.records is None or state.own_records <= caps.records) and (
            caps.bytes is None or state.own_bytes <= caps.bytes
        )
        if fits:
            return "agent", (
                f"{state.why}: the target's own traffic filled it (its calls, the calls refused "
                "it, its spans); everything else on record fits"
            )
        return "infra", f"{state.why}: the controller's and peers' own records do not fit it"

    async def _mark(self, cell: str, state: _Cell) -> None:
        """Put the dropped count on record (a ``cell-meta`` marked ``dropped``)."""
        count = state.dropped
        cause, why = self._blame(state)
        marker = state.meta.model_copy(
            update={
                "dropped": count,
                "dropped_why": why,
                "dropped_cause": cause,
                "restarted": None,
            }
        )
        try:
            await state.writer.append(marker)
        except errors.LedgerError as err:
            self.failures.append(f"cell {cell}: cannot record {count} dropped exchanges: {err}")
            log.error("ledger cell %s: cannot record %d dropped exchanges: %s", cell, count, err)
            return
        state.marked = count
        log.warning("ledger cell %s: %d exchanges dropped (%s): %s", cell, count, cause, why)

    async def flush(self, cell: str, *, wait: float | None = None) -> None:
        """Wait (at most ``wait`` seconds) for the cell's open exchanges, then append them."""
        state = self._cells[cell]
        if state.inflight:
            _, late = await asyncio.wait(set(state.inflight), timeout=wait)
            if late:
                log.warning("cell %s: %d exchanges still open after %ss", cell, len(late), wait)
        self._spill(cell, state)
        state.kick.set()
        while state.drain is not None and not state.drain.done():
            await asyncio.shield(state.drain)

    async def append(
        self, cell: str, *items: records.Record, wait: float | None = None
    ) -> list[records.Record]:
        """Append the controller's records to ``cell`` after every exchange recorded so far."""
        if cell not in self._cells:
            raise errors.ChainError(f"cell {cell} is not open in this gateway")
        await self.flush(cell, wait=wait)
        state = self._cells[cell]
        if state.dropped > state.marked and not state.ended:
            await self._mark(cell, state)
        sealed = await state.writer.append(*items)
        state.ended = state.ended or any(r.kind == "cell-end" for r in sealed)
        if state.ended:
            # A spooling backend holds the cell until now: its end is what sends it on.
            try:
                await self.backend.flush()
            except errors.LedgerError as err:
                raise errors.BackendError(
                    f"cell {cell}: its records are sealed but not yet in the ledger ({err}); "
                    "the gateway tries again when it stops"
                ) from err
        return sealed

    async def peer_calls(self, run_id: str | None) -> dict[str, Any] | None:
        """The target's calls to peers the cell of ``run_id`` has on record (each exchange
        with a peer that reached it, and each MCP call without its result), as JSON objects
        in the order they were recorded, once those waiting are written; ``None`` when no
        open cell is the run's. Calls still in flight are not waited for — an agent may hold
        a stream to its MCP server open as long as it runs — and make the answer
        ``partial``: their exchanges are not on record yet (an MCP call is, once answered)."""
        cell = self._route(run_id)
        if cell is None:
            return None
        state = self._cells[cell]
        self._spill(cell, state)
        state.kick.set()
        while state.drain is not None and not state.drain.done():
            await asyncio.shield(state.drain)
        calls = [_seen(c) for c in state.seen]
        return {"cell": cell, "calls": calls, "partial": state.seen_partial or bool(state.inflight)}

    def dropped(self, cell: str) -> int:
        """How many of ``cell``'s exchanges were not recorded (caps, or a refused write)."""
        return self._cells[cell].dropped

    def ended(self, cell: str) -> bool:
        """Whether ``cell`` has its ``cell-end`` record."""
        return self._cells[cell].ended

    async def flush_all(self, *, wait: float | None = None) -> None:
        """Flush every cell; in-flight exchanges get ``wait`` seconds."""
        await asyncio.gather(*(self.flush(cell, wait=wait) for cell in self._cells))

    async def close(self, *, wait: float | None = None) -> None:
        """Flush every cell, then close the backend (which sends on what it still holds; a
        failure is logged and kept in :attr:`failures`: nobody is left to answer)."""
        await self.flush_all(wait=wait)
        try:
            await self.backend.close()
        except errors.LedgerError as err:
            self.failures.append(f"closing the ledger: {err}")
            log.error("ledger %s: closing failed, records may be lost: %s", self.backend.url, err)


_SEEN_FIELDS = (
    "principal",
    "server",
    "method",
    "id",
    "name",
    "arguments_cut",
    "is_error",
    "problem",
    "status",
    "started_at",
)
_seen_fields = operator.itemgetter(*_SEEN_FIELDS)  # an mcp record has them all
_Seen = tuple[Any, ...]
"""A call kept readable: (principal, peer, status, start) of an exchange; an MCP call's
:data:`_SEEN_FIELDS`, then its arguments and error as JSON, then the tools it listed."""
_LEFT_OUT: tuple[_Seen, int] = ((), 0)
"""A call noted when its cell kept :data:`SEEN_CALLS` already: :func:`_keep_seen` counts it
as left out (the answer is ``partial``) and keeps nothing of it."""


def _see(state: _Cell, item: _Made) -> None:
    """Keep ``item``, one of the target's records on the cell's ledger, readable when it is
    a call to a peer (see :meth:`Recorder.peer_calls`). What is kept is flat — strings,
    numbers, the arguments as their JSON — so the garbage collector never walks it however
    long the cell runs; it is made into a call again when asked for."""
    if not isinstance(item, dict):
        return
    if item["kind"] == "exchange":
        upstream, status = item["upstream"], item["status"]
        if upstream.startswith("peer:") and status is not None:
            _keep_seen(state, (item["principal"], upstream, status, item["started_at"]), 0)
    else:
        _keep_seen(state, *_seen_call(item))


def _seen_call(call: objects.Object, given: str | None = None) -> tuple[_Seen, int]:
    """An MCP call as :func:`_see` keeps it, and the bytes that counts against
    :data:`SEEN_BYTES`. ``given``: the arguments as their canonical JSON text, when the
    caller wrote them already (the call's entry holds the same text)."""
    arguments, error, result = call.get("arguments"), call.get("error"), call.get("result")
    listed: tuple[str, ...] | None = None
    if call.get("method") == "tools/list" and isinstance(result, dict):
        tools = result.get("tools")
        found = (
            [t.get("name") for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        )
        listed = tuple(n for n in found if isinstance(n, str))
    kept: str | bytes | None = given
    if kept is None and arguments is not None:
        kept = pydantic_core.to_json(arguments)  # never raises: a NaN is written as null
    failed = pydantic_core.to_json(error) if error is not None else None
    size = len(kept or b"") + len(failed or b"") + sum(map(len, listed or ()))
    return (*_seen_fields(call), kept, failed, listed), size


def _keep_seen(state: _Cell, kept: _Seen, size: int) -> None:
    if size and state.seen_bytes + size > SEEN_BYTES:
        state.seen_partial = True
        return
    if len(state.seen) >= SEEN_CALLS:
        state.seen_partial = True
        return
    state.seen_bytes += size
    state.seen.append(kept)


def _seen(kept: _Seen) -> objects.Object:
    """A kept call as :meth:`Recorder.peer_calls` answers it: an exchange's peer, status and
    start; an MCP call's fields but its result (what a server listed: the tools' names)."""
    if len(kept) == 4:
        principal, upstream, status, started_at = kept
        return {
            "kind": "exchange",
            "principal": principal,
            "upstream": upstream,
            "status": status,
            "started_at": started_at,
        }
    *fields, given, failed, listed = kept
    call = dict(zip(_SEEN_FIELDS, fields, strict=True))
    call["kind"] = "mcp"
    call["arguments"] = pydantic_core.from_json(given) if given is not None else None
    call["error"] = pydantic_core.from_json(failed) if failed is not None else None
    if listed is not None:
        call["result"] = {"tools": [{"name": name} for name in listed]}
    return call


class _Noted:
    """A record waiting in its cell's batch, already written as its line — an exchange that
    carries its MCP calls (:meth:`folded`), or an MCP call alone (``objects.mcp_text``) —
    with what the caps and :meth:`Recorder.peer_calls` need of it: the calls' parsed
    arguments and results were let go when each was noted (a batch waits up to
    :data:`BATCH_SECONDS`, long enough for them to outlive a collection of the youngest
    objects), and it holds only strings, numbers and bytes meanwhile."""

    __slots__ = ("seen", "size", "target", "written")
    seen: list[tuple[_Seen, int]]

    def __init__(
        self, written: objects.Written, target: bool, seen: list[tuple[_Seen, int]]
    ) -> None:
        self.written = written
        self.size = len(written.head) + len(written.middle) + len(written.tail)
        self.target = target
        self.seen = seen

    @classmethod
    def folded(cls, seen: observation.Observation, ticket: Ticket, clock: objects.Clock) -> _Noted:
        """The exchange ``seen`` carrying the calls ``ticket`` holds (version 5), dated by
        ``clock``: what the target's calls left (each call, then the exchange with a peer)
        kept readable in the order a version-4 cell held them."""
        started = clock.epoch(seen.started_at)
        ended = clock.epoch(seen.ended_at)
        written = objects.exchange_text(seen, [entry for entry, _ in ticket.held], started, ended)
        target = seen.principal == "target"
        kept = ticket.seen if target else []
        if target and seen.upstream.startswith("peer:") and seen.status is not None:
            kept.append(((seen.principal, seen.upstream, seen.status, started), 0))
        return cls(written, target, kept)


def _noted(call: objects.Object) -> _Noted | objects.Object:
    """An MCP call alone as its cell's batch holds it: written as its line, or (when it holds
    what JSON cannot) as it is, for the writer to refuse as it refuses any such record."""
    try:
        written = objects.mcp_text(call)
    except (errors.RecordError, TypeError):
        return call
    target = call["principal"] == "target"
    return _Noted(written, target, [_seen_call(call)] if target else [])


def _alone(
    entry: str, status: int | None, shared: tuple[str, str, str, str | None, str]
) -> objects.Object:
    """A call an exchange in flight held (its ``objects.mcp_entry_text``) as the ``mcp``
    record it is when put on record alone (version 4)."""
    call = json.loads(entry)  # written by the ledger's own encoder: JSON, and nothing else
    principal, evidence, server, run_id, started_at = shared
    return objects.mcp_record(  # in the record's order
        call["arguments"],
        call["arguments_cut"],
        call["ended_at"],
        call["error"],
        evidence,
        call["id"],
        call["is_error"],
        call["method"],
        call["name"],
        principal,
        call["problem"],
        call["result"],
        call["result_bytes"],
        call["result_cut"],
        run_id,
        server,
        call["session"],
        started_at,
        status,
        call["ended_at"],  # time
    )


def _size(item: _Made) -> int:
    if isinstance(item, dict):
        return len(encoding.canonical(item))
    return len(records.dump_line(item))
