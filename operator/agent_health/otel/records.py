"""A span as agent-health builds it (:class:`SpanRecord`): ids as integers, times in
nanoseconds since the epoch, attributes of the types OpenTelemetry takes.

Plain data, no OpenTelemetry: :mod:`.spans` makes them, :mod:`.encode` writes them as OTLP.
Also the few helpers every span builder uses: new ids, nanosecond times, text cut to
:data:`MAX_TEXT`, token usage as attributes.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from agent_health.connectors.protocol import TokenUsage
from agent_health.otel import conventions as cv

Kind = Literal["internal", "client"]
AttributeValue = str | bool | int | float | tuple[str, ...]
Attributes = dict[str, AttributeValue]
MAX_TEXT = 4096  # an explanation or a tool payload longer than this is cut (and says so)


@dataclass(frozen=True)
class Event:
    name: str
    at_ns: int
    attributes: Attributes


@dataclass(frozen=True)
class Link:
    trace_id: int
    span_id: int
    attributes: Attributes


@dataclass
class SpanRecord:
    """One finished span, ready to be encoded: ids, parent, window, attributes, events."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    kind: Kind = "internal"
    attributes: Attributes = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    error: str | None = None
    ok: bool = False


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


def cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "… (cut)"


def as_json(value: Any) -> str:
    if isinstance(value, str):
        return cut(value)
    try:
        return cut(json.dumps(value, default=str, ensure_ascii=False, sort_keys=True))
    except (TypeError, ValueError):
        return cut(repr(value))


def add_usage(attributes: dict[str, AttributeValue], usage: TokenUsage | None) -> None:
    if usage is None:
        return
    if usage.prompt is not None:
        attributes[cv.INPUT_TOKENS] = usage.prompt
    if usage.completion is not None:
        attributes[cv.OUTPUT_TOKENS] = usage.completion


def new_trace_id() -> int:
    return int.from_bytes(secrets.token_bytes(16), "big") or 1


def new_span_id() -> int:
    return int.from_bytes(secrets.token_bytes(8), "big") or 1
