"""Span and log records every trace source returns, and the ``TraceSource`` seam.

Spans follow the OpenTelemetry GenAI semantic conventions: an ``invoke_agent`` span for the
whole run, a ``chat`` span per LLM call (``gen_ai.usage.input_tokens`` /
``gen_ai.usage.output_tokens``, ``gen_ai.request.model``) and an ``execute_tool`` span per
tool call (``gen_ai.tool.name``). Sources that know less (the agent's own trajectory, the
gateway's exchanges) produce the same shape, so one set of questions works on all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent_health.traces import traceparent as traceparent_mod

INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
OPERATION = "gen_ai.operation.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"

RUN_ID_ATTRIBUTE = "agent_health.run_id"
"""The span attribute naming the agent-health run (``traces.opensearch.run_id_attribute``)."""

INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
# Operation names that are one call to a model (GenAI semantic conventions).
LLM_OPERATIONS = frozenset({CHAT, "text_completion", "generate_content"})

SpanStatus = Literal["ok", "error", "unset"]


@dataclass(frozen=True, slots=True)
class Span:
    """One span of this run's trace. Times are epoch milliseconds."""

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None = None
    start_ms: float | None = None
    end_ms: float | None = None
    status: SpanStatus = "unset"
    attributes: Mapping[str, Any] = field(default_factory=dict)
    service: str | None = None
    elapsed_ms: float | None = None  # when only a duration is known, not the clock times

    @property
    def operation(self) -> str:
        """``invoke_agent``, ``chat``, ``execute_tool``, ... (attribute, else the name's head)."""
        op = self.attributes.get(OPERATION)
        if isinstance(op, str) and op:
            return op
        return self.name.split(" ", 1)[0]

    @property
    def is_llm_call(self) -> bool:
        return self.operation in LLM_OPERATIONS

    @property
    def is_tool_call(self) -> bool:
        return self.operation == EXECUTE_TOOL

    @property
    def tool_name(self) -> str | None:
        name = self.attributes.get(TOOL_NAME)
        if isinstance(name, str) and name:
            return name
        if self.is_tool_call and " " in self.name:
            return self.name.split(" ", 1)[1]
        return None

    @property
    def model(self) -> str | None:
        for key in (RESPONSE_MODEL, REQUEST_MODEL):
            value = self.attributes.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    @property
    def input_tokens(self) -> int | None:
        return _int(self.attributes.get(INPUT_TOKENS))

    @property
    def output_tokens(self) -> int | None:
        return _int(self.attributes.get(OUTPUT_TOKENS))

    @property
    def has_usage(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None

    @property
    def duration_ms(self) -> float | None:
        if self.start_ms is None or self.end_ms is None:
            return self.elapsed_ms
        return self.end_ms - self.start_ms

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form (for judges' trace tools and reports)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "operation": self.operation,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "service": self.service,
            "attributes": dict(self.attributes),
        }


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One log line correlated with this run. ``time_ms`` is epoch milliseconds."""

    body: str
    time_ms: float | None = None
    severity: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_ms": self.time_ms,
            "severity": self.severity,
            "body": self.body,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "attributes": dict(self.attributes),
        }


class TraceSource(Protocol):
    """Where the spans and logs of one run come from.

    ``spans`` may wait a bounded time for spans to land, then raises
    :class:`~agent_health.traces.errors.TracesNotFound`; it never returns a silent empty
    trace for a run that should have one.
    """

    name: str

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[Span]: ...

    async def logs(self, run_id: str, traceparent: str | None = None) -> Sequence[LogRecord]: ...


def belongs(
    trace_id: str | None,
    attributes: Mapping[str, Any],
    *,
    run_id: str,
    traceparent: str | None,
    run_id_attribute: str,
) -> bool:
    """Whether a span or log record a backend returned is this run's.

    A record that carries the run id attribute belongs when it names this run (a record of
    another run in the same trace, e.g. an agent that reused a trace id, does not); one
    without it belongs when it is in this run's trace (the ``traceparent`` it was sent).
    Anything else is another run's: a backend that over-returns must not add its tokens.
    """
    named = attributes.get(run_id_attribute)
    if named is not None:
        return str(named) == run_id
    own = traceparent_mod.trace_id_of(traceparent)
    return own is not None and trace_id == own


def _int(value: Any) -> int | None:
    """A token count as a backend stored it (a number, or digits as text), or ``None`` when it
    is not one: a negative, fractional, non-finite or absurd value counts no tokens."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str) and not (value.isascii() and value.isdigit() and len(value) <= 19):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None  # also NaN and the infinities
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return count if 0 <= count < 2**63 else None
