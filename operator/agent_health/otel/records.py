"""A span as agent-health records it (:class:`SpanRecord`), and the JSON line that carries
spans to the exporter process (:mod:`.sidecar`): ids as hex, times in nanoseconds.

Plain data: no OpenTelemetry, nothing of the SDK's models, so both sides of the pipe can
read it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

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


def encode(records: Sequence[SpanRecord]) -> bytes:
    """One JSON line holding ``records``."""
    data = [
        {
            "n": r.name,
            "t": f"{r.trace_id:032x}",
            "s": f"{r.span_id:016x}",
            "p": f"{r.parent_id:016x}" if r.parent_id is not None else None,
            "b": r.start_ns,
            "e": r.end_ns,
            "k": r.kind,
            "a": r.attributes,
            "v": [[e.name, e.at_ns, e.attributes] for e in r.events],
            "l": [[f"{x.trace_id:032x}", f"{x.span_id:016x}", x.attributes] for x in r.links],
            "x": r.error,
            "o": r.ok,
        }
        for r in records
    ]
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def _attributes(value: Any) -> Attributes:
    # JSON has no tuples: an array attribute comes back a list, and OTel wants a sequence.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}


def decode(line: bytes) -> list[SpanRecord]:
    """The records of one line :func:`encode` wrote."""
    return [
        SpanRecord(
            name=d["n"],
            trace_id=int(d["t"], 16),
            span_id=int(d["s"], 16),
            parent_id=int(d["p"], 16) if d["p"] is not None else None,
            start_ns=d["b"],
            end_ns=d["e"],
            kind=cast(Kind, d["k"]),
            attributes=_attributes(d["a"]),
            events=[Event(n, at, _attributes(a)) for n, at, a in d["v"]],
            links=[Link(int(t, 16), int(s, 16), _attributes(a)) for t, s, a in d["l"]],
            error=d["x"],
            ok=d["o"],
        )
        for d in json.loads(line)
    ]
