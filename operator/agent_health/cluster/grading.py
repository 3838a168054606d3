"""Grading a cell from its ledger: the operator's verdict, never the cell's own word.

A cell's pod may say anything about itself; its ledger is what the operator trusts, and only
as far as it can check it. :func:`grade_cell` reads the cell's records and refuses doubtful
evidence — the grade is ``errored`` with a precise reason, never ``passed``, when:

* the cell has no ledger ("no ledger for cell X");
* the HMAC chain breaks ("ledger tampered at record N (reason)"), or it has no final
  ``cell-end`` ("no final record from controller");
* the first record names another test, repeat or run ("ledger belongs to another cell (…)"):
  a chain copied whole from another cell verifies, so the chain alone is not enough;
* the agent was called (the gateway saw the target talk) but no ``run-result`` was recorded,
  or a record is malformed, duplicated, or claims a trusted principal without token evidence.

Who wrote what: ``run-result``, ``signal`` and ``cell-end`` records carry no principal
field. They are trusted as the controller's because the gateway holds the only HMAC key
and appends them only on its controller route, which checks the controller's per-cell
token (DESIGN.md §6); a verifying chain therefore proves the controller sent them.

The status is recomputed from the recorded signals with :func:`engine.grading.decide` and
the score with :func:`engine.grading.score`. When the controller's ``cell-end`` status
disagrees, the disagreement is kept on the grade (``discrepancy``); the recomputed status
wins, except that a disagreement never yields ``passed`` (it becomes ``errored``).

Infrastructure failures that leave no usable ledger (image pull, eviction, a sidecar's
OOM, the pod's deadline) are graded by :func:`grade_failed_pod`, with the retry decision.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pydantic

from agent_health.cluster import errors, evaluationrun
from agent_health.connectors import protocol
from agent_health.engine import grading as engine_grading
from agent_health.engine import runner
from agent_health.judging import usage as judge_usage
from agent_health.ledger import backends, chain, records
from agent_health.ledger import errors as ledger_errors
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results
from agent_health.traces import metrics, settings

InfraCause = Literal[
    "image-pull", "evicted", "sidecar-oom", "unschedulable", "node-lost", "deadline", "other"
]
# A retry can heal these; a deadline means the cell ran out of time and would again.
RETRYABLE_CAUSES: frozenset[InfraCause] = frozenset(
    {"image-pull", "evicted", "sidecar-oom", "unschedulable", "node-lost"}
)
_TRUSTED = ("controller", "peer:")


class ExpectedCell(pydantic.BaseModel):
    """What the operator planned for a cell; the ledger must agree with it."""

    model_config = pydantic.ConfigDict(frozen=True)

    test_id: str
    repeat: int = pydantic.Field(ge=0)
    run_id: str
    title: str | None = None
    file: str = ""
    line: int = 0
    labels: tuple[str, ...] = ()
    content_hash: str = ""


class CellGrade(pydantic.BaseModel):
    """The operator's grade of one cell, ready to fold into the EvaluationRun status."""

    model_config = pydantic.ConfigDict(frozen=True)

    cell: str
    test_id: str
    repeat: int
    status: results.Status
    score: float | None = None
    error: str | None = None
    reported_status: results.Status | None = pydantic.Field(
        default=None, description="what the controller's cell-end said"
    )
    discrepancy: str | None = pydantic.Field(
        default=None, description="why the grade differs from the controller's status"
    )
    infra: bool = pydantic.Field(default=False, description="an infrastructure failure")
    retryable: bool = False
    retry_after_seconds: float | None = None
    records: int = 0
    duration_ms: float = 0.0
    metrics: dict[str, Any] = pydantic.Field(default_factory=dict)
    usage: dict[str, ledger_usage.TokenUsage] = pydantic.Field(
        default_factory=dict,
        description='tokens seen by the gateway, by consumer: "target", "judge", "peer:NAME"',
    )
    judge: judge_usage.JudgeUsage = pydantic.Field(default_factory=judge_usage.JudgeUsage)
    result: results.TestResult


class _Doubt(Exception):
    """Evidence that cannot be graded; the message becomes the errored grade's reason."""


async def grade_cell(
    backend: backends.Backend,
    cell_name: str,
    key: bytes,
    expected: ExpectedCell,
    *,
    prices: settings.PriceTable | None = None,
) -> CellGrade:
    """Read, verify and grade the finished cell ``cell_name`` (its pod has ended).

    Doubtful evidence gives an ``errored`` grade. A ledger that cannot be *read* (the
    store is down) raises :class:`errors.LedgerUnavailable`: try again later.
    """
    try:
        lines = await backend.read(cell_name)
    except ledger_errors.BackendError as err:
        raise errors.LedgerUnavailable(
            f"cannot read the ledger of cell {cell_name} at {backend.url}: {err}"
        ) from err
    return await asyncio.to_thread(grade_lines, cell_name, lines, key, expected, prices=prices)


def grade_lines(
    cell_name: str,
    lines: list[str],
    key: bytes,
    expected: ExpectedCell,
    *,
    prices: settings.PriceTable | None = None,
) -> CellGrade:
    """:func:`grade_cell` without the I/O: grade a finished cell's ledger lines."""
    try:
        return _grade(cell_name, lines, key, expected, prices)
    except _Doubt as doubt:
        return _errored(cell_name, expected, str(doubt))


def grade_failed_pod(
    cell_name: str,
    expected: ExpectedCell,
    reason: str,
    *,
    cause: InfraCause,
    attempt: int,
    policy: evaluationrun.Retry,
) -> CellGrade:
    """An ``errored`` grade for a cell the infrastructure failed, and whether to retry it.

    ``attempt`` counts the infrastructure retries already made (0 for the first try). A
    retry is allowed for causes a new pod can heal (:data:`RETRYABLE_CAUSES`) while
    ``attempt < policy.infra_retries``, after ``policy.backoff_seconds``. A test that ran
    to its end is graded by :func:`grade_cell` and is never retried.
    """
    retryable = cause in RETRYABLE_CAUSES and attempt < policy.infra_retries
    if retryable:
        note = f"retry {attempt + 1} of {policy.infra_retries}"
    elif cause in RETRYABLE_CAUSES:
        note = f"no retries left ({policy.infra_retries} allowed)"
    else:
        note = "not retried"
    message = f"infrastructure failure ({cause}): {reason}; {note}"
    grade = _errored(cell_name, expected, message)
    return grade.model_copy(
        update={
            "infra": True,
            "retryable": retryable,
            "retry_after_seconds": float(policy.backoff_seconds) if retryable else None,
        }
    )


def _grade(
    cell_name: str,
    lines: list[str],
    key: bytes,
    expected: ExpectedCell,
    prices: settings.PriceTable | None,
) -> CellGrade:
    if not any(line.strip() for line in lines):
        raise _Doubt(f"no ledger for cell {cell_name}")
    checked = chain.verify(lines, key, complete=True)
    if not checked.ok and checked.problem is not None:
        problem = checked.problem
        if problem.reason == "truncated":
            raise _Doubt(
                f"no final record from controller: the ledger of cell {cell_name} ends after "
                f"record {checked.records - 1} without cell-end (cut off, or the controller died)"
            )
        raise _Doubt(
            f"ledger tampered at record {problem.seq} ({problem.reason}: {problem.message})"
        )
    parsed = records.parse_lines(lines)
    meta, end = parsed[0], parsed[-1]
    if not isinstance(meta, records.CellMeta) or not isinstance(end, records.CellEnd):
        raise _Doubt(
            f"the ledger of cell {cell_name} does not start with cell-meta and end with cell-end"
        )
    _check_meta(meta, expected)
    run_record, signals, usage = _read_body(parsed[1:-1], meta)
    run = _run_result(run_record) if run_record is not None else None
    derived = metrics.derive(run, prices)
    # Mirror the engine: the body's errors (cell-end), else judge calls that errored.
    problems = [end.error] if end.error else _judge_errors(signals)
    if end.status == "errored" and not problems:
        problems = ["the controller reported errored without a message"]
    recomputed = engine_grading.decide(signals, problems, end.status == "skipped")
    status, error, discrepancy = recomputed, "; ".join(problems) or None, None
    if recomputed != end.status:
        discrepancy = (
            f"the controller reported {end.status}, its recorded signals give {recomputed}"
        )
        if recomputed == "passed":
            status, error = "errored", f"doubtful evidence: {discrepancy}"
    all_signals = (*signals, *runner.metric_signals(derived))
    result = _test_result(
        expected,
        status,
        error,
        all_signals,
        run,
        derived,
        duration_ms=end.duration_ms or 0.0,
        started_at=meta.started_at.timestamp(),
    )
    return CellGrade(
        cell=cell_name,
        test_id=expected.test_id,
        repeat=expected.repeat,
        status=status,
        score=result.score,
        error=error,
        reported_status=end.status,
        discrepancy=discrepancy,
        records=checked.records,
        duration_ms=result.duration_ms,
        metrics=derived,
        usage=usage,
        judge=judge_usage.summarize([result]),
        result=result,
    )


def _check_meta(meta: records.CellMeta, expected: ExpectedCell) -> None:
    wrong = [
        f"{name} {got!r}, expected {want!r}"
        for name, got, want in (
            ("test", meta.test_id, expected.test_id),
            ("repeat", meta.repeat, expected.repeat),
            ("run", meta.run_id, expected.run_id),
        )
        if got != want
    ]
    if wrong:
        raise _Doubt(f"ledger belongs to another cell ({'; '.join(wrong)})")


def _read_body(
    body: list[records.Record], meta: records.CellMeta
) -> tuple[
    records.RunResultRecord | None, list[results.Signal], dict[str, ledger_usage.TokenUsage]
]:
    """The run-result, the signals and token usage by consumer, checking each record."""
    run_record: records.RunResultRecord | None = None
    signals: list[results.Signal] = []
    usage: dict[str, ledger_usage.TokenUsage] = {}
    target_seen: int | None = None
    for record in body:
        if isinstance(record, records.CellMeta):
            raise _Doubt(f"a second cell-meta record at record {record.seq}")
        if isinstance(record, records.Exchange):
            if record.principal.startswith(_TRUSTED) and record.evidence == "none":
                raise _Doubt(
                    f"exchange at record {record.seq} is attributed to {record.principal} "
                    "without token evidence"
                )
            if target_seen is None and "target" in (record.principal, record.upstream):
                target_seen = record.seq
            if record.usage is not None:
                consumer = "judge" if record.upstream == "judge" else record.principal
                usage[consumer] = _add(usage.get(consumer), record.usage)
        elif isinstance(record, records.RunResultRecord):
            if run_record is not None:
                raise _Doubt(
                    f"two run-result records (records {run_record.seq} and {record.seq}); "
                    "a test calls the agent once"
                )
            if record.run_id != meta.run_id:
                raise _Doubt(
                    f"run-result at record {record.seq} is of run {record.run_id!r}, "
                    f"the cell is run {meta.run_id!r}"
                )
            run_record = record
        elif isinstance(record, records.SignalRecord):
            signals.append(_signal(record))
    if run_record is None and target_seen is not None:
        raise _Doubt(
            f"no run-result record from controller, yet the gateway recorded the target's "
            f"exchange at record {target_seen}"
        )
    # Derived metrics are recomputed from the run; the controller's copies are dropped.
    kept = [s for s in signals if not (s.kind == "metric" and s.name in metrics.METRIC_KEYS)]
    return run_record, kept, usage


def _judge_errors(signals: list[results.Signal]) -> list[str]:
    return [
        f"judge errored on {s.name!r}: {s.error}"
        for s in signals
        if s.kind == "judge" and (s.evidence or {}).get("errored")
    ]


def _signal(record: records.SignalRecord) -> results.Signal:
    try:
        return results.Signal.model_validate(record.signal)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "signal"
        raise _Doubt(f"signal at record {record.seq}: {field}: {first['msg']}") from err


def _run_result(record: records.RunResultRecord) -> results.RunResult:
    try:
        steps = tuple(protocol.Step.model_validate(s) for s in record.trajectory)
    except pydantic.ValidationError as err:
        raise _Doubt(
            f"run-result at record {record.seq}: a trajectory step is invalid: "
            f"{err.errors()[0]['msg']}"
        ) from err
    return results.RunResult(
        run_id=record.run_id,
        prompt=record.prompt or "",
        output=record.output,
        trajectory=steps,
        token_usage=protocol.TokenUsage.from_counts(record.token_usage) or protocol.TokenUsage(),
        duration_ms=record.duration_ms,
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


def _test_result(
    expected: ExpectedCell,
    status: results.Status,
    error: str | None,
    signals: tuple[results.Signal, ...],
    run: results.RunResult | None,
    derived: dict[str, Any],
    *,
    duration_ms: float = 0.0,
    started_at: float = 0.0,
) -> results.TestResult:
    title = expected.title or expected.test_id
    return results.TestResult(
        id=expected.test_id,
        name=title,
        title=title,
        file=expected.file,
        line=expected.line,
        labels=expected.labels,
        repeat=expected.repeat,
        status=status,
        score=engine_grading.score(signals, status),
        error=error,
        run_id=expected.run_id,
        prompt=run.prompt if run is not None else None,
        duration_ms=duration_ms,
        started_at=started_at,
        signals=signals,
        metrics=derived,
        token_usage=run.token_usage if run is not None else protocol.TokenUsage(),
        content_hash=expected.content_hash,
    )


def _errored(cell_name: str, expected: ExpectedCell, reason: str) -> CellGrade:
    result = _test_result(expected, "errored", reason, (), None, {})
    return CellGrade(
        cell=cell_name,
        test_id=expected.test_id,
        repeat=expected.repeat,
        status="errored",
        error=reason,
        result=result,
    )
