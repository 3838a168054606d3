"""The event-stream decoder against the WHATWG rules, fed in every possible chunking."""

from __future__ import annotations

import pytest
from agent_health.connectors import sse


def decode(stream: bytes, size: int) -> list[sse.Event]:
    decoder = sse.Decoder()
    events: list[sse.Event] = []
    for start in range(0, len(stream), size):
        events += decoder.feed(stream[start : start + size])
    return events


STREAM = (
    "\ufeff: a comment\r\n"
    "data: one\r\n"
    "data:two\r"
    "\r"
    "event: custom\n"
    "id: 7\n"
    "retry: 1500\n"
    "data:  spaced\n"
    "\n"
    "id: bad\0id\n"
    "retry: 2s\n"
    "data: héllo ✓\n"
    "\n"
    "event: ignored-without-data\n"
    "\n"
    "data\n"
    "\n"
    "data: never dispatched, no blank line"
).encode()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 64, len(STREAM)])
def test_the_same_events_whatever_the_chunking(size: int) -> None:
    assert decode(STREAM, size) == [
        sse.Event(data="one\ntwo"),
        sse.Event(data=" spaced", event="custom", id="7", retry=1500),
        sse.Event(data="héllo ✓", id="7", retry=1500),  # id and retry persist
        sse.Event(data="", id="7", retry=1500),  # a field without a colon, value empty
    ]


def test_a_cr_at_a_chunk_end_and_its_lf_in_the_next_end_one_line() -> None:
    decoder = sse.Decoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [sse.Event(data="a")]
    assert decoder.feed(b"\ndata: b\n\n") == [sse.Event(data="b")]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_bad_utf8_reads_as_replacement_characters_in_any_chunking(size: int) -> None:
    stream = b"data: a\xffb \xe2\x9c\n\ndata: \xf0\x9f\x98\x80 \xc3\n\n"
    assert decode(stream, size) == [
        sse.Event(data="a\ufffdb \ufffd"),
        sse.Event(data="\U0001f600 \ufffd"),
    ]
