"""The line of each value in a JSON text, so a problem or a failed check names where it is.

``json`` gives values, not places. :func:`lines` walks a text that ``json.loads`` already
accepted and records where every value down to a few levels starts, by its path
(``(2,)`` is the third element of a top-level list, ``("testCases", 0, "name")`` the name of
the first case of a wrapper). Below that depth, values are skipped whole by the decoder.
"""

from __future__ import annotations

import bisect
import json
import re

Path = tuple[str | int, ...]

DEPTH = 6
"""Deep enough for a field of a case inside ``{"benchmarks": [{"testCases": [...]}]}``."""

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class Lines:
    """Line numbers (1-based) of the values of one text, by path.

    The text is walked only as deep as the paths asked for: every case's line is asked for,
    a field's only when it has a problem, so most files are walked one or two levels deep
    (each case skipped whole by the decoder) and a deeper walk is the rare one.
    """

    def __init__(self, text: str) -> None:
        self._breaks = [m.start() for m in re.finditer("\n", text)]
        self._starts: dict[Path, int] = {}
        self._text = text
        self._depth = -1

    def of(self, path: Path) -> int | None:
        """The line where the value at ``path`` starts, or of its nearest recorded parent."""
        wanted = min(len(path), DEPTH)
        if wanted > self._depth:
            self._depth = wanted
            self._starts = {}
            self._walk(0, ())
        while True:
            offset = self._starts.get(path)
            if offset is not None:
                return bisect.bisect_right(self._breaks, offset) + 1
            if not path:
                return None
            path = path[:-1]

    def _walk(self, at: int, path: Path) -> int:
        text = self._text
        at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        self._starts[path] = at
        opening = text[at : at + 1]
        if len(path) >= self._depth or opening not in ("[", "{"):
            return _DECODER.raw_decode(text, at)[1]
        closing = "]" if opening == "[" else "}"
        at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        if text[at] == closing:
            return at + 1
        index = 0
        while True:
            if opening == "[":
                at = self._walk(at, (*path, index))
            else:
                key, at = _DECODER.raw_decode(text, at)
                at = _SPACE.match(text, at).end() + 1  # type: ignore[union-attr]  # the ':'
                at = self._walk(at, (*path, key))
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if text[at] != ",":
                return at + 1  # the closing bracket
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            index += 1
