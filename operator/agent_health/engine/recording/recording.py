"""A local run records every (test, repeat) that ran the agent as a ledger cell.

The cells have the shape a cluster's have (:mod:`agent_health.ledger`)::

    cell-meta, exchange… (what the connector sent and got), spans…, run-result, signal…, cell-end

but cost the run almost nothing. The built-in HTTP connectors tell :meth:`LocalLedger.observe`
about each exchange as it ends — also when the test's timeout cancels it, so a hanging agent
is recorded at once, never waited for. A cell's records are made as JSON objects
(:mod:`agent_health.ledger.objects`) and sealed into its HMAC chain in one batch when its
test ends; a test that never ran the agent writes nothing. All cells of a ``file://`` ledger
go into one append-only ``run.jsonl``: made, sealed and written by the run file's writer
thread, off the event loop (what the loop keeps of a cell until then is what it was given:
the test's times, the connector's observations, the frozen result), and the run sealed when
it ends (:mod:`agent_health.ledger.runfile`); other stores get one cell per batch, made at
once. No gateway sits between the engine and the agent: locally the recorder is the
controller itself, so an exchange is the controller's with evidence ``in-process``. In a
cell pod the gateway sidecar records instead (:mod:`agent_health.engine.controller.cell`).

The HMAC key is random per run and written next to the ledger (mode 0600) so that
``agent-health ledger verify`` can check it: a local ledger is for inspection; anyone who can
read the key file can rewrite it, unlike a cell's, whose key only the gateway container holds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_core import to_jsonable_python

from agent_health import ledger
from agent_health.engine import outcome
from agent_health.engine.recording import runrecord
from agent_health.ledger import chain, encoding, objects, observation, runfile, store
from agent_health.sdk import context
from agent_health.sdk.results import RunResult, TestResult

if TYPE_CHECKING:
    from agent_health.engine.recording import refusal

log = logging.getLogger("agent_health.engine")
DEFAULT_ROOT = Path(".agent-health") / "ledger"
PEER_RECORDS = 10_000
"""The most records of a test's calls to its peers (exchanges, MCP calls) its cell keeps."""
PEER_BYTES = 64 * 1024 * 1024
"""The most bytes of them, as canonical JSON."""
HELD_BYTES = 256 * 1024
"""The most bytes of answers an exchange with a peer still open holds MCP calls of, for its
own record: past it they are kept alone as they come (as a cell's gateway does)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_url(root: Path = DEFAULT_ROOT, now: datetime | None = None) -> str:
    """``file://ROOT/<UTC timestamp>-<random>/`` (unique per run); ``agent-health run``
    gives the ``ledger/`` folder of the suite's ``.agent-health/``, beside its config."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"file://{root / f'{stamp}-{secrets.token_hex(2)}'}"


def cell_name(test_id: str, repeat: int, retry: int = 0, agent: str | None = None) -> str:
    """A ledger cell name for (test, repeat, retry): a readable slug of the id, made unique by
    a hash; a retry (``--retries``) is its own cell, ``.aN`` as the operator's attempts.

    >>> cell_name("test_triage.py::budgets > a healthy service", 0)
    'test_triage.py-budgets-a-healthy-service.bac067be.r0'
    >>> cell_name("test_triage.py::budgets > a healthy service", 0, retry=1)
    'test_triage.py-budgets-a-healthy-service.bac067be.r0.a1'

    In an agent matrix each agent's run of a test is its own cell, named after the agent:

    >>> cell_name("test_triage.py::budgets > a healthy service", 0, agent="triage-faulty")
    'test_triage.py-budgets-a-healthy-service.bac067be.triage-faulty.r0'
    """
    slug = _UNSAFE.sub("-", test_id).strip("-._")[:150] or "test"
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:8]
    attempt = f".a{retry}" if retry else ""
    lane = f".{_lane(agent)}" if agent else ""
    return store.check_cell(f"{slug}.{digest}{lane}.r{repeat}{attempt}")


def _lane(agent: str) -> str:
    """An agent's name in a cell name: as given when it is a plain name, else a slug made
    unique by a hash (a URL)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", agent).strip("-_")[:60]
    if slug == agent:
        return slug
    return f"{slug or 'agent'}-{hashlib.sha256(agent.encode('utf-8')).hexdigest()[:6]}"


def key_path(url: str, root: Path = DEFAULT_ROOT) -> Path:
    """Where the run's key is written: ``DIR.key`` beside a file ledger, else in ``root``
    (the ``ledger/`` folder of the suite's ``.agent-health/``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme == "file":
        return chain.key_beside(url)  # where `ledger verify` looks for it
    safe = _UNSAFE.sub("-", rest).strip("-") or "ledger"
    return root / f"{safe}.key"


def _remove_key(path: Path) -> None:
    path.unlink(missing_ok=True)


def _write_key(path: Path, key: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # also when the file existed with wider permissions
        os.write(fd, key + b"\n")
    finally:
        os.close(fd)


@dataclass(eq=False, repr=False)
class _Cell:
    """A test's cell between begin() and finish(): nothing is written until it ends. It keeps
    what its records are made of — the test, when it began, each exchange as the connector
    saw it — and the records are made when they are sealed (:meth:`records`)."""

    name: str
    info: context.TestInfo
    began: float  # epoch seconds
    seen: list[observation.Observation] = field(default_factory=list)
    spans: list[objects.Object] = field(default_factory=list)  # the OTLP receiver's records
    peers: list[objects.Object] = field(default_factory=list)
    """What the target's calls to its peers left: exchanges and mcp records, in order."""
    peer_bytes: int = 0
    peers_dropped: int = 0
    """Peer records past the cell's share (:data:`PEER_RECORDS`, :data:`PEER_BYTES`)."""
    holding: set[_PeerCall] = field(default_factory=set)
    """Exchanges with peers still open that hold MCP calls not yet kept (:meth:`spill`)."""

    def spill(self) -> None:
        """Keep alone (version-4 ``mcp`` records) the MCP calls that exchanges still open
        hold: the test needs them now (its claims, its end), and an exchange may never end
        (an endless stream); what such an exchange reads later still rides in its record."""
        for call in list(self.holding):
            call.spill()
        self.holding.clear()

    def records(
        self, then: Callable[[], list[objects.Object]], clock: objects.Clock
    ) -> list[objects.Object]:
        """cell-meta, an exchange for each observation, the peers' exchanges and MCP calls,
        spans, then what ``then`` makes; dated by ``clock``."""
        info = self.info
        meta = objects.cell_meta(
            at=clock.epoch(self.began),
            test_id=info.id,
            repeat=info.repeat,
            run_id=info.run_id,
            agent=info.agent,
        )
        seen = [objects.exchange(observed, clock=clock) for observed in self.seen]
        dropped = [self._dropped(meta)] if self.peers_dropped else []
        return [meta, *seen, *self.peers, *dropped, *self.spans, *then()]

    def _dropped(self, meta: objects.Object) -> objects.Object:
        """A second ``cell-meta`` saying how many of the target's peer records were left out,
        as a cell's gateway marks its own: the target made them, so the gap is its own."""
        marker = dict(meta)
        marker.update(
            dropped=self.peers_dropped,
            dropped_why=f"more than {PEER_RECORDS} records or {PEER_BYTES} bytes of the "
            "target's calls to its peers",
            dropped_cause="agent",
        )
        return marker


class LocalLedger:
    """The ledger of one local run: key, store, and the cells of the tests in flight."""

    def __init__(self, url: str, root: Path = DEFAULT_ROOT) -> None:
        self.url = url
        self.key_file = key_path(url, root)
        self.failures: list[str] = []
        self.cells: list[str] = []  # recorded, in the order their tests ended
        self.refused: dict[str, refusal.Refusal] = {}
        """Cells whose records could not be sealed (a value JSON cannot hold): their tests
        are never reported passed (:func:`.refusal.unrecorded`)."""
        self.unrouted = 0  # exchanges of no test in flight (not recorded)
        self.names: dict[tuple[str, int, str | None], str] = {}
        """The cell name of each (test id, repeat, agent) whose first try began: what the
        report names (``cli.run.reporting.with_cells``) without working it out again."""
        self._key = secrets.token_hex(32).encode("ascii")
        self._clock = objects.Clock()
        """Dates the cells' records, which are made in one thread: the run file's writer
        (a ``file://`` ledger), or else the event loop's (another store), never both."""
        self._sealer = chain.Sealer(self._key)  # each cell's chain is a fork of it
        self._open: dict[str, _Cell] = {}  # run id → its cell
        self._runfile: runfile.RunFile | None = None
        self._backend: store.Backend | None = None
        # Written once, by the first cell that ends (a run that records nothing writes none);
        # the cells that end meanwhile wait on the same write instead of starting their own.
        self._key_written: asyncio.Future[None] | None = None

    async def __aenter__(self) -> LocalLedger:
        directory = _directory(self.url)
        if directory is None:
            from agent_health.ledger import backends  # other stores: their clients load here

            backend = await asyncio.to_thread(backends.from_url, self.url)
            backends.require_client(self.url)
            self.url, self._backend = backend.url, backend
            return self
        taken = await asyncio.to_thread(_holds_a_ledger, directory)
        if taken is not None:
            raise ledger.BackendConfigError(
                f"the ledger directory {directory} already holds a run ({taken}); pass a new "
                "--ledger directory (the default makes one per run)"
            )
        self._runfile = runfile.RunFile(directory)
        self.url = self._runfile.url
        return self

    async def __aexit__(self, *exc: object) -> None:
        for cell in list(self._open.values()):
            cell.spill()
            if cell.seen or cell.peers:  # the run stopped mid-test: keep what the agent was sent
                await self._write(cell, _interrupted(cell), count=2)
        self._open.clear()
        try:
            if self._runfile is not None:
                await self._runfile.close(key=self._key)
            elif self._backend is not None:
                await self._backend.close()
        except ledger.LedgerError as err:
            self.failures.append(f"{self.url}: {err}")
        if self._runfile is not None and self._runfile.refused:
            from agent_health.engine.recording import refusal  # a cell refused: rare

            kinds = self._runfile.refused_kinds
            for name, why in self._runfile.refused.items():
                self.refused[name] = refusal.Refusal(why, kinds.get(name, ""))
        if self.refused:
            self.failures.extend(f"cell {name}: {r.why}" for name, r in self.refused.items())
            self.cells = [name for name in self.cells if name not in self.refused]
        if self._key_written is not None and not self.cells and not self.refused:
            # Written when the first test began, in case it called the agent; none did.
            await asyncio.gather(self._key_written, return_exceptions=True)
            await asyncio.to_thread(_remove_key, self.key_file)

    @property
    def whole(self) -> bool | None:
        """Whether the ledger holds every record this run made, chained and — a directory's
        run file — sealed (known once it is closed): what the history records as its
        ``ledger_verified``. The run made every record and holds the only key, so its seal is
        that verification: reading the ledger back to verify it again would cost a
        2,000-test run about as much CPU as the run itself (bench/history.py). ``False``: a
        cell could not be sealed or a write failed (:attr:`failures` say which); ``None``:
        nothing was recorded."""
        if not self.cells and not self.refused:
            return None
        return not self.failures and not self.refused

    def observe(self, seen: observation.Observation) -> None:
        """The connectors' observer: one finished (or failed, or cancelled) exchange."""
        cell = self._open.get(seen.run_id) if seen.run_id is not None else None
        if cell is None:
            self.unrouted += 1
            log.warning(
                "exchange of run %s belongs to no test in flight; not recorded", seen.run_id
            )
            return
        cell.seen.append(seen)

    def note_spans(self, run_id: str, record: objects.Object) -> None:
        """The OTLP receiver's observer: a ``spans`` record of a run, sealed with its cell."""
        cell = self._open.get(run_id)
        if cell is None:
            self.unrouted += 1  # its test ended: the spans came too late for its cell
            return
        cell.spans.append(record)

    def peer_sink(self, run_id: str | None = None) -> PeerSink:
        """Where a peer's listener (``gateway.RouteListener``) records: the cell of
        ``run_id`` (a test's own mock), or, for a peer the whole run shares, the cell of the
        run id the call carries (``X-Agent-Health-Run-Id``, forwarded by the agent), else of
        the one test in flight."""
        return PeerSink(self, run_id)

    async def peer_calls(self, run_id: str) -> outcome.PeerCalls | None:
        """What the test of ``run_id`` has recorded of its peers so far (``exchange`` and
        ``mcp`` records): what its tool claims are held to (``engine.outcome.claims``),
        all its ledger cell will hold of them; ``None`` when it called no peer (so a run
        without peers never loads the claims' module)."""
        cell = self._open.get(run_id)
        if cell is not None and cell.holding:  # MCP calls of an exchange still open
            cell.spill()
        if cell is None or not cell.peers:
            return None
        return outcome.PeerCalls(list(cell.peers))

    def _peer_cell(self, run_id: str | None) -> _Cell | None:
        if run_id is not None and run_id in self._open:
            return self._open[run_id]
        return next(iter(self._open.values())) if len(self._open) == 1 else None

    async def begin(self, info: context.TestInfo) -> None:
        """Open the cell of a (test, repeat): its exchanges are kept until it ends."""
        name = cell_name(info.id, info.repeat, info.retry, info.agent)
        if not info.retry:
            self.names[info.id, info.repeat, info.agent] = name
        self._open[info.run_id] = _Cell(name, info, time.time())
        if self._key_written is None:
            # The key goes to disk while the first test runs, not while its end waits for it
            # (removed again at the end if no test called the agent).
            self._key_written = asyncio.ensure_future(
                asyncio.to_thread(_write_key, self.key_file, self._key)
            )

    async def finish(
        self, result: TestResult, run: RunResult | None, *, agent_error: str | None = None
    ) -> None:
        """Seal the cell — meta, exchanges, run-result, signals, cell-end — in one batch; a
        test that never ran the agent writes nothing."""
        held = self._open.get(result.run_id)
        if held is not None and held.holding:
            held.spill()  # while the test's cell is still open: they are kept in it
        cell = self._open.pop(result.run_id, None)
        if cell is None or (
            run is None and agent_error is None and not cell.seen and not cell.peers
        ):
            return
        ended = time.time()  # the records the test's end writes are made later, dated now
        await self._write(
            cell,
            lambda: controller_records(
                result, run, agent_error=agent_error, at=self._clock.epoch(ended)
            ),
            len(result.signals) + 2,
        )

    async def _write(
        self, cell: _Cell, then: Callable[[], list[objects.Object]], count: int = 1
    ) -> None:
        """Record ``cell``: its records, then what ``then`` makes (``count`` of them, about)."""
        sealer = self._sealer.fork()
        try:
            if self._key_written is None:
                self._key_written = asyncio.ensure_future(
                    asyncio.to_thread(_write_key, self.key_file, self._key)
                )
            await asyncio.shield(self._key_written)  # no line is ever on disk without it
            if self._runfile is not None:
                # Made and sealed in the run file's writer thread, off the event loop: what
                # is left of recording a cell here is handing it over.
                made = 1 + len(cell.seen) + len(cell.peers) + len(cell.spans) + count
                self._runfile.append_cell(
                    cell.name, sealer, lambda: cell.records(then, self._clock), count=made
                )
                await self._runfile.room()
            elif self._backend is not None:
                lines, kind = [], ""
                try:
                    for record in cell.records(then, self._clock):
                        kind = str(record.get("kind", ""))
                        lines.append(sealer.line_of(record))
                except ledger.RecordError as err:
                    from agent_health.engine.recording import refusal

                    self.refused[cell.name] = refusal.Refusal(f"its {kind} record: {err}", kind)
                    return
                await self._backend.append(cell.name, lines)
        except (ledger.LedgerError, OSError) as err:
            self.failures.append(f"cell {cell.name}: {err}")
            return
        self.cells.append(cell.name)


class PeerSink:
    """A local ledger as the sink of a peer's listener (:meth:`LocalLedger.peer_sink`)."""

    def __init__(self, ledger: LocalLedger, run_id: str | None) -> None:
        self.ledger = ledger
        self.run_id = run_id

    def start(self, run_id: str | None) -> _PeerCall:
        return _PeerCall(self.ledger, self.run_id or run_id)


class _PeerCall:
    """One exchange with a peer: its MCP calls as they are read, then the exchange, which
    carries them (version 5) unless its test needed them sooner (:meth:`_Cell.spill`)."""

    def __init__(self, ledger: LocalLedger, run_id: str | None) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.held: list[objects.Object] = []
        self.held_bytes = 0

    def note(self, call: objects.Object) -> None:
        cell = self.ledger._peer_cell(self.run_id)
        if cell is None:
            self._keep(call)  # counted as unrouted, and said
            return
        self.held.append(call)
        self.held_bytes += int(call.get("result_bytes") or 0)
        if self.held_bytes > HELD_BYTES:  # a stream of large answers: kept alone as they come
            self.spill()
            cell.holding.discard(self)
        else:
            cell.holding.add(self)

    def spill(self) -> None:
        held, self.held, self.held_bytes = self.held, [], 0
        for call in held:
            self._keep(call)

    def finish(self, seen: observation.Observation) -> None:
        cell = self.ledger._peer_cell(self.run_id)
        if cell is not None:
            cell.holding.discard(self)
        held, self.held, self.held_bytes = self.held, [], 0
        self._keep(objects.exchange(seen, [objects.mcp_entry(c) for c in held] if held else None))

    def _keep(self, record: objects.Object) -> None:
        cell = self.ledger._peer_cell(self.run_id)
        if cell is not None and not cell.peers_dropped:
            size = len(encoding.canonical(record))
            if len(cell.peers) < PEER_RECORDS and cell.peer_bytes + size <= PEER_BYTES:
                cell.peer_bytes += size
                cell.peers.append(record)
                return
        if cell is not None:  # once one is left out, every later one is: a whole prefix
            cell.peers_dropped += 1
            return
        self.ledger.unrouted += 1
        log.warning(
            "a call to a peer (run id %s) belongs to no single test in flight; not "
            "recorded (the agent can forward X-Agent-Health-Run-Id, or run with -j 1)",
            self.run_id,
        )


def _now() -> str:
    return objects.stamp(datetime.now(UTC))


INTERRUPTED = "interrupted before it finished"
"""The error of a test the run stopped in the middle of (Ctrl-C, a closed output)."""


def _interrupted(cell: _Cell) -> Callable[[], list[objects.Object]]:
    """The controller's last records of a cell whose test the run cut short: a run-result
    and a cell-end that say so, blaming the interruption (cause ``infra``) and nobody else.

    Without the run-result, the exchanges the agent answered and no account of them read as
    doubtful evidence, which is the agent's: a run stopped by its user would be graded (by
    ``agent-health grade``) as the agent's failure.
    """
    info = cell.info

    def records() -> list[objects.Object]:
        at = _now()
        return [
            objects.run_result(
                at=at,
                run_id=info.run_id,
                prompt=None,
                error=f"{INTERRUPTED}: what agent.run() returned, if it had, was not recorded",
                cause="infra",
            ),
            objects.cell_end(
                at=at,
                status="errored",
                error=INTERRUPTED,
                duration_ms=max(0.0, (time.time() - cell.began) * 1000),
                cause="infra",
            ),
        ]

    return records


def _directory(url: str) -> Path | None:
    """The directory of a ``file://`` URL or plain path; ``None`` for other stores."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() != "file":
        return None
    path = rest if sep else url
    if not path:
        raise ledger.BackendConfigError(f"ledger URL {url!r} names no directory: file://DIR")
    return Path(path).expanduser()


def _holds_a_ledger(directory: Path) -> str | None:
    """The name of a ledger file already in ``directory``, if any."""
    if not directory.is_dir():
        return None
    return next((p.name for p in sorted(directory.glob("*.jsonl"))), None)


def controller_records(
    result: TestResult,
    run: RunResult | None,
    *,
    agent_error: str | None = None,
    at: str | None = None,
) -> list[objects.Object]:
    """What a cell's controller appends after its test: run-result, signals, cell-end, as the
    JSON objects that are sealed (:mod:`agent_health.ledger.objects`).

    When ``agent.run()`` failed (``agent_error``), the run-result says why instead of what
    the agent answered: the gateway saw the target answer, and the grader needs the
    controller's account of that exchange. ``at``: their time (default: now).
    """
    at = at or _now()  # one time for the records the test's end writes together
    items: list[objects.Object] = []
    if agent_error is not None and run is not None:
        # A conversation that failed at turn n keeps the n - 1 turns answered before it: a
        # replay answers them and fails where the recording failed.
        answered = runrecord.run_record(run, at)
        answered.update(error=agent_error, cause=result.cause or "agent")
        items.append(answered)
    elif agent_error is not None:
        items.append(
            objects.run_result(
                at=at,
                run_id=result.run_id,
                prompt=result.prompt,
                error=agent_error,
                cause=result.cause or "agent",
            )
        )
    elif run is not None:
        items.append(runrecord.run_record(run, at))
    items.extend(objects.signal(at=at, data=runrecord.signal_data(s)) for s in result.signals)
    items.append(
        objects.cell_end(
            at=at,
            # A cell is one try: a try passes or not; only the run's fold of tries is flaky.
            status="passed" if result.status == "flaky" else result.status,
            exit_code=None,
            error=result.error or result.skip_reason,
            duration_ms=max(0.0, result.duration_ms),
            cause=result.cause,
            content_hash=result.content_hash or None,
            insights=runrecord.plain(to_jsonable_python(result.insights))
            if result.insights is not None
            else None,
        )
    )
    return items
