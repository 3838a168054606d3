"""One test's entry in the JSON report: what it is, what it did, how it was judged.

:class:`TestEntry` is the documented, validated shape of ``tests[]`` (README "JSON report"
lists the same fields); :func:`from_result` makes one from a :class:`TestResult`, cutting
long fields to their caps (:mod:`.bounds`). Entries are kept as plain dicts in the report:
readers index them by key, and a saved report of either version is checked with
:class:`TestEntry` when it is read back.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from agent_health.connectors import partial as partial_mod
from agent_health.engine.reports import bounds
from agent_health.sdk.results import Cause, Role, SignalKind, Status, TestResult
from agent_health.traces import metrics


class SignalEntry(BaseModel):
    """One signal: a matcher, a judge verdict or a derived metric, in body order."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: SignalKind
    role: Role
    name: str
    passed: bool | None = None
    score: float | None = None
    weight: float = 1.0
    evidence: dict[str, Any] | None = None
    reasoning: str | None = None
    error: str | None = None
    location: str | None = None


class PartialEntry(BaseModel):
    """What the agent had sent before its call timed out (``TestResult.partial``)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    source: partial_mod.Source = Field(
        description="body: the HTTP body received (REST, OpenAI-compatible); events: AG-UI "
        "events folded; stdout: a command's stdout"
    )
    bytes: int = Field(default=0, ge=0, description="the bytes that had arrived, in all")
    text: str = Field(default="", description="the body or stdout so far, or the folded text")
    truncated: bool = Field(default=False, description="more had arrived than text keeps")
    events: int | None = Field(default=None, ge=0, description="AG-UI: the events read")
    trajectory: list[dict[str, Any]] = Field(
        default_factory=list, description="AG-UI: the steps folded so far"
    )


class TestEntry(BaseModel):
    """One (test, repeat). ``cause`` and the fields after ``prompt`` up to ``ledger_cell``
    are new in v2."""

    __test__ = False
    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    id: str = Field(description="stable id: file relative to the suite root :: title")
    name: str
    file: str = ""
    line: int = 0
    labels: list[str] = Field(default_factory=list)
    repeat: int = Field(default=0, description="0-based repeat index")
    status: Status
    score: float | None = None
    error: str | None = None
    cause: Cause | None = Field(
        default=None, description="whom an errored test blames: agent, judge, test, infra"
    )
    skip_reason: str | None = None
    run_id: str = ""
    prompt: str | None = Field(default=None, description="the prompt agent.run() sent")
    context: list[dict[str, Any]] = Field(default_factory=list)
    output: str | None = Field(default=None, description="None when the agent never ran")
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[dict[str, Any]] = Field(
        default_factory=list,
        description="a conversation's turns: number, user, output, token_usage, duration_ms "
        "and steps (how many of the trajectory's steps, each marked with its turn); empty "
        "for a single run",
    )
    ended: dict[str, Any] | None = Field(
        default=None,
        description="why a conversation ended: reason (turns-done, user-stopped, goal-met, "
        "gave-up, max-turns) and detail; null for a single run",
    )
    partial: PartialEntry | None = Field(
        default=None,
        description="what the agent had sent before its call timed out; null otherwise",
    )
    truncated: list[str] = Field(
        default_factory=list, description="fields cut to their caps, e.g. trajectory[3].content"
    )
    ledger_cell: str | None = None
    agent: str | None = Field(
        default=None, description="the agent it ran against in an agent matrix; else null"
    )
    replayed: bool = Field(
        default=False, description="agent.run() was answered from a recording (--replay)"
    )
    quarantined: bool = Field(
        default=False,
        description="named by the run's quarantine file (run --quarantine): counted apart in "
        "summary.quarantined, never in the headline counts, pass rate or exit code",
    )
    duration_ms: float = 0.0
    content_hash: str = ""
    trace_id: str | None = Field(
        default=None,
        description="the W3C trace id agent.run() sent: the agent's spans and the OTLP export "
        "of the test share it (docs/otel.md); null when the agent never ran",
    )
    attempts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="every try of a retried test (--retries): status, reason, cause, score, "
        "duration_ms, run_id; empty when it ran once",
    )
    stdout: str | None = Field(default=None, description="what the body printed; None: nothing")
    stderr: str | None = Field(default=None, description="what the body wrote to stderr")
    signals: list[SignalEntry] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    insights: dict[str, Any] | None = None
    case: dict[str, Any] | None = Field(
        default=None,
        description="a case file's test: the case's metadata (id, subcategory, versions, "
        "expectedPPL, ...); null for a code test",
    )
    mcp_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the MCP calls the gateway read (server, method, name, arguments, "
        "is_error, error, problem); [] when the test had no MCP server",
    )


def from_result(r: TestResult) -> dict[str, Any]:
    """The report entry of one result (a plain dict, in :class:`TestEntry`'s field order)."""
    cut = bounds.Bounded()
    prompt = cut.text(r.prompt, "prompt")
    context = cut.context(r.context)
    output = cut.text(r.output, "output", cut.output_chars)
    trajectory = cut.trajectory(r.trajectory)
    partial = _partial(r.partial, cut) if r.partial is not None else None
    return {
        "id": r.id,
        "name": r.title,
        "file": r.file,
        "line": r.line,
        "labels": list(r.labels),
        "repeat": r.repeat,
        "status": r.status,
        "score": r.score,
        "error": r.error,
        "cause": r.cause,
        "skip_reason": r.skip_reason,
        "run_id": r.run_id,
        "prompt": prompt,
        "context": context,
        "output": output,
        "trajectory": trajectory,
        "turns": [
            {
                "number": t.number,
                "user": cut.text(t.user, f"turns[{i}].user"),
                "output": cut.text(t.output, f"turns[{i}].output", cut.output_chars),
                "token_usage": t.token_usage.model_dump(exclude_none=True),
                "duration_ms": round(t.duration_ms, 3),
                "steps": len(t.trajectory),
            }
            for i, t in enumerate(r.turns)
        ],
        "ended": r.ended.model_dump() if r.ended is not None else None,
        "partial": partial,
        "truncated": cut.truncated,
        "ledger_cell": r.ledger_cell,
        "agent": r.agent,
        "replayed": r.replayed,
        "quarantined": r.quarantined,
        "duration_ms": round(r.duration_ms, 3),
        "content_hash": r.content_hash,
        "trace_id": r.trace_id,
        "attempts": [a.model_dump() for a in r.attempts],
        "stdout": r.stdout,
        "stderr": r.stderr,
        # The body's own signals; the derived metrics' signals are added when the report is
        # written (with_metric_signals): held here too they were most of an entry's memory.
        "signals": [
            {
                "kind": s.kind,
                "role": s.role,
                "name": s.name,
                "passed": s.passed,
                "score": s.score,
                "weight": s.weight,
                "evidence": s.evidence,
                "reasoning": s.reasoning,
                "error": s.error,
                "location": s.location,
            }
            for s in r.signals
        ],
        "metrics": r.metrics,
        "insights": r.insights,
        "case": r.case,
        "mcp_calls": list(r.mcp_calls),
    }


def _partial(partial: partial_mod.Partial, cut: bounds.Bounded) -> dict[str, Any]:
    """A timed-out call's :class:`PartialEntry`, its text and steps cut like an answer's."""
    return {
        "source": partial.source,
        "bytes": partial.bytes,
        "text": cut.text(partial.text, "partial.text", cut.output_chars),
        "truncated": partial.truncated,
        "events": partial.events,
        "trajectory": cut.trajectory(partial.trajectory, "partial.trajectory"),
    }


def with_metric_signals(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` as the JSON report writes it: its ``signals`` followed by each derived
    metric of ``metrics`` as an observe-role signal (:func:`metrics.metric_signals`), unless
    the entry holds them already (one read back from a file). The entry is not changed."""
    values = entry.get("metrics") or {}
    signals = entry["signals"]
    held = {s["name"] for s in signals if s["kind"] == "metric"}
    derived = [
        {
            "kind": "metric",
            "role": "observe",
            "name": key,
            "passed": None,
            "score": None,
            "weight": 1.0,
            "evidence": {"value": values[key]},
            "reasoning": None,
            "error": None,
            "location": None,
        }
        for key in metrics.METRIC_KEYS
        if key in values and key not in held
    ]
    return {**entry, "signals": [*signals, *derived]} if derived else entry


def received(partial: dict[str, Any]) -> str:
    """How every reporter heads what a timed-out agent had sent (a report entry's
    ``partial``): ``before the timeout the agent had sent 312 bytes of its answer``. Names
    the tool calls an AG-UI agent had made, as sent: show it as outside text."""
    size = partial.get("bytes") or 0
    kept = " (the first 64 KiB kept)" if partial.get("truncated") else ""
    if partial.get("source") == "stdout":
        return f"before the timeout the command had printed {size:,} bytes on stdout{kept}"
    if partial.get("source") == "events":
        calls = [
            s.get("tool_name") or "?"
            for s in partial.get("trajectory") or []
            if s.get("type") == "tool_call"
        ]
        tools = f"; tool calls: {', '.join(calls)}" if calls else "; no tool calls"
        return (
            f"before the timeout the agent had sent {partial.get('events') or 0:,} AG-UI "
            f"events, {size:,} bytes{tools}{kept}"
        )
    if not size:
        return "before the timeout the agent had sent nothing"
    return f"before the timeout the agent had sent {size:,} bytes of its answer{kept}"


def repeat_label(repeat: int, repeats: int) -> str:
    """How every reporter names a repeat: ``[2/3]`` (1-based), nothing when there is one."""
    return f"[{repeat + 1}/{repeats}]" if repeats > 1 else ""


def check(entry: dict[str, Any]) -> dict[str, Any]:
    """A saved entry validated and completed with defaults (raises ``ValidationError``)."""
    checked = TestEntry.model_validate(entry)
    try:
        return checked.model_dump(mode="json")
    except ValueError:  # a lone surrogate in a key (an agent's JSON): refused in JSON mode
        done: dict[str, Any] = plain(checked.model_dump())
        return done


def plain(value: Any) -> Any:
    """``value`` in JSON's types, for what pydantic cannot write: a lone surrogate (an agent's
    JSON may hold ``"\\ud800"``, which has no UTF-8) is kept as it is; a NaN becomes ``None``,
    as pydantic writes it."""
    text = json.dumps(value, default=pydantic_core.to_jsonable_python)
    return json.loads(text, parse_constant=lambda _: None)
