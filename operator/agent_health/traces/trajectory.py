"""A trace source over the RunResult's own trajectory: always there, no waiting.

The agent's steps become span-like records: one ``invoke_agent`` root span for the run
(carrying the token usage the agent reported), one ``chat`` span per model turn and one
``execute_tool`` span per tool call, linked to its result (status, latency, output).
Thinking and assistant text, and tool errors, become log records.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Sequence
from typing import Any

from agent_health.sdk.results import RunResult
from agent_health.traces import metrics, records
from agent_health.traces import traceparent as traceparent_mod


class TrajectorySource:
    """Spans made from what the agent itself returned."""

    name = "trajectory"

    def __init__(self, result: RunResult) -> None:
        self._result = result
        self.steps_known = result.trajectory_reported

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[records.Span]:
        self._check(run_id)
        return to_spans(self._result)

    async def logs(
        self, run_id: str, traceparent: str | None = None
    ) -> Sequence[records.LogRecord]:
        self._check(run_id)
        return to_logs(self._result)

    def _check(self, run_id: str) -> None:
        if run_id != self._result.run_id:
            raise ValueError(f"this source holds run {self._result.run_id}, not {run_id}")


def to_spans(result: RunResult) -> list[records.Span]:
    """The trajectory as spans (see the module docstring)."""
    trace_id = traceparent_mod.trace_id_of(result.traceparent) or _trace_id(result.run_id)
    root_id = _span_id(result.run_id, -1)
    root_attrs: dict[str, Any] = {records.OPERATION: records.INVOKE_AGENT}
    usage = result.token_usage
    if usage.prompt is not None:
        root_attrs[records.INPUT_TOKENS] = usage.prompt
    if usage.completion is not None:
        root_attrs[records.OUTPUT_TOKENS] = usage.completion
    model = metrics.model_of(result)
    if model:
        root_attrs[records.REQUEST_MODEL] = model
    steps = result.trajectory_steps
    spans = [
        records.Span(
            trace_id=trace_id,
            span_id=root_id,
            name=records.INVOKE_AGENT,
            parent_span_id=traceparent_mod.span_id_of(result.traceparent),
            status="ok",
            attributes=root_attrs,
            elapsed_ms=result.duration_ms,
        )
    ]
    open_calls: dict[str, deque[int]] = {}
    turn: int | None = None
    for i, step in enumerate(steps):
        if step.type in metrics.MODEL_STEPS:
            if turn is None:
                turn = len(spans)
                spans.append(
                    records.Span(
                        trace_id=trace_id,
                        span_id=_span_id(result.run_id, i),
                        name=records.CHAT,
                        parent_span_id=root_id,
                        status="ok",
                        attributes={records.OPERATION: records.CHAT, "agent_health.step": i},
                    )
                )
        else:
            turn = None
        if step.type == "tool_call":
            name = step.tool_name or "?"
            open_calls.setdefault(name, deque()).append(len(spans))
            spans.append(
                records.Span(
                    trace_id=trace_id,
                    span_id=_span_id(result.run_id, i),
                    name=f"{records.EXECUTE_TOOL} {name}",
                    parent_span_id=root_id,
                    attributes={
                        records.OPERATION: records.EXECUTE_TOOL,
                        records.TOOL_NAME: name,
                        "gen_ai.tool.call.arguments": json.dumps(step.tool_args or {}, default=str),
                        "agent_health.step": i,
                    },
                )
            )
        elif step.type == "tool_result":
            queue = open_calls.get(step.tool_name or "?")
            if queue:
                at = queue.popleft()
                call = spans[at]
                spans[at] = records.Span(
                    trace_id=call.trace_id,
                    span_id=call.span_id,
                    name=call.name,
                    parent_span_id=call.parent_span_id,
                    status="error" if step.failed else "ok",
                    attributes={**call.attributes, "agent_health.result_step": i},
                    elapsed_ms=step.latency_ms,
                )
    return spans


def to_logs(result: RunResult) -> list[records.LogRecord]:
    """Thinking and assistant text, and tool errors, in step order."""
    logs = []
    for i, step in enumerate(result.trajectory_steps):
        if step.type in ("thinking", "assistant") and step.content:
            logs.append(
                records.LogRecord(
                    body=step.content,
                    severity="INFO",
                    attributes={"agent_health.step": i, "agent_health.step_type": step.type},
                )
            )
        elif step.type == "tool_result" and step.failed:
            output = json.dumps(step.tool_output, default=str)[:500]
            logs.append(
                records.LogRecord(
                    body=f"tool {step.tool_name or '?'} failed: {output}",
                    severity="ERROR",
                    attributes={"agent_health.step": i, records.TOOL_NAME: step.tool_name},
                )
            )
    return logs


def _trace_id(run_id: str) -> str:
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]


def _span_id(run_id: str, index: int) -> str:
    return hashlib.sha256(f"{run_id}:{index}".encode()).hexdigest()[:16]
