"""Server-sent events, decoded from body chunks as they arrive (the WHATWG event-stream rules).

The AG-UI connector reads its events through aiohttp (see :mod:`.wire` for why), and the
maintained SSE decoders are tied to another client (httpx-sse reads an ``httpx.Response``),
so the interpretation lives here: UTF-8, lines ended by CRLF, LF or CR (also across
chunks), ``:`` comments, ``field: value`` with one leading space dropped, ``data`` lines
joined by LF, an event dispatched at a blank line and only when it has data, ``id`` without
NUL, ``retry`` of digits only. A stream that ends without a blank line dispatches nothing
more, as the specification says.

>>> decoder = Decoder()
>>> [e.data for e in decoder.feed(b"data: one\\r\\n\\ndata: t")]
['one']
>>> [e.data for e in decoder.feed(b"wo\\n\\n")]
['two']
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class Decoder:
    """Feed body chunks in order with :meth:`feed`; each call returns the events completed."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # the start of a line whose end has not arrived
        self._after_cr = False  # the last chunk ended in CR: an LF first in the next is its pair
        self._data: list[str] = []
        self._event = ""
        self._id = ""
        self._retry: int | None = None
        self._first = True

    def feed(self, chunk: bytes) -> list[Event]:
        text = self._text.decode(chunk)
        if self._first and text:
            self._first = False
            text = text.removeprefix("\ufeff")  # a byte order mark is not part of the stream
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        lines = (self._pending + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._pending = lines.pop()
        events: list[Event] = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        data, self._data = self._data, []
        event, self._event = self._event, ""
        if not data:
            return None
        return Event(data="\n".join(data), event=event or "message", id=self._id, retry=self._retry)
