"""A span as agent-health builds it (:class:`SpanRecord`): ids as integers, times in
nanoseconds since the epoch, attributes of the types OpenTelemetry takes.

Plain data, no OpenTelemetry: :mod:`.spans` makes them without the SDK, :mod:`.exporter` turns
them into the SDK's finished spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["internal", "client"]
AttributeValue = str | bool | int | float | tuple[str, ...]
Attributes = dict[str, AttributeValue]


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
    """One span, ready to be handed to the SDK: ids, parent, window, attributes, events."""

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
