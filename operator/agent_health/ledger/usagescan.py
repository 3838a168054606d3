"""Find token usage in a JSON document read piece by piece, in bounded memory.

The gateway reads usage from responses it streams through; holding a response whole to
``json.loads`` it lets a target push the gateway past its memory limit (one gzip bomb, or many
large responses in flight at once). A :class:`Scanner` is fed the document in pieces of any
size and keeps only what can carry usage: the keys and small values of the objects that
:func:`.usage.merge` reads (the root, its ``message`` and ``response``, and their ``usage``),
and one byte per level of nesting. Everything else — long strings, arrays, other objects — is
skipped as it passes, so what one scanner holds is bounded by the constants below, whatever
the document's size.

Why not a streaming JSON library: ijson (yajl) keeps each token whole until it ends, so 200
documents each in the middle of a 1 MiB string held 189 MiB when measured here; a scanner that
only needs a dozen keys can drop what it does not need as it goes.

The scanner tracks structure (matching brackets, object keys, one root object, nothing after
it); it does not check every rule of JSON. A document that ends incomplete or malformed gives
no usage (:meth:`Scanner.document` is ``None``).

>>> s = Scanner()
>>> for piece in (b'{"model": "m", "choices": [{"text": "lo', b'ng"}], "usage": {"prom',
...               b'pt_tokens": 3}}'):
...     s.feed(piece)
>>> s.document()
{'model': 'm', 'usage': {'prompt_tokens': 3}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 512
"""Deeper nesting makes the document unreadable (no model response nests this deep)."""
MAX_KEY = 64
"""Longer keys are read as "no key we know" (every key we look for is short)."""
MAX_VALUE = 256
"""Longest string value kept (``model``); longer ones are cut."""
MAX_SCALAR = 32
"""Longest number kept; longer ones are not token counts."""
HOLDER_KEYS = frozenset({"message", "response"})
"""Objects under the root that may carry ``usage`` (Anthropic streams, OpenAI responses)."""
USAGE_KEY, MODEL_KEY = "usage", "model"

_WS = re.compile(rb"[ \t\r\n]*+")
_STRING_BODY = re.compile(rb'[^"\\]*+')
_SCALAR = re.compile(rb'[^ \t\r\n,:\[\]{}"]*+')
# Inside a part of the document nobody reads: everything up to the next bracket, complete
# strings included, in one pass of the regex engine (possessive, so it never backtracks).
_SKIP = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_INT = re.compile(rb"[0-9]+")
# A string without escapes or control characters is its own UTF-8 text: decoded directly,
# it is what json.loads gives, at a tenth of the cost (every key of a read object is one).
_PLAIN = re.compile(rb"[^\\\x00-\x1f]*+")
# A whole string of at most MAX_VALUE bytes with neither escapes nor control characters.
_SHORT_STRING = re.compile(rb'"([^"\\\x00-\x1f]{0,%d}+)"' % MAX_VALUE)
_SHORT_KEY = re.compile(rb'"([^"\\\x00-\x1f]{0,%d}+)"[ \t\r\n]*+:' % MAX_KEY)
# A number or literal of at most MAX_SCALAR bytes that ends before the piece does.
_SHORT_SCALAR = re.compile(rb'[^ \t\r\n,:\[\]{}"]{1,%d}+(?=[ \t\r\n,:\[\]{}"])' % MAX_SCALAR)
_CLOSER = {ord("{"): ord("}"), ord("["): ord("]")}

_ROOT, _HOLDER, _USAGE = 0, 1, 2


@dataclass
class _Frame:
    """An object whose keys are read: the root, a holder, or a ``usage`` object."""

    role: int
    kept: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    expect_key: bool = True


class Scanner:
    """One JSON document, fed in pieces; see the module docstring."""

    def __init__(self) -> None:
        self._brackets = bytearray()  # one byte per open bracket, innermost last
        self._frames: list[_Frame] = []  # the read objects, outermost first
        self._string: bytearray | None = None  # a string being kept (key or value)
        self._string_over = False
        self._in_string = False
        self._escape = False
        self._string_is_key = False
        self._scalar: bytearray | None = None
        self._scalar_over = False
        self._done: dict[str, Any] | None = None
        self.failed = False

    def document(self) -> dict[str, Any] | None:
        """What was kept of the document, once it ended well-formed; else ``None``."""
        if self._scalar is not None and not self.failed:
            self._end_scalar()
        if self.failed or self._in_string or self._brackets:
            return None
        return self._done

    def feed(self, data: bytes) -> None:
        """Read the next piece of the document."""
        i, n = 0, len(data)
        while i < n and not self.failed:
            if self._in_string:
                i = self._string_part(data, i)
            elif self._scalar is not None:
                end = _end(_SCALAR, data, i)
                if len(self._scalar) + end - i <= MAX_SCALAR:
                    self._scalar += data[i:end]
                else:
                    self._scalar_over = True
                i = end
                if i < n:
                    self._end_scalar()
            elif len(self._brackets) > len(self._frames):
                i = _end(_SKIP, data, i)
                if i < n:
                    i = self._token(data, i, skipping=True)
            else:
                i = self._token(data, i, skipping=False)

    def _token(self, data: bytes, i: int, *, skipping: bool) -> int:
        c = data[i]
        if c in b" \t\r\n":
            return _end(_WS, data, i)
        if self._done is not None:
            self.failed = True  # something after the root object
            return i
        if c == 0x22:  # "
            if not skipping and self._frames:
                frame = self._frames[-1]
                if frame.expect_key and (key := _SHORT_KEY.match(data, i)) is not None:
                    frame.key, frame.expect_key = _text(key.group(1)), False  # and its colon
                    return key.end()
                whole = _SHORT_STRING.match(data, i)
                if whole is not None:  # the common case, read in one step
                    self._short_string(whole.group(1))
                    return whole.end()
            self._begin_string(skipping)
            return i + 1
        if c in b"{[":
            self._open(c, skipping)
            return i + 1
        if c in b"}]":
            self._close(c)
            return i + 1
        if not self._brackets:
            self.failed = True  # the root is not an object: nothing to read
            return i
        if not skipping:
            frame = self._frames[-1]
            if c == 0x2C:  # ,
                frame.expect_key, frame.key = True, None
                return i + 1
            if c == 0x3A:  # :
                return i + 1
            whole = _SHORT_SCALAR.match(data, i)
            if whole is not None:  # it ends in this piece: read in one step
                raw = whole.group()
                if frame.role == _USAGE and frame.key is not None and _INT.fullmatch(raw):
                    frame.kept[frame.key] = int(raw)
                return whole.end()
        self._scalar, self._scalar_over = bytearray(), False
        return i

    # -- strings ---------------------------------------------------------------------------

    def _short_string(self, raw: bytes) -> None:
        """A whole string of a read object, in this piece, with no escape (what
        :meth:`_begin_string` … :meth:`_end_string` do, in one step)."""
        frame = self._frames[-1]
        if frame.expect_key:
            frame.key = _text(raw) if len(raw) <= MAX_KEY else None
            frame.expect_key = False
        elif frame.role != _USAGE and frame.key == MODEL_KEY:
            text = _text(raw)  # at most MAX_VALUE bytes: _SHORT_STRING's bound
            if text is not None:
                frame.kept[MODEL_KEY] = text

    def _begin_string(self, skipping: bool) -> None:
        self._in_string, self._escape, self._string_over = True, False, False
        self._string = None
        if skipping or not self._frames:
            if not self._brackets:
                self.failed = True  # a string as the root
            return
        frame = self._frames[-1]
        self._string_is_key = frame.expect_key
        if frame.expect_key or (frame.role != _USAGE and frame.key == MODEL_KEY):
            self._string = bytearray()

    def _string_part(self, data: bytes, i: int) -> int:
        kept = self._string
        if self._escape:
            self._escape = False
            self._keep(data[i : i + 1])
            return i + 1
        end = _end(_STRING_BODY, data, i)
        if kept is not None:
            self._keep(data[i:end])
        if end == len(data):
            return end
        if data[end] == 0x5C:  # backslash: the next byte is escaped, perhaps in the next piece
            self._escape = True
            self._keep(b"\\")
            return end + 1
        self._in_string = False
        self._end_string()
        return end + 1

    def _keep(self, part: bytes) -> None:
        kept = self._string
        if kept is None or self._string_over:
            return
        limit = MAX_KEY if self._string_is_key else MAX_VALUE
        if len(kept) + len(part) > limit:
            kept += part[: limit - len(kept)]
            self._string_over = True
        else:
            kept += part

    def _end_string(self) -> None:
        raw, self._string = self._string, None
        if raw is None:
            return
        frame = self._frames[-1]
        if self._string_is_key:
            frame.key = None if self._string_over else _text(raw)
            frame.expect_key = False
        elif frame.key == MODEL_KEY:
            text = _text(raw, cut=self._string_over)
            if text is not None:
                frame.kept[MODEL_KEY] = text

    # -- numbers and literals --------------------------------------------------------------

    def _end_scalar(self) -> None:
        raw, self._scalar = self._scalar, None
        if raw is None or len(self._brackets) > len(self._frames):
            return
        frame = self._frames[-1]
        usable = frame.role == _USAGE and frame.key is not None and not self._scalar_over
        if usable and frame.key is not None and _INT.fullmatch(raw):
            frame.kept[frame.key] = int(raw)

    # -- brackets --------------------------------------------------------------------------

    def _open(self, c: int, skipping: bool) -> None:
        if len(self._brackets) >= MAX_DEPTH:
            self.failed = True
            return
        if not self._brackets:
            if c != ord("{"):
                self.failed = True  # an array root carries no usage
                return
            self._frames.append(_Frame(_ROOT))
        elif not skipping and c == ord("{"):
            parent = self._frames[-1]
            role = _child_role(parent.role, parent.key)
            if role is not None:
                self._frames.append(_Frame(role))
        self._brackets.append(c)

    def _close(self, c: int) -> None:
        if not self._brackets or _CLOSER[self._brackets[-1]] != c:
            self.failed = True
            return
        if len(self._brackets) == len(self._frames):
            frame = self._frames.pop()
            if not self._frames:
                self._done = frame.kept
            else:
                parent = self._frames[-1]
                if parent.key is not None:
                    parent.kept[parent.key] = frame.kept
        self._brackets.pop()


def _end(pattern: re.Pattern[bytes], data: bytes, i: int) -> int:
    """Where ``pattern`` (one that may match nothing) stops matching from ``i``."""
    found = pattern.match(data, i)
    return found.end() if found is not None else i


def _child_role(parent: int, key: str | None) -> int | None:
    """The role of an object that is the value of ``key`` in a read object, if it is read."""
    if key == USAGE_KEY and parent in (_ROOT, _HOLDER):
        return _USAGE
    if key in HOLDER_KEYS and parent == _ROOT:
        return _HOLDER
    return None


def _text(raw: bytes | bytearray, *, cut: bool = False) -> str | None:
    """A kept JSON string's text (its escapes undone); a cut one loses a broken last escape."""
    data = bytes(raw)
    if _PLAIN.fullmatch(data):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass  # a cut one may end inside a character; and JSON passes surrogates
    for trim in range(8 if cut else 1):
        try:
            value = json.loads(b'"' + data[: len(data) - trim] + b'"')
        except ValueError:
            continue
        return value if isinstance(value, str) else None
    return None
