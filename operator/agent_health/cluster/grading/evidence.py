"""What a finished cell's ledger proves, or why it proves nothing (the grader's input).

:func:`read` verifies the HMAC chain (the ledger must be complete: the pod has ended),
checks that the first record names the expected test, repeat and run, and reads the
records between ``cell-meta`` and ``cell-end``: the one ``run-result`` rebuilt as a
:class:`~agent_health.sdk.results.RunResult`, the signals, and the token usage the gateway
saw, summed by consumer (``target``, ``judge``, ``peer:NAME``). Anything doubtful raises
:class:`~agent_health.cluster.errors.DoubtfulEvidence` with a message fit for the grade.

``run-result``, ``signal`` and ``cell-end`` records carry no principal field. They are the
controller's because the gateway holds the only HMAC key and appends them only on its
controller route, which checks the controller's per-cell token (docs/ledger.md): a chain that
verifies proves the controller sent them. Exchanges do carry a principal; one that claims a
trusted principal (controller, peer) without token evidence is doubtful.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from agent_health import ledger
from agent_health.cluster import errors
from agent_health.connectors import protocol
from agent_health.engine import outcome
from agent_health.ledger import chain, records
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results, turns
from agent_health.traces import metrics

_TRUSTED = ("controller", "peer:")
Usage = dict[str, ledger_usage.TokenUsage]
RunRecord = records.RunResultRecord  # named here: Evidence has a field called ``records``


@dataclass(frozen=True)
class Evidence:
    """A verified cell ledger, read."""

    meta: records.CellMeta
    end: records.CellEnd
    run: results.RunResult | None
    signals: list[results.Signal]
    usage: Usage
    records: int
    run_error: RunRecord | None = None
    """The run-result that says why ``agent.run()`` failed (then ``run`` is ``None``)."""
    calls: list[outcome.Sighting] = dataclasses.field(default_factory=list)
    """Each call from the target to a peer, in the order the calls started (the gateway's
    record: what tool claims are held to): a plain peer's request, or an MCP ``tools/call``
    with its tool, arguments and ``isError``."""
    mcp_tools: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    """MCP peer name → the tools the gateway saw it list or be called for."""
    mcp_calls: tuple[dict[str, Any], ...] = ()
    """The target's MCP calls as the report shows them (``claims.reported``)."""
    gap: str | None = None
    """Why the gateway's record is not whole when the target made it so (its own traffic
    filled the cell's share): the grade may fail, never pass. A gap the infrastructure left
    raises :class:`~agent_health.cluster.errors.IncompleteEvidence` instead."""


def read(
    cell_name: str,
    lines: list[str],
    key: bytes,
    *,
    test_id: str,
    repeat: int,
    run_id: str,
    ledger_cell: str | None = None,
    attempt: int | None = None,
    mcp_peers: Sequence[str] = (),
) -> Evidence:
    """The evidence in a finished cell's ``lines``; raises ``DoubtfulEvidence``.

    ``ledger_cell`` and ``attempt``, when given, must be what the sealed cell-meta names;
    ``mcp_peers`` are the peers declared MCP servers."""
    if not any(line.strip() for line in lines):
        raise errors.DoubtfulEvidence(f"no ledger for cell {cell_name}")
    checked = chain.verify(lines, key, complete=True)
    if not checked.ok:
        problem = checked.problem
        if problem is not None and problem.reason == "truncated":
            gap = None
            with contextlib.suppress(ledger.RecordError):  # the chain held: a gap
                gap = _gap(records.parse_lines(lines))  # the gateway left says so
            raise errors.UnverifiedLedger(
                f"no final record from controller: the ledger of cell {cell_name} ends after "
                f"record {checked.records - 1} without cell-end (cut off, or the controller died)"
                + (f"; {gap}" if gap else "")
            )
        where = f"{problem.seq} ({problem.reason}: {problem.message})" if problem else "?"
        raise errors.UnverifiedLedger(f"ledger tampered at record {where}")
    try:
        parsed = records.parse_lines(lines)
    except ledger.RecordError as err:
        raise errors.DoubtfulEvidence(f"ledger of cell {cell_name}: {err}") from err
    meta, end = parsed[0], parsed[-1]
    if not isinstance(meta, records.CellMeta) or not isinstance(end, records.CellEnd):
        raise errors.DoubtfulEvidence(
            f"the ledger of cell {cell_name} does not start with cell-meta and end with cell-end"
        )
    _check_meta(meta, test_id, repeat, run_id)
    if ledger_cell is not None or attempt is not None:
        _check_attempt(meta, ledger_cell, attempt)
    gap = _gap(parsed[1:-1])
    try:
        run_record, signals, usage, seen = _read_body(parsed[1:-1], meta, mcp_peers)
    except errors.DoubtfulEvidence as err:
        if gap is None or isinstance(err, errors.IncompleteEvidence):
            raise
        raise errors.DoubtfulEvidence(f"{err}; {gap}") from err
    calls, mcp_tools, mcp_calls = seen
    found = Evidence(
        meta,
        end,
        None,
        signals,
        usage,
        checked.records,
        calls=calls,
        mcp_tools=mcp_tools,
        mcp_calls=mcp_calls,
        gap=gap,
    )
    if run_record is not None and run_record.error is not None:
        return dataclasses.replace(found, run_error=run_record)
    run = _run_result(run_record) if run_record is not None else None
    return dataclasses.replace(found, run=run)


def _check_meta(meta: records.CellMeta, test_id: str, repeat: int, run_id: str) -> None:
    wrong = [
        f"{name} {got!r}, expected {want!r}"
        for name, got, want in (
            ("test", meta.test_id, test_id),
            ("repeat", meta.repeat, repeat),
            ("run", meta.run_id, run_id),
        )
        if got != want
    ]
    if wrong:
        raise errors.DoubtfulEvidence(f"ledger belongs to another cell ({'; '.join(wrong)})")


def _check_attempt(meta: records.CellMeta, ledger_cell: str | None, attempt: int | None) -> None:
    """The sealed cell-meta names this attempt's ledger cell: a ledger moved from another
    cell or another attempt of this one (``CELL`` / ``CELL.aN``) is another cell's."""
    wrong = [
        f"{name} {got!r}, expected {want!r}"
        for name, got, want in (
            ("cell", meta.cell, ledger_cell),
            ("attempt", meta.attempt, attempt),
        )
        if want is not None and got != want
    ]
    if wrong:
        raise errors.DoubtfulEvidence(f"ledger belongs to another cell ({'; '.join(wrong)})")


def _gap(parsed: list[records.Record]) -> str | None:
    """Why the gateway's record of a cell whose gateway dropped exchanges (its caps, a store
    that refused a write) is not whole, with how many and why. The last mark says whom it
    blames: the infrastructure's gap raises ``IncompleteEvidence`` (a mark of an older gateway
    says nothing, and is read so); the agent's is returned, for the grade to hold against it."""
    marks = [r for r in parsed if isinstance(r, records.CellMeta) and r.dropped]
    if not marks:
        return None
    last = marks[-1]
    gap = (
        f"the gateway had to drop {last.dropped} of the cell's exchanges "
        f"({last.dropped_why or 'no reason given'}): the ledger is not complete evidence"
    )
    if last.dropped_cause == "agent":
        return gap
    raise errors.IncompleteEvidence(gap)


def _read_body(
    body: list[records.Record], meta: records.CellMeta, mcp_peers: Sequence[str] = ()
) -> tuple[
    records.RunResultRecord | None,
    list[results.Signal],
    Usage,
    Seen,
]:
    """The run-result, the signals, token usage by consumer, the target's calls to peers (in
    the order they started) and the tools each MCP peer showed, checking each record."""
    run_record: records.RunResultRecord | None = None
    signals: list[results.Signal] = []
    usage: Usage = {}
    to_peers: list[records.Exchange] = []  # target → peer:NAME exchanges that reached it
    mcp: list[records.McpRecord] = []  # the target's MCP calls (alone, or in their exchange)
    target_seen: int | None = None
    for record in records.unfold(body):
        if isinstance(record, records.CellMeta):
            if record.dropped and not record.restarted:
                continue  # the gateway's mark of what it dropped: read by _gap
            if record.restarted:
                raise errors.IncompleteEvidence(
                    f"the gateway restarted during the cell (record {record.seq}): exchanges "
                    "in flight were lost and its ports were free meanwhile, so the ledger is "
                    "not complete evidence"
                )
            raise errors.DoubtfulEvidence(f"a second cell-meta record at record {record.seq}")
        if isinstance(record, records.Exchange):
            if record.principal.startswith(_TRUSTED) and record.evidence == "none":
                raise errors.DoubtfulEvidence(
                    f"exchange at record {record.seq} is attributed to {record.principal} "
                    "without token evidence"
                )
            # A call the gateway refused (callee "gateway") reached no one: it is an attempt
            # on record, not a sign that the agent ran.
            reached = record.upstream != "gateway"
            to_peer = record.upstream.startswith("peer:") and record.status is not None
            if record.principal == "target" and to_peer:
                to_peers.append(record)
            if target_seen is None and reached and "target" in (record.principal, record.upstream):
                target_seen = record.seq
            if record.usage is not None:
                consumer = "judge" if record.upstream == "judge" else record.principal
                usage[consumer] = _add(usage.get(consumer), record.usage)
        elif isinstance(record, records.McpRecord):
            if record.principal.startswith(_TRUSTED) and record.evidence == "none":
                raise errors.DoubtfulEvidence(
                    f"mcp call at record {record.seq} is attributed to {record.principal} "
                    "without token evidence"
                )
            if record.principal == "target":
                mcp.append(record)
        elif isinstance(record, records.SpansRecord):
            # The agent's OTLP spans (version 3): sent by the target, sealed by the gateway.
            if record.principal.startswith(_TRUSTED) and record.evidence == "none":
                raise errors.DoubtfulEvidence(
                    f"spans at record {record.seq} are attributed to {record.principal} "
                    "without token evidence"
                )
            if record.run_id != meta.run_id:
                raise errors.DoubtfulEvidence(
                    f"spans at record {record.seq} are of run {record.run_id!r}, "
                    f"the cell is run {meta.run_id!r}"
                )
        elif isinstance(record, records.RunResultRecord):
            if run_record is not None:
                raise errors.DoubtfulEvidence(
                    f"two run-result records (records {run_record.seq} and {record.seq}); "
                    "a test calls the agent once"
                )
            if record.run_id != meta.run_id:
                raise errors.DoubtfulEvidence(
                    f"run-result at record {record.seq} is of run {record.run_id!r}, "
                    f"the cell is run {meta.run_id!r}"
                )
            run_record = record
        elif isinstance(record, records.SignalRecord):
            signals.append(_signal(record))
    if run_record is None and target_seen is not None:
        raise errors.DoubtfulEvidence(
            f"no run-result record from controller, yet the gateway recorded the target's "
            f"exchange at record {target_seen}"
        )
    # Derived metrics are recomputed from the run; the controller's copies are dropped.
    kept = [s for s in signals if not (s.kind == "metric" and s.name in metrics.METRIC_KEYS)]
    return run_record, kept, usage, sightings(to_peers, mcp, mcp_peers)


Seen = tuple[list[outcome.Sighting], dict[str, set[str]], tuple[dict[str, Any], ...]]


def sightings(
    exchanges: list[records.Exchange],
    mcp: list[records.McpRecord],
    mcp_peers: Sequence[str] = (),
) -> Seen:
    """The target's calls to peers in the order they started, the tools each MCP peer showed,
    and its MCP calls as the report shows them (:mod:`agent_health.engine.outcome.claims`, as a
    local run reads its own)."""
    made: list[records.Record] = [*exchanges, *mcp]
    objects = [records.to_object(r) for r in made]
    calls, shown = outcome.sightings(objects, mcp_peers)
    return calls, shown, outcome.reported_calls(objects)


def _signal(record: records.SignalRecord) -> results.Signal:
    try:
        return results.Signal.model_validate(record.signal)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "signal"
        raise errors.DoubtfulEvidence(
            f"signal at record {record.seq}: {field}: {first['msg']}"
        ) from err


def _run_result(record: records.RunResultRecord) -> results.RunResult:
    try:
        steps = tuple(protocol.Step.model_validate(s) for s in record.trajectory)
        context = tuple(protocol.ContextItem.model_validate(c) for c in record.context)
        taken = turns.from_record(record.turns, steps)
        ended = turns.end_of_record(record.ended)
    except (pydantic.ValidationError, KeyError, TypeError, ValueError) as err:
        why = err.errors()[0]["msg"] if isinstance(err, pydantic.ValidationError) else err
        raise errors.DoubtfulEvidence(
            f"run-result at record {record.seq}: a trajectory step, context item or turn is "
            f"invalid: {why}"
        ) from err
    return results.RunResult(
        run_id=record.run_id,
        prompt=record.prompt or "",
        context=context,
        output=record.output,
        trajectory=steps,
        token_usage=protocol.TokenUsage.from_counts(record.token_usage) or protocol.TokenUsage(),
        duration_ms=record.duration_ms,
        raw=record.raw or {},
        unreported=frozenset(record.unreported or ()),
        conversation=taken,
        ended=ended,
    )


def _add(
    total: ledger_usage.TokenUsage | None, more: ledger_usage.TokenUsage
) -> ledger_usage.TokenUsage:
    if total is None:
        return more.model_copy(update={"model": None})
    return ledger_usage.TokenUsage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        total_tokens=total.total_tokens + more.total_tokens,
    )
