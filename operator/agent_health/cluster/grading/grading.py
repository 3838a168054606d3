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

A ledger the gateway could not keep whole (it dropped exchanges) is the infrastructure's gap
(``errored``, cause ``infra``) when the store refused a write or the controller's own
records overflowed the cell's share; when the target's own traffic filled the share, the gap
is the agent's: the test is graded on what was recorded, and may fail but never pass.

Every errored grade has a ``cause`` (``agent``, ``judge``, ``test``, ``infra``). A cell whose
test ran takes the controller's (its ``cell-end``, and the ``run-result`` that says why the
agent call failed); doubtful evidence is the agent's (:class:`errors.DoubtfulEvidence`), so
breaking a failed test's evidence can never lift it out of the pass rate.

The checks, and why records without a principal field are the controller's, are in
:mod:`~agent_health.cluster.grading.evidence`.

The status is recomputed from the recorded signals with :func:`engine.outcome.grading.decide` and
the score with :func:`engine.outcome.grading.score`. When the controller's ``cell-end`` status
disagrees, the disagreement is kept on the grade (``discrepancy``); the recomputed status
wins, except that a disagreement never yields ``passed`` (it becomes ``errored``).

Infrastructure failures that leave no usable ledger (image pull, eviction, a sidecar's
OOM, the pod's deadline) are graded by :func:`grade_failed_pod`, with the retry decision:
only a failure whose cause is ``infra`` is retried (:func:`error_cause`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, get_args

import pydantic

from agent_health import ledger
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import evidence
from agent_health.engine import outcome
from agent_health.judging import usage as judge_usage
from agent_health.ledger import store
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results, tracesconfig
from agent_health.traces import metrics

InfraCause = Literal[
    "image-pull",
    "evicted",
    "sidecar-oom",
    "sidecar-crash",
    "gateway-restart",
    "unschedulable",
    "node-lost",
    "deadline",
    "target-crash",
    "target-oom",
    "other",
]
# A retry can heal every cause but these: a deadline would run out again, the agent's own
# failures must not be retried, and an unknown one is not known to heal.
_LASTING = {"deadline", "target-crash", "target-oom", "other"}
RETRYABLE_CAUSES: frozenset[InfraCause] = frozenset(get_args(InfraCause)) - _LASTING
# Ways a pod can fail that are the agent's doing: its own container crashed or was OOM-killed.
# Never retried: a retry would hand the agent best-of-N.
AGENT_CAUSES: frozenset[InfraCause] = frozenset({"target-crash", "target-oom"})


def error_cause(cause: InfraCause) -> results.Cause:
    """Whom a failed pod's ``cause`` blames: the agent for :data:`AGENT_CAUSES`, else the
    infrastructure; only an ``infra`` one may be retried."""
    return "agent" if cause in AGENT_CAUSES else "infra"


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
    peer_tools: dict[str, tuple[str, ...]] = pydantic.Field(default_factory=dict)
    """Peer name → the tools it serves (``peers[].tools``, and those an MCP peer listed when
    the RunSpec resolved): claims of those are checked."""
    mcp_peers: tuple[str, ...] = ()
    """The peers declared MCP servers: their exchanges are no tool's calls, their ``mcp``
    records are (also when the target made none)."""
    ledger_cell: str | None = None
    """The ledger cell of the attempt graded (``CELL`` or ``CELL.aN``); with ``attempt``, the
    ledger's sealed cell-meta must name both, so no other cell's or attempt's ledger passes."""
    attempt: int | None = pydantic.Field(default=None, ge=0)
    agent: str | None = None  # the agent of an agent matrix, as the operator planned it


class CellGrade(pydantic.BaseModel):
    """The operator's grade of one cell, ready to fold into the EvaluationRun status."""

    model_config = pydantic.ConfigDict(frozen=True)

    cell: str
    test_id: str
    repeat: int
    status: results.Status
    score: float | None = None
    error: str | None = None
    cause: results.Cause | None = pydantic.Field(
        default=None, description="why an errored cell errored (agent, judge, test, infra)"
    )
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
    unverified_claims: int = pydantic.Field(
        default=0, ge=0, description="tool calls claimed on a declared peer the gateway never saw"
    )
    verified: bool | None = pydantic.Field(
        default=None,
        description="whether the cell's ledger HMAC chain verified; None: not graded from a "
        "ledger (an infrastructure failure, a skip, no records)",
    )
    result: results.TestResult


async def grade_cell(
    backend: store.Backend,
    cell_name: str,
    key: bytes,
    expected: ExpectedCell,
    *,
    prices: tracesconfig.PriceTable | None = None,
    ledger_cell: str | None = None,
) -> CellGrade:
    """Read, verify and grade the finished cell ``cell_name`` (its pod has ended).

    ``ledger_cell`` names the ledger cell when it is not the cell's own name (a retried
    attempt records into its own); the grade is always the cell's. Doubtful evidence gives
    an ``errored`` grade. A ledger that cannot be *read* (the store is down) raises
    :class:`errors.LedgerUnavailable`: try again later.
    """
    where = ledger_cell or cell_name
    try:
        lines = await backend.read(where)
    except ledger.BackendError as err:
        raise errors.LedgerUnavailable(
            f"cannot read the ledger of cell {where} at {backend.url}: {err}"
        ) from err
    return await asyncio.to_thread(grade_lines, cell_name, lines, key, expected, prices=prices)


def grade_lines(
    cell_name: str,
    lines: list[str],
    key: bytes,
    expected: ExpectedCell,
    *,
    prices: tracesconfig.PriceTable | None = None,
) -> CellGrade:
    """:func:`grade_cell` without the I/O: grade a finished cell's ledger lines."""
    try:
        return _grade(cell_name, lines, key, expected, prices)
    except errors.IncompleteEvidence as gap:  # the chain held: the gateway's gap is on it
        grade = _errored(cell_name, expected, str(gap), "infra")
        return grade.model_copy(update={"infra": True, "verified": True})
    except errors.UnverifiedLedger as broken:
        grade = _errored(cell_name, expected, str(broken), "agent")
        return grade.model_copy(update={"verified": False})
    except errors.DoubtfulEvidence as doubt:
        # No records at all (nothing to verify), or a chain that verified but is not this
        # cell's or cannot be read as one.
        verified = None if not any(line.strip() for line in lines) else True
        grade = _errored(cell_name, expected, str(doubt), "agent")
        return grade.model_copy(update={"verified": verified})


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
    retry is allowed for infrastructure causes a new pod can heal (:data:`RETRYABLE_CAUSES`)
    while ``attempt < policy.infra_retries``, after ``policy.backoff_seconds``; never for a
    failure the agent caused (a retry would hand it best-of-N). A test that ran to its end
    is graded by :func:`grade_cell` and is never retried.
    """
    blamed = error_cause(cause)
    healable = blamed == "infra" and cause in RETRYABLE_CAUSES
    retryable = healable and attempt < policy.infra_retries
    if retryable:
        note = f"retry {attempt + 1} of {policy.infra_retries}"
    elif healable:
        note = f"no retries left ({policy.infra_retries} allowed)"
    else:
        note = "not retried"
    what = "infrastructure failure" if blamed == "infra" else f"{blamed} failure"
    message = f"{what} ({cause}): {reason}; {note}"
    grade = _errored(cell_name, expected, message, blamed)
    return grade.model_copy(
        update={
            "infra": blamed == "infra",
            "retryable": retryable,
            "retry_after_seconds": float(policy.backoff_seconds) if retryable else None,
        }
    )


def _grade(
    cell_name: str,
    lines: list[str],
    key: bytes,
    expected: ExpectedCell,
    prices: tracesconfig.PriceTable | None,
) -> CellGrade:
    found = evidence.read(
        cell_name,
        lines,
        key,
        test_id=expected.test_id,
        repeat=expected.repeat,
        run_id=expected.run_id,
        ledger_cell=expected.ledger_cell,
        attempt=expected.attempt,
        mcp_peers=expected.mcp_peers,
    )
    end = found.end
    # The errors an MCP server answered count as the agent's tool errors, reported or not.
    measured = outcome.as_seen(found.run, found.calls)
    derived = metrics.derive(measured, prices)
    derived |= outcome.gateway_tokens(found.usage)
    peer_tools = outcome.served_tools(expected.peer_tools, found.mcp_tools)
    checked = outcome.check_claims(found.signals, found.run, found.calls, peer_tools)
    signals = checked.signals
    problems, cause = _problems(found)
    recomputed = outcome.decide(signals, problems, end.status == "skipped")
    status, error, discrepancy = recomputed, "; ".join(problems) or None, None
    if recomputed != end.status:
        discrepancy = (
            f"the controller reported {end.status}, its recorded signals give {recomputed}"
        )
        if recomputed == "passed":
            status, error = "errored", f"doubtful evidence: {discrepancy}"
            cause = "agent"  # as for any doubtful evidence: it must not raise the pass rate
    if found.gap is not None:
        # The target's own traffic cut the record short: what it left may fail the test (a
        # failed one stays failed, an errored one keeps its cause), never pass it.
        if status == "passed":
            status, error, cause = "errored", f"not passed: {found.gap}", "agent"
        else:
            error = "; ".join(filter(None, (error, found.gap)))
    result = _test_result(
        expected.model_copy(
            update={"content_hash": expected.content_hash or end.content_hash or ""}
        ),
        status,
        error,
        tuple(signals),
        found.run,
        derived,
        duration_ms=end.duration_ms or 0.0,
        started_at=found.meta.started_at.timestamp(),
        cause=cause if status == "errored" else None,
        insights=end.insights,
    )
    if found.mcp_calls:
        seen: dict[str, Any] = {"mcp_calls": found.mcp_calls}
        if measured is not None:  # the run as the gateway saw it (engine.outcome.claims.as_seen)
            seen["trajectory"] = measured.trajectory_steps
        result = result.model_copy(update=seen)
    return CellGrade(
        cell=cell_name,
        test_id=expected.test_id,
        repeat=expected.repeat,
        status=status,
        score=result.score,
        error=error,
        cause=result.cause,
        reported_status=end.status,
        discrepancy=discrepancy,
        records=found.records,
        duration_ms=result.duration_ms,
        metrics=derived,
        usage=found.usage,
        judge=judge_usage.summarize([result]),
        unverified_claims=checked.unverified,
        verified=True,
        result=result,
    )


def _problems(found: evidence.Evidence) -> tuple[list[str], results.Cause]:
    """Why the test errored, as the engine decided it, and whom that blames: the errors of
    the controller's cell-end (with their cause, or the failed agent call's); without them,
    gate judge calls that errored."""
    end = found.end
    failed_call = found.run_error.cause if found.run_error is not None else None
    if end.error:
        return [end.error], end.cause or failed_call or "test"
    judged = _judge_errors(found.signals)
    if judged:
        return judged, "judge"
    if end.status == "errored":
        return ["the controller reported errored without a message"], end.cause or "test"
    return [], "test"


def _judge_errors(signals: list[results.Signal]) -> list[str]:
    return [  # gate calls only: an errored observation never changes the gate
        f"judge errored on {s.name!r}: {s.error}"
        for s in signals
        if s.kind == "judge" and s.role == "gate" and (s.evidence or {}).get("errored")
    ]


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
    cause: results.Cause | None = None,
    insights: dict[str, Any] | None = None,
) -> results.TestResult:
    return results.TestResult(
        id=expected.test_id,
        name=expected.title or expected.test_id,
        title=expected.title or expected.test_id,
        file=expected.file,
        line=expected.line,
        labels=expected.labels,
        repeat=expected.repeat,
        status=status,
        score=outcome.score(signals, status),
        error=error,
        cause=cause,
        run_id=expected.run_id,
        **(run.kept() if run is not None else {}),
        duration_ms=duration_ms,
        started_at=started_at,
        signals=signals,
        metrics=derived,
        content_hash=expected.content_hash,
        agent=expected.agent,
        insights=insights,  # what the cell's insights said, as the cell recorded it
        skip_reason=outcome.skip_reason(status, signals),
    )


def _errored(
    cell_name: str, expected: ExpectedCell, reason: str, cause: results.Cause
) -> CellGrade:
    result = _test_result(expected, "errored", reason, (), None, {}, cause=cause)
    return CellGrade(
        cell=cell_name,
        test_id=expected.test_id,
        repeat=expected.repeat,
        status="errored",
        error=reason,
        cause=cause,
        result=result,
    )
