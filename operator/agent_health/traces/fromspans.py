"""What a run's received spans say in place of what the agent left out of its reply.

An agent that reports its steps only as OpenTelemetry spans (no ``trajectory``, no
``token_usage`` in its reply) still gets its trajectory matchers (``to_have_called_tool``,
``to_have_called_tools_in_order``, ``to_have_no_tool_errors``) and derived metrics: when its
spans reached agent-health's OTLP receiver before it answered, :func:`fill` reads them into
the reply's missing parts, in start order:

* a model-call span (``chat``, GenAI semantic conventions) is an ``assistant`` step;
* an ``execute_tool`` span is a ``tool_call`` step (``gen_ai.tool.name``; its arguments from
  ``gen_ai.tool.call.arguments`` when that is a JSON object) and its ``tool_result`` (status
  from the span's, latency its duration, output ``gen_ai.tool.call.result`` or, for an
  error, the span's status message);
* token usage is the sum over model-call spans of ``gen_ai.usage.input_tokens`` /
  ``output_tokens`` (else the ``invoke_agent`` span's).

Every step made so carries ``source: "otel"`` and its ``span_id``, so the run's record says
where it came from. What the agent did report is never replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_health.connectors import wire
from agent_health.connectors.protocol import AgentReply, Step, TokenUsage
from agent_health.traces import records

ARGUMENTS = "gen_ai.tool.call.arguments"
RESULT = "gen_ai.tool.call.result"
CALL_ID = "gen_ai.tool.call.id"
STATUS_MESSAGE = "otel.status_description"
"""The span's status message (:func:`agent_health.traces.received.to_span` puts it here)."""


def steps(spans: Sequence[records.Span]) -> list[Step]:
    """The trajectory the spans describe (model turns and tool calls, in start order)."""
    ordered = sorted(spans, key=lambda s: (s.start_ms is None, s.start_ms or 0.0))
    out: list[dict[str, Any]] = []
    for span in ordered:
        mark: dict[str, Any] = {"source": "otel", "span_id": span.span_id}
        latency = round(span.duration_ms, 3) if span.duration_ms is not None else None
        if span.is_llm_call:
            out.append({"type": "assistant", "latency_ms": latency, **mark})
        elif span.is_tool_call:
            name = span.tool_name or "?"
            call_id = span.attributes.get(CALL_ID)
            if call_id:
                mark["tool_call_id"] = str(call_id)
            out.append({"type": "tool_call", "tool_name": name, "tool_args": _args(span), **mark})
            failed = span.status == "error"
            output = span.attributes.get(RESULT)
            if failed and output is None:
                why = span.attributes.get(STATUS_MESSAGE) or span.attributes.get("error.type")
                output = {"error": why or f"{name} failed"}
            out.append(
                {
                    "type": "tool_result",
                    "tool_name": name,
                    "tool_output": _json(output),
                    "status": "error" if failed else "ok",
                    "latency_ms": latency,
                    **mark,
                }
            )
    return [Step.model_validate(step) for step in out]


def usage(spans: Sequence[records.Span]) -> TokenUsage:
    """Token usage of the model calls (never both those and the agent span: no double count)."""
    used = [s for s in spans if s.is_llm_call and s.has_usage]
    if not used:
        ids = {s.span_id for s in spans}
        used = [
            s
            for s in spans
            if s.operation == records.INVOKE_AGENT and s.parent_span_id not in ids and s.has_usage
        ]
    if not used:
        return TokenUsage()
    prompt = sum(s.input_tokens or 0 for s in used)
    completion = sum(s.output_tokens or 0 for s in used)
    return TokenUsage(prompt=prompt, completion=completion, total=prompt + completion)


def fill(reply: AgentReply, spans: Sequence[records.Span]) -> AgentReply:
    """``reply`` with what it left unreported read from ``spans`` (unchanged if none)."""
    missing = reply.unreported
    if not spans or not missing:
        return reply
    update: dict[str, Any] = {}
    if "trajectory" in missing:
        found = steps(spans)
        if found:
            update["trajectory"] = tuple(found)
    if "token_usage" in missing:
        counted = usage(spans)
        if counted.reported:
            update["token_usage"] = counted
    if not update:
        return reply
    # The updated fields join model_fields_set: a filled trajectory counts as reported.
    return reply.model_copy(update=update)


def _args(span: records.Span) -> dict[str, Any] | None:
    raw = span.attributes.get(ARGUMENTS)
    if isinstance(raw, str):
        try:
            raw = wire.parse_json(raw)
        except ValueError:
            return {"arguments": raw}
    return dict(raw) if isinstance(raw, dict) else None


def _json(value: Any) -> Any:
    """A JSON text attribute as the data it holds; read as a reply is (no ``NaN``, no
    overflow, bounded nesting), else kept as the text it is."""
    if isinstance(value, str):
        try:
            return wire.parse_json(value)
        except ValueError:
            return value
    return value
