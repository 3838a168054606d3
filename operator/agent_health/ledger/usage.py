"""Token usage read from a model API response body, as the gateway sees it on the wire.

Understands the two common shapes, whole or streamed as server-sent events:

* OpenAI chat completions: ``usage.prompt_tokens`` / ``usage.completion_tokens``
  (streams carry it in the final chunk when ``stream_options.include_usage`` is set);
* Anthropic messages and OpenAI responses: ``usage.input_tokens`` / ``usage.output_tokens``
  (Anthropic streams split it over ``message_start`` and ``message_delta``; OpenAI response
  streams carry it in ``response.completed``).

Anything else yields ``None``: a body without usage is normal, not an error.

:class:`Reader` reads a body as it streams past, in bounded memory (the gateway's way);
:func:`parse` reads one that is already whole.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health.ledger import usagescan

_INPUT_KEYS = ("prompt_tokens", "input_tokens")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens")
_PIECE = 64 * 1024  # decoded bytes produced per step: a gzip bomb inflates a piece at a time
_FIELD_END = re.compile(rb"[:\n]")
_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}  # zlib's names for the two formats
_MAX_FIELD = 16  # longest event-stream field name kept ("data" is the one read)


class TokenUsage(BaseModel):
    """Tokens one model call used, as reported by the model API."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    model: str | None = None


def parse(body: bytes | str, content_type: str | None = None) -> TokenUsage | None:
    """Token usage of a completion response body, or ``None`` when it reports none.

    >>> parse(b'{"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}')
    TokenUsage(input_tokens=3, output_tokens=4, total_tokens=7, model='m')
    """
    reader = Reader(content_type)
    reader.feed(body.encode("utf-8") if isinstance(body, str) else body)
    return reader.result()


class Reader:
    """Token usage of a response read chunk by chunk, as the gateway streams it through.

    It holds no body: chunks are decoded (gzip and deflate undone piece by piece) and scanned
    (:class:`.usagescan.Scanner`), so its memory stays bounded however large the response.
    ``limit`` caps the *decoded* bytes read: past it — a gzip bomb, or a response larger than
    any usage report needs — reading stops and :meth:`result` is ``None``, with the reason in
    :attr:`unread`. An encoding the standard library cannot undo (``br``, ``zstd``) gives
    ``None`` too.

    >>> r = Reader("application/json")
    >>> r.feed(b'{"usage": {"input_tokens": 2,')
    >>> r.feed(b' "output_tokens": 5}}')
    >>> r.result()
    TokenUsage(input_tokens=2, output_tokens=5, total_tokens=7, model=None)
    """

    def __init__(
        self,
        content_type: str | None = None,
        content_encoding: str | None = None,
        *,
        limit: int | None = None,
    ) -> None:
        self.limit = limit
        self.decoded = 0
        self.unread: str | None = None
        """Why usage was not read (over the limit, an unknown encoding); ``None`` if it was."""
        encoding = (content_encoding or "identity").strip().lower()
        self._wbits = _WBITS.get(encoding, 0)
        self._inflate = zlib.decompressobj(self._wbits) if self._wbits else None
        if self._inflate is None and encoding not in ("identity", ""):
            self.unread = f"content encoding {content_encoding!r} is not read for usage"
        self._stream = bool(content_type and "text/event-stream" in content_type.lower())
        self._sniffed = self._stream
        self._documents: list[dict[str, Any]] = []
        self._scanner: usagescan.Scanner | None = None
        self._events = _Events(self._documents)

    def feed(self, chunk: bytes) -> None:
        """Read the next chunk of the response body, as it came off the wire."""
        if self.unread is not None or not chunk:
            return
        if self._inflate is None:
            self._decoded(chunk)
            return
        data = chunk
        while data and self.unread is None:
            try:
                piece = self._inflate.decompress(data, _PIECE)
            except zlib.error as err:
                self.unread = f"the body does not decompress: {err}"
                return
            self._decoded(piece)
            if self._inflate.eof:  # a gzip body may be several members, one after another
                data, self._inflate = self._inflate.unused_data, zlib.decompressobj(self._wbits)
            else:
                data = self._inflate.unconsumed_tail

    def result(self) -> TokenUsage | None:
        """The usage the whole response reported, or ``None``."""
        if self.unread is not None:
            return None
        if self._stream:
            self._events.end()
        elif self._scanner is not None:
            document = self._scanner.document()
            if document is not None:
                self._documents.append(document)
        return merge(iter(self._documents))

    def _decoded(self, data: bytes) -> None:
        if not data:
            return
        self.decoded += len(data)
        if self.limit is not None and self.decoded > self.limit:
            self.unread = (
                f"more than {self.limit} decoded bytes (the gateway's --usage-max-bytes); "
                "usage not read"
            )
            return
        if not self._sniffed:
            head = data.lstrip()
            if not head:
                return
            # A body that does not open a JSON object is read as an event stream: it finds
            # data: lines if there are any, and nothing otherwise.
            self._stream, self._sniffed = head[:1] != b"{", True
        if self._stream:
            self._events.feed(data)
        else:
            if self._scanner is None:
                self._scanner = usagescan.Scanner()
            self._scanner.feed(data)


class _Events:
    """Server-sent events read line by line; the JSON of each event's ``data`` is scanned."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._documents = documents
        self._field = bytearray()  # the current line's field name, while it is read
        self._in_field = True  # at the start of a line, reading its field name
        self._in_data = False  # in the value of a data: line
        self._skip_space = False  # the value's first space is not part of it
        self._data_lines = 0
        self._scanner = usagescan.Scanner()

    def feed(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._in_data:
                newline = data.find(b"\n", i)
                end = n if newline < 0 else newline
                if self._skip_space and i < end:
                    self._skip_space = False
                    i += data[i] == 0x20
                self._scanner.feed(data[i:end])
                if newline < 0:
                    return
                self._in_data, self._in_field, i = False, True, newline + 1
            elif self._in_field:
                found = _FIELD_END.search(data, i)
                end = n if found is None else found.start()
                if len(self._field) < _MAX_FIELD:
                    self._field += data[i : min(end, i + _MAX_FIELD)]
                if found is None:
                    return
                i = self._line_field(data[end]) + end
            else:  # a line that is not data: skip to its end
                newline = data.find(b"\n", i)
                if newline < 0:
                    return
                self._in_field, i = True, newline + 1

    def _line_field(self, stop: int) -> int:
        """The field name ended at ``stop`` (a colon or a newline); how far to step."""
        name, self._field = bytes(self._field).rstrip(b"\r"), bytearray()
        self._in_field = False
        if stop == 0x0A:  # a line without a colon
            self._in_field = True
            if not name:
                self.end()  # a blank line ends the event
            return 1
        if name == b"data":
            if self._data_lines:
                self._scanner.feed(b"\n")
            self._data_lines += 1
            self._in_data, self._skip_space = True, True
        return 1

    def end(self) -> None:
        """The event is complete: keep what its data held."""
        if self._data_lines:
            document = self._scanner.document()
            if document is not None:
                self._documents.append(document)
            self._scanner = usagescan.Scanner()
        self._data_lines = 0


def merge(payloads: Iterator[Any]) -> TokenUsage | None:
    """Fold usage over payloads: later values win, as streams report running totals."""
    found = False
    tokens = {"input": 0, "output": 0, "total": 0}
    model: str | None = None
    for payload in payloads:
        for holder in _holders(payload):
            if isinstance(holder.get("model"), str):
                model = holder["model"]
            usage = holder.get("usage")
            if not isinstance(usage, dict):
                continue
            for field, keys in (("input", _INPUT_KEYS), ("output", _OUTPUT_KEYS)):
                value = _first_int(usage, keys)
                if value is not None:
                    tokens[field] = value
                    found = True
            total = _first_int(usage, ("total_tokens",))
            if total is not None:
                tokens["total"] = total
    if not found:
        return None
    return TokenUsage(
        input_tokens=tokens["input"],
        output_tokens=tokens["output"],
        total_tokens=tokens["total"] or tokens["input"] + tokens["output"],
        model=model,
    )


def _holders(payload: Any) -> Iterator[dict[str, Any]]:
    """The objects that may carry ``usage``: the payload, Anthropic's ``message``
    (``message_start``) and OpenAI responses' ``response`` (``response.completed``)."""
    if not isinstance(payload, dict):
        return
    yield payload
    for key in ("message", "response"):
        inner = payload.get(key)
        if isinstance(inner, dict):
            yield inner


def _first_int(usage: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
