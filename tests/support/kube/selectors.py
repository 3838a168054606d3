"""Label selectors as ``kubectl -l`` writes them: ``a=b``, ``a!=b``, ``a in (x,y)``,
``a``, ``!a``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

Labels = Mapping[str, str]
Requirement = Callable[[Labels], bool]

_SET = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=()]+)\s*(==|=|!=)\s*([^\s!=()]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")


class SelectorError(ValueError):
    """The selector does not parse: the server answers 400."""


def parse(text: str | None) -> Requirement:
    """A predicate over an object's labels; an empty selector matches everything."""
    if not text:
        return lambda _labels: True
    requirements = [_requirement(part) for part in _split(text)]
    return lambda labels: all(r(labels) for r in requirements)


def _split(text: str) -> list[str]:
    # Commas separate requirements, except inside the parentheses of a set.
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _requirement(part: str) -> Requirement:
    if m := _SET.match(part):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ.match(part):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS.match(part):
        negate, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negate
    raise SelectorError(f"unparsable label selector requirement: {part!r}")
