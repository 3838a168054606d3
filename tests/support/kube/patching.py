"""The two patch formats kopf sends: JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """The patch cannot be applied (bad path, bad op): the server answers 422."""


class PatchTestFailed(PatchError):
    """A ``test`` op did not match: the server answers 422, as kopf's finalizer patch expects."""


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def apply(document: Any, ops: Any) -> Any:
    """RFC 6902 on a copy of ``document``: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(document)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed JSON patch operation: {op!r}")
        name, path = op["op"], _pointer(op["path"])
        if name == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchTestFailed(f"test failed at {op['path']}: {op.get('value')!r}")
        elif name == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif name in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(doc, source))
            if name == "move":
                _remove(doc, source)
            doc = _add(doc, path, value)
        else:
            raise PatchError(f"unknown JSON patch op {name!r}")
    return doc


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _parent(doc: Any, path: list[str]) -> Any:
    node = doc
    for part in path[:-1]:
        node = _child(node, part)
    return node


def _child(node: Any, part: str) -> Any:
    try:
        return node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError, ValueError, TypeError) as err:
        raise PatchError(f"path segment {part!r} does not exist") from err


def _get(doc: Any, path: list[str]) -> Any:
    node = doc
    for part in path:
        node = _child(node, part)
    return node


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _parent(doc, path), path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise PatchError(f"index {last} out of range")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError(f"cannot add {last!r} under a scalar")
    return doc


def _remove(doc: Any, path: list[str]) -> None:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, path), path[-1]
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError) as err:
        raise PatchError(f"path {last!r} does not exist") from err
