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
from typing import NamedTuple


class Event(NamedTuple):
    """One dispatched event (a tuple: one is made per event of every AG-UI call)."""

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
        if "\r" in text:
            self._after_cr = text.endswith("\r")
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        else:
            self._after_cr = False
        lines = (self._pending + text).split("\n") if self._pending else text.split("\n")
        self._pending = lines.pop()
        events: list[Event] = []
        data = self._data
        # One loop over the chunk's lines with the common cases inline (a ``data:`` line, the
        # blank line that dispatches): a method call per line cost more than the parsing.
        for line in lines:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            elif not line:
                if data:
                    events.append(
                        Event("\n".join(data), self._event or "message", self._id, self._retry)
                    )
                    data = self._data = []
                self._event = ""
            elif not line.startswith(":"):  # a comment is skipped
                self._field(line)
        return events

    def _field(self, line: str) -> None:
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
