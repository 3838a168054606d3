"""Reading JSON that may be hostile: only what JSON can say, nested no deeper than a bound.

Python's :func:`json.loads` takes more than JSON: ``NaN``, ``Infinity`` and ``-Infinity``,
and numbers too large for a float, read as ``inf``. None of them can be written back as
JSON (a ledger line's canonical JSON refuses them, so a record holding one can never be
sealed), and a NaN compares false with everything, so a score of NaN slips past every
threshold. Nesting is the other edge: a file of ten thousand ``[`` raises ``RecursionError``
in the parser or in whatever walks the value next, a traceback instead of a message.

:func:`loads` refuses all of these with one :class:`JSONError` (a :class:`ValueError`, so
code that already catches "not JSON" catches it too) whose message says what was wrong.
It costs about what :func:`json.loads` does on the usual text: pydantic-core's parser reads
it (it refuses ``NaN`` and ``Infinity`` itself and nests at most :data:`FAST_DEPTH` levels)
and its serializer tells whether a number overflowed to infinity; :func:`json.loads` reads
the rest (what pydantic-core refuses, e.g. a lone surrogate escape, and what may hold an
overflowed number), with hooks that refuse non-finite numbers and a walk that bounds the
nesting.

Every reader of a report, a ledger line or an agent's reply uses it (the case-file loader
may too); it lives in the ledger, the package every other one may import.

Writing is the same edge the other way: :func:`json.dumps` writes a NaN or an infinity as
``NaN`` / ``Infinity``, which no JSON reader takes. :func:`dumps` writes what the CLI
prints as JSON (``list --json``, ``compare --json``, a cell's line) so that it never does:
such a number becomes ``null``, as pydantic writes it in every report.

>>> loads('{"score": 0.5, "steps": [1, 2]}')
{'score': 0.5, 'steps': [1, 2]}
>>> loads('{"tests": [{"score": NaN}]}')
Traceback (most recent call last):
    ...
agent_health.ledger.strictjson.JSONError: tests[0].score: NaN: JSON has no NaN or Infinity
>>> loads('{"args": ' + "[" * 300 + "]" * 300 + "}")
Traceback (most recent call last):
    ...
agent_health.ledger.strictjson.JSONError: args[0][0][0][0][0]…: nested deeper than 256 levels
"""

from __future__ import annotations

import json
import math
from typing import Any

import pydantic_core

MAX_DEPTH = 256
"""How deep a file we read (a report, a ledger line) may nest: deeper than any reply we
accept (:data:`FAST_DEPTH`) plus what a report or a record wraps around one."""
FAST_DEPTH = 200
"""How deep pydantic-core's parser nests (its own recursion limit; an empty container at the
bottom is no level): an agent's reply may nest this deep (``wire.parse_json``)."""
# A number too large for a float (above 1.8e308) has a positive exponent of 3 digits or
# more, or else (its exponent at most 99) 210 digits or more before its point: a run of 200
# digits is looked for, which no shorter one is. Looked for in text not yet parsed
# (may_overflow) with every digit made
# "0", every e or E "e", every "+" kept and the rest blanked: one bytes.translate and three
# substring searches, all in C (a regex took 50-190 us on a 10 KB reply, more than parsing
# it). Hex (a ledger line's mac) often looks like one: only a reply is read this way.
_SHAPES = bytearray(b" " * 256)
_SHAPES[ord("0") : ord("9") + 1] = b"0" * 10
_SHAPES[ord("e")] = _SHAPES[ord("E")] = ord("e")
_SHAPES[ord("+")] = ord("+")
_NUMBER_SHAPES = bytes(_SHAPES)
_MANY_DIGITS = b"0" * 200


class JSONError(ValueError):
    """Text that is not JSON we can hold: malformed, a non-finite number, or too deep.

    ``reason`` says which when it is not plain malformed text (``None`` then: the message is
    the parser's); ``path`` is where in the document, when known (``tests[3].score``)."""

    def __init__(self, message: str, *, reason: str | None = None, path: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.reason = reason
        self.path = path


def _refused(reason: str, path: str | None = None) -> JSONError:
    return JSONError(reason, reason=reason, path=path)


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` as Python data, refusing what JSON cannot say and nesting past ``max_depth``
    (see the module docstring). Raises :class:`JSONError` saying why."""
    try:
        value = pydantic_core.from_json(text, allow_inf_nan=False)
    except ValueError:
        pass  # read again below, outside this handler: its error is not chained to ours
    else:
        # Text in which no number can overflow holds no infinity: the parsed value is not
        # written out again to look for one (the usual case, at a tenth of the cost).
        if max_depth >= FAST_DEPTH and (not may_overflow(text) or not _infinite_in(value)):
            return value
    return _exact(text, max_depth)


def dumps(value: Any, *, default: Any = None, **options: Any) -> str:
    """``value`` as JSON text every JSON reader takes: :func:`json.dumps` (``default`` and
    ``options`` as it takes them), with each NaN or infinity written as ``null``.

    >>> dumps({"timeout": float("inf"), "score": 0.5})
    '{"timeout": null, "score": 0.5}'
    """
    try:
        return json.dumps(value, default=default, allow_nan=False, **options)
    except ValueError as err:
        if "JSON compliant" not in str(err):  # "Out of range float values are not ..."
            raise
    # Rare: written as Python writes it, read back with each constant made None (so what
    # ``default`` made of an object is covered too), written again.
    loose = json.loads(json.dumps(value, default=default), parse_constant=lambda _: None)
    return json.dumps(loose, allow_nan=False, **options)


def _infinite_in(value: Any) -> bool:
    """Whether parsed ``value`` may hold an infinity: a number too large for a float, the only
    non-finite value pydantic-core's parser lets through. Its own serializer writes one as a
    bare ``Infinity``, in Rust, about as fast as the parse (a walk in Python costs several
    times that); the word inside a string only costs the exact reading."""
    # find(), not ``in``: bytes' ``in`` first tries its operand as an integer, and raising
    # and clearing that TypeError cost more than the search.
    return pydantic_core.to_json(value, inf_nan_mode="constants").find(b"Infinity") >= 0


def needs_care(text: str | bytes) -> bool:
    """Whether ``text`` may hold a number :func:`loads` refuses (``NaN``, ``Infinity``, one
    too large for a float): pydantic's own JSON parsing (``model_validate_json``) takes them
    in fields of any type, so a fast path through it must first ask this (false positives
    only cost the slow path)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    # find(), not ``in``: see may_overflow (every agent answer is asked this).
    return data.find(b"NaN") >= 0 or data.find(b"Infinity") >= 0 or may_overflow(data)


def may_overflow(text: str | bytes) -> bool:
    """Whether ``text`` may hold a number too large for a float (which every parser reads as
    infinity), judged from the text alone: false positives (hex, ``"1e400"`` in a string)
    only cost the exact reading."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    shapes = data.translate(_NUMBER_SHAPES)
    # find(), not ``in``: bytes' ``in`` first tries its operand as an integer, and raising
    # and clearing that TypeError cost more than the search. Most text has no exponent (a
    # digit then an e) and fewer digits than a run needs: one search and one count say so.
    find = shapes.find
    at = find(b"0e")
    if at >= 0 and (find(b"0e000", at) >= 0 or find(b"0e+000", at) >= 0):
        return True
    return shapes.count(48) >= len(_MANY_DIGITS) and find(_MANY_DIGITS) >= 0  # 48: "0"


def _exact(text: str | bytes, max_depth: int) -> Any:
    """:func:`json.loads` with every number checked and the nesting bounded."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float)
    except RecursionError:
        raise _refused(f"nested deeper than {max_depth} levels") from None
    except JSONError as err:
        raise _placed(err, text) from None
    except ValueError as err:
        raise JSONError(str(err)) from None
    if too_deep(value, max_depth):
        where = _path_to(value, lambda _, depth: depth > max_depth)
        raise _refused(f"nested deeper than {max_depth} levels", where)
    return value


def _placed(err: JSONError, text: str | bytes) -> JSONError:
    """``err`` naming where its number is, found by reading ``text`` as Python's json does
    (only ever on the way to an error: the cost is no one's)."""
    try:
        lenient = json.loads(text)
    except (ValueError, RecursionError):
        return err
    found = not_finite(lenient)
    return _refused(err.reason or str(err), found[0]) if found else err


def _constant(name: str) -> Any:
    raise _refused(f"{name}: JSON has no NaN or Infinity")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 24 else text[:20] + "…"
        raise _refused(f"{shown} is too large for a 64-bit float")
    return value


def too_deep(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (JSON data) nests more than ``max_depth`` levels: containers that
    hold something, as pydantic-core counts them (an empty ``[]`` or ``{}`` adds none).
    Walked without recursion, so any depth is safe to ask about."""
    stack: list[tuple[Any, int]] = [(value, 1)] if _holds(value) else []
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if _holds(child))
    return False


def _holds(value: Any) -> bool:
    return isinstance(value, dict | list) and bool(value)


def _not_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def not_finite(value: Any) -> tuple[str, float] | None:
    """Where the first NaN or infinity in ``value`` (Python data) is, and what it is: what
    canonical JSON refuses to write, named for the message (``trajectory[0].latency_ms``)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, steps = stack.pop()
        if _not_finite(item):
            return "".join(steps).lstrip(".") or "the value", item
        if isinstance(item, dict):
            stack.extend(reversed([(v, (*steps, f".{k}")) for k, v in item.items()]))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(v, (*steps, f"[{i}]")) for i, v in enumerate(item)]))
    return None


def _path_to(value: Any, found: Any) -> str | None:
    """Where (``tests[3].score``) the first item is, in document order, for which
    ``found(item, depth)`` holds, looking at containers that hold something. A deep place is
    named by its first :data:`_SHOWN` steps."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, steps = stack.pop()
        if found(item, depth):
            shown = "".join(steps[:_SHOWN]).lstrip(".") + ("…" if len(steps) > _SHOWN else "")
            return shown or None
        if isinstance(item, dict):
            pairs = [(f".{k}", v) for k, v in item.items()]
        elif isinstance(item, list):
            pairs = [(f"[{i}]", v) for i, v in enumerate(item)]
        else:
            continue
        keep = [(v, depth + 1, (*steps, step)) for step, v in pairs if _holds(v)]
        stack.extend(reversed(keep))
    return None


_SHOWN = 6
