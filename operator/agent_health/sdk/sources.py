"""Where a function's source is in its file: the lines ``inspect.getsource`` gives it —
from its first decorator to the end of its body, with the comments inspect counts as part
of it — found without tokenizing each body anew (``declare.Collector.source_of``: a test's
``content_hash`` reads its body's source, and the history keys on the hash).

Two ways to the same lines: :func:`plain_block` scans the function's own lines, and gives
up where it cannot be sure; :func:`blocks` parses the whole file once.
"""

from __future__ import annotations

import ast
import linecache
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any


def blocks(path: str) -> dict[int, tuple[int, int]]:
    """First line → (first, last line) of every function in ``path``, as inspect counts them:
    from the first decorator to the body's last line or its last comment indented with it."""
    lines = linecache.getlines(path)
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return {}
    found: dict[int, tuple[int, int]] = {}
    for node in _functions(tree.body):
        if node.end_lineno is None:
            continue
        first = min((d.lineno for d in node.decorator_list), default=node.lineno)
        last = node.end_lineno
        body = node.body[0]
        if body.lineno > node.lineno:  # an indented body: trailing comments may belong to it
            last = _with_comments(lines, last, body.col_offset)
        found[first] = (first, last)
    return found


# What a line's scan must follow past (``_code_of``): a quote (a string's brackets and
# ``#`` are text), a comment's start, a backslash (outside a string, a line continued: the
# parser decides). One character class: the strings are followed by ``str.find``, as a
# pattern for them costs as much to compile as a test's scan saves.
_SIGNIFICANT = re.compile(r"[\"'#\\]")
_DEF = re.compile(r"(?:async\s+)?def\s")
# Python 3.12 lets an f-string's braces hold its own quote (PEP 701): a one-line scan would
# end the string there, so an f-string with braces is left to the parser on those versions.
_NESTED_QUOTES = sys.version_info >= (3, 12)


def plain_block(lines: Sequence[str], first: int) -> tuple[int, int] | None:
    """:func:`blocks`' answer for the function whose first line is ``first``, by scanning its
    lines, or ``None`` where the scan cannot be sure and the parser must decide.

    A function's lines end with its body's last logical line; without strings over lines
    or continued lines, that is the last line on which its brackets close, before the first
    statement indented no deeper than its ``def``. Parsing the whole file cost a test about
    three times this scan of its own lines (issue #40); every answer given is the parser's
    (``tests/sdk/test_sdk_source.py`` holds them equal over every function of the repo).
    """
    head = lines[first - 1]
    stripped = head.lstrip()
    indent = len(head) - len(stripped)
    if not (stripped.startswith("@") or _DEF.match(stripped)):
        return None
    depth = 0
    in_header = True  # the decorators and the def, up to the colon
    seen_def = False
    column = -1  # the body's
    last = 0
    for number in range(first, len(lines) + 1):
        text = lines[number - 1]
        stripped = text.lstrip()
        if not stripped:
            continue
        if depth == 0:  # a logical line starts here
            if stripped[0] == "#":
                continue
            margin = len(text) - len(stripped)
            if "\t" in text[:margin] or "\f" in text[:margin]:
                return None  # indentation the tokenizer measures its own way
            if in_header:
                if margin != indent:
                    return None
                if _DEF.match(stripped):
                    seen_def = True
                elif stripped[0] != "@" or seen_def:
                    return None
            elif margin <= indent:
                break  # the first statement after the function
            elif column < 0:
                column = margin
        code = _code_of(text)
        if code is None:
            return None
        # The same sum as six counts, counting only the kinds of bracket the line holds:
        # ``in`` is a quick search, where each str.count parses its arguments the old way
        # (six counts a line were four tenths of a test's scan, issue #40).
        depth += code.count("(") - code.count(")")
        if "[" in code or "]" in code:
            depth += code.count("[") - code.count("]")
        if "{" in code or "}" in code:
            depth += code.count("{") - code.count("}")
        if depth < 0:
            return None
        if depth:
            continue
        if in_header:
            if seen_def:
                if not code.rstrip().endswith(":"):
                    return None  # a body on the def's line: the parser's
                in_header = False
        else:
            last = number
    if depth or in_header or not last:
        return None
    return first, _with_comments(lines, last, column)


def _with_comments(lines: Sequence[str], last: int, column: int) -> int:
    """The body's last line, ``last``, or the last comment after it indented at least to the
    body's ``column`` (blank lines between): inspect counts those as the function's."""
    for number in range(last + 1, len(lines) + 1):
        text = lines[number - 1]
        stripped = text.lstrip()
        if not stripped.strip():
            continue
        if not stripped.startswith("#"):
            break
        if len(text) - len(stripped) >= column:
            last = number
    return last


def _code_of(text: str) -> str | None:
    """``text``, a line, with each string emptied (``"..."`` → ``""``) and its comment cut:
    what its brackets and its last character are read from. ``None`` where a line scan cannot
    be sure (a string that may run over lines, a continued line, an open quote)."""
    double, single = '"' in text, "'" in text
    if not (double or single or "\\" in text):
        return text[: text.find("#")] if "#" in text else text
    if "\\" not in text and not (double and single) and not _NESTED_QUOTES:
        # One kind of quote and no escapes: the strings are every other piece between them.
        # (An odd count of quotes is a quote in a comment, or one left open: read below.)
        quote = '"' if double else "'"
        if quote * 3 in text:
            return None
        pieces = text.split(quote)
        if len(pieces) % 2:
            outside = pieces[::2]
            for i, piece in enumerate(outside):
                if "#" in piece:
                    outside = [*outside[:i], piece[: piece.find("#")]]
                    break
            return (quote * 2).join(outside)
    parts = []
    at = 0
    while found := _SIGNIFICANT.search(text, at):
        char = found.group()
        if char == "#":
            parts.append(text[at : found.start()])
            return "".join(parts)
        if char == "\\" or text.startswith(char * 3, found.start()):
            return None  # a line continued, or a string that may run over lines
        start = found.end()  # a string on this line: to its closing quote, past escaped ones
        end = start
        while True:
            end = text.find(char, end)
            if end < 0:
                return None
            escapes = end
            while text[escapes - 1] == "\\":
                escapes -= 1
            end += 1
            if (end - 1 - escapes) % 2 == 0:
                break
        fstring = _NESTED_QUOTES and "f" in text[max(0, start - 3) : start - 1].lower()
        if fstring and "{" in text[start:end]:
            return None
        parts.append(text[at:start])
        parts.append(char)
        at = end
    parts.append(text[at:])
    return "".join(parts)


# The nodes that hold statements (a simple statement holds none: its fields are not looked
# at, most of a file's statements and every test body's).
_HOLDERS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Match,
    ast.match_case,
    ast.Try,
    ast.TryStar,
    ast.ExceptHandler,
)


def _functions(body: list[Any]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function defined in ``body``, at any depth of statements (expressions, where
    most of a file's nodes are, are not walked: a test body is a statement)."""
    for node in body:
        if not isinstance(node, _HOLDERS):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, name, None)
            if isinstance(inner, list) and inner:
                yield from _functions(inner)
