"""Turn a pydantic JSON schema into a Kubernetes *structural* OpenAPI v3 schema.

pydantic speaks JSON Schema 2020-12; the API server wants a structural subset of
OpenAPI v3 (see the Kubernetes docs, "Specifying a structural schema"):

* no ``$ref`` — definitions are inlined;
* every node has a ``type`` unless it preserves unknown fields;
* ``X | None`` (``anyOf: [X, {type: null}]``) becomes plain ``X``, *not* ``nullable``:
  the server then prunes an explicit ``null``, so a CEL ``has()`` sees what pydantic
  sees (unset); any other ``anyOf``/``oneOf``/``allOf`` is refused, not guessed at;
* ``const`` becomes a one-item ``enum``; a numeric ``exclusiveMinimum`` becomes
  ``minimum`` plus ``exclusiveMinimum: true`` (OpenAPI v3.0's boolean form);
* ``additionalProperties: true`` (a free-form dict) becomes
  ``x-kubernetes-preserve-unknown-fields``; ``additionalProperties: false`` is dropped
  (the server prunes unknown fields instead);
* ``title`` and ``default: null`` are dropped; reST double backticks leave descriptions
  (``kubectl explain`` shows them raw); ``description`` and ``type`` come first.
"""

from __future__ import annotations

import copy
from typing import Any

import pydantic

from agent_health.cluster import errors
from agent_health.cluster.api import meta

_DROP = {"title", "$defs"}
_COMPOSITIONS = ("anyOf", "oneOf", "allOf")


def of(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The structural schema of ``model`` (by alias, validation mode)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}), model.__name__)


def structural(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Convert one schema node (and everything below it); ``path`` names it in errors."""
    node = _resolve(node, defs, path)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {
                name: structural(sub, defs, f"{path}.{name}") for name, sub in value.items()
            }
        elif key == "items":
            out[key] = structural(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is True:
                out[meta.PRESERVE_UNKNOWN] = True
            elif isinstance(value, dict):
                out[key] = structural(value, defs, f"{path}{{}}")
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "description":
            out[key] = value.replace("``", "")
        else:
            out[key] = copy.deepcopy(value)
    if "type" not in out and not out.get(meta.PRESERVE_UNKNOWN):
        raise errors.SchemaError(f"{path}: schema node has no type: {sorted(node)}")
    if out.get(meta.PRESERVE_UNKNOWN) and "properties" not in out:
        out["type"] = "object"
    first: dict[str, Any] = {k: out[k] for k in ("description", "type") if k in out}
    return {**first, **out}


def _resolve(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Inline ``$ref`` and fold ``X | None`` into ``X``."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in defs:
            raise errors.SchemaError(f"{path}: unknown reference {node['$ref']}")
        rest = {k: v for k, v in node.items() if k != "$ref"}
        # The field's own keywords (description, default) win over the definition's.
        return _resolve({**defs[name], **rest}, defs, path)
    for key in _COMPOSITIONS:
        if key not in node:
            continue
        branches = [b for b in node[key] if b != {"type": "null"}]
        if len(branches) != 1:
            raise errors.SchemaError(
                f"{path}: {key} with {len(node[key])} branches has no structural form; "
                "use one type, or X | None"
            )
        rest = {k: v for k, v in node.items() if k != key}
        return {**_resolve(branches[0], defs, path), **rest}
    return node
