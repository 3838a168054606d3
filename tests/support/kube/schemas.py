"""Custom objects checked against their CRD's ``openAPIV3Schema`` the way the API server does:
unknown fields pruned, defaults filled in, then the OpenAPI keywords (jsonschema, draft-4
semantics as in OpenAPI v3.0), then the CEL ``x-kubernetes-validations`` (cel-python), with
transition rules (``oldSelf``) checked against the old object on updates.
"""

from __future__ import annotations

import copy
import functools
import logging
from typing import Any

import celpy
import jsonschema

RULES = "x-kubernetes-validations"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
_CEL = celpy.Environment()
logging.getLogger("celpy").setLevel(logging.WARNING)  # it logs every evaluation at DEBUG


@functools.cache
def _program(rule: str) -> Any:
    return _CEL.program(_CEL.compile(rule))


def admit(schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """What the server stores for a written object: pruned, then defaulted."""
    value = copy.deepcopy(value)
    # ``metadata``, ``apiVersion`` and ``kind`` belong to the API machinery, not the schema.
    envelope = {k: value.pop(k) for k in ("apiVersion", "kind", "metadata") if k in value}
    _prune(schema, value)
    _default(schema, value)
    return {**envelope, **value}


def _prune(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict) and not schema.get(PRESERVE):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _prune(extra, item)
            return
        for name in list(value):
            if properties is None or name not in properties:
                del value[name]
            else:
                _prune(properties[name], value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _prune(schema["items"], item)


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """A copy of ``value`` with every absent property that has a ``default`` filled in."""
    value = copy.deepcopy(value)
    _default(schema, value)
    return value


def _default(schema: dict[str, Any], value: Any) -> None:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def problems(schema: dict[str, Any], value: Any, old: Any = None) -> list[str]:
    """Every violation of ``schema`` by ``value`` (already defaulted), as ``path: message``."""
    found = [
        f"{'.'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
        for err in jsonschema.Draft4Validator(schema).iter_errors(value)
    ]
    if not found:
        found.extend(_rules(schema, value, old, ""))
    return found


def _rules(schema: dict[str, Any], value: Any, old: Any, path: str) -> list[str]:
    found = []
    for rule in schema.get(RULES, []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue  # transition rules only run on updates
        bindings = {"self": celpy.json_to_cel(value)}
        if transition:
            bindings["oldSelf"] = celpy.json_to_cel(old)
        result = _program(rule["rule"]).evaluate(bindings)
        if result is not True and result != celpy.celtypes.BoolType(True):
            found.append(f"{path or '(root)'}: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                old_sub = old.get(name) if isinstance(old, dict) else None
                found.extend(_rules(sub, value[name], old_sub, f"{path}.{name}".lstrip(".")))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found.extend(_rules(schema["items"], item, None, f"{path}[{index}]"))
    return found
