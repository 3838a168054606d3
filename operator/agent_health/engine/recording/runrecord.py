"""The records a controller makes of what it saw: the run-result (what ``agent.run()``
returned, whole, within caps); locally, each exchange with the agent is the ledger's own
``exchange`` record of what the connector saw (``ledger.objects.exchange``).

:mod:`.recording` writes both into each local cell, the cell controller the run-result into
a cluster's (:mod:`.cell`); ``agent-health run --replay`` (:mod:`.replay`) answers
``agent.run()`` from the run-result.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic_core import to_jsonable_python

from agent_health.engine import reports
from agent_health.ledger import objects
from agent_health.sdk.results import RunResult, Signal

# The recording's caps (a report's are far lower, engine.reports.bounds): large enough for any
# answer a test would assert on, small enough that a runaway agent cannot fill the ledger.
RECORD_OUTPUT_CHARS = 1_000_000
RECORD_FIELD_CHARS = 256_000  # the prompt, each context value, each step's content/args/result
RECORD_STEPS = 10_000
RECORD_RAW_CHARS = 64_000  # the reply's fields beyond the protocol's, as JSON
PRICING = ("model", "usage_by_model")
"""The raw fields a grade's cost is computed from, kept when the rest of raw is cut."""


def run_record(run: RunResult, at: str) -> objects.Object:
    """The run-result record of what ``agent.run()`` returned, as JSON (``at``: its time, see
    :func:`objects.stamp`): the whole RunResult, each field cut to the recording's caps, the
    cut ones named in ``truncated`` (``--replay`` refuses a cut record: it is not the whole
    answer)."""
    cut = reports.Bounded(RECORD_FIELD_CHARS, RECORD_OUTPUT_CHARS, RECORD_STEPS)
    prompt = cut.text(run.prompt, "prompt")
    context = [
        {**item.model_dump(), "value": cut.text(item.value, f"context[{i}].value") or ""}
        for i, item in enumerate(run.context)
    ]
    output = cut.text(run.output, "output", RECORD_OUTPUT_CHARS) or ""
    steps = []
    made = run.trajectory_steps  # the tuple itself: run.trajectory makes a Trajectory each time
    for i, step in enumerate(made[:RECORD_STEPS]):
        entry = step.model_dump(mode="json")
        for key in ("content", "tool_args", "tool_output"):
            if entry.get(key) is not None:
                entry[key] = cut.value(entry[key], f"trajectory[{i}].{key}")
        steps.append(entry)
    if len(made) > RECORD_STEPS:
        cut.truncated.append(f"trajectory[{RECORD_STEPS}:]")
    # JSON data as the record's model would dump it (a custom connector may put any value
    # in an answer's extra fields), without NaN.
    raw: dict[str, Any] | None = plain(to_jsonable_python(run.raw)) if run.raw else None
    if raw is not None and len(json.dumps(raw, default=str)) > RECORD_RAW_CHARS:
        # What prices the run outlives the cut (an AG-UI reply's raw holds every event).
        kept = {key: raw[key] for key in PRICING if key in raw}
        raw = kept if kept and len(json.dumps(kept, default=str)) <= RECORD_RAW_CHARS else None
        cut.truncated.append("raw")
    turns = turn_records(run, cut)
    return objects.run_result(
        at=at,
        run_id=run.run_id,
        prompt=prompt,
        context=context,
        output=output,
        trajectory=steps,
        token_usage=run.token_usage.model_dump(exclude_none=True),
        duration_ms=max(0.0, run.duration_ms),
        unreported=sorted(run.unreported) or None,
        raw=raw,
        truncated=cut.truncated or None,
        turns=turns,
        ended=run.ended.model_dump() if run.ended is not None else None,
    )


def turn_records(run: RunResult, cut: reports.Bounded) -> list[objects.Object] | None:
    """A conversation's turns as the run-result keeps them (their steps are the trajectory's,
    marked with the turn: not written twice); ``None`` for a single run."""
    if not run.conversation:
        return None
    return [
        {
            "number": turn.number,
            "user": cut.text(turn.user, f"turns[{i}].user") or "",
            "output": cut.text(turn.output, f"turns[{i}].output", RECORD_OUTPUT_CHARS) or "",
            "token_usage": turn.token_usage.model_dump(exclude_none=True),
            "duration_ms": max(0.0, turn.duration_ms),
            "unreported": sorted(turn.unreported),
        }
        for i, turn in enumerate(run.conversation)
    ]


def signal_data(signal: Signal) -> dict[str, Any]:
    """A signal as its record holds it: :func:`plain` of its JSON dump, without walking
    every value of it (each signal of every test). pydantic's JSON mode already writes
    NaN and the infinities as ``None`` inside what an ``Any`` field holds (``evidence``);
    only a float field's own value (``score``, ``weight``) is written as it is, so only the
    dump's top level is looked at (held to :func:`plain` by
    ``tests/engine/test_engine_recording.py``)."""
    data: dict[str, Any] = signal.model_dump(mode="json")
    for key, value in data.items():
        if value.__class__ is float and not math.isfinite(value):
            data[key] = None
    return data


def plain(value: Any) -> Any:
    """JSON data without NaN/inf, which canonical ledger JSON cannot hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


stamp = objects.stamp_epoch
"""An epoch time as a record's time (:func:`objects.stamp`)."""
