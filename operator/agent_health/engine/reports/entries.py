"""One test's entry in the JSON report: what it is, what it did, how it was judged.

:func:`from_result` makes one from a :class:`TestResult`, in the documented shape of
``tests[]`` (:class:`.entryshape.TestEntry`), cutting long fields to their caps
(:mod:`.bounds`). Entries are kept as plain dicts in the report: readers index them by key,
and a saved report of either version is checked with :mod:`.entryshape` when it is read
back or written (a run that writes no report never makes the shape's classes).
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core

from agent_health.connectors import partial as partial_mod
from agent_health.engine.reports import bounds
from agent_health.sdk.results import TestResult
from agent_health.traces import metrics


def from_result(r: TestResult) -> dict[str, Any]:
    """The report entry of one result (a plain dict, in :class:`.entryshape.TestEntry`'s
    field order)."""
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
    """A timed-out call's :class:`.entryshape.PartialEntry`, its text and steps cut like an
    answer's."""
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


def plain(value: Any) -> Any:
    """``value`` in JSON's types, for what pydantic cannot write: a lone surrogate (an agent's
    JSON may hold ``"\\ud800"``, which has no UTF-8) is kept as it is; a NaN becomes ``None``,
    as pydantic writes it."""
    text = json.dumps(value, default=pydantic_core.to_jsonable_python)
    return json.loads(text, parse_constant=lambda _: None)
