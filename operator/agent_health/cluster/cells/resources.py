"""CPU and memory of every container the operator creates: defaults, a cap, a RunSpec's own.

Every container of a cell (controller, gateway, target, each peer) and of a discovery pod
runs with CPU and memory requests *and limits*: a target that spins or leaks is throttled or
OOM-killed alone instead of starving its node's other cells. The operator's deployment sets
the defaults and a cap (``--cell-resources``, the chart's ``cells.resources``, a
:class:`CellResources` as JSON); a RunSpec may ask for other values for its target and peers
(``spec.target.resources``, ``spec.peers[].resources``) within the cap. What a RunSpec leaves
out comes from the defaults; a limit above the cap, a request above its limit or a quantity
Kubernetes would not read is refused (:class:`~agent_health.cluster.errors.SpecError`, naming
the field), before any pod is made.
"""

from __future__ import annotations

import copy
import decimal
import json
from collections.abc import Mapping
from typing import Any

import pydantic

from agent_health.cluster import errors

LIMITED = ("cpu", "memory")
"""The resources every container must have a limit for."""


class Resources(pydantic.BaseModel):
    """A container's ``resources`` block: requests and limits by resource name."""

    # The chart's YAML may say `cpu: 2`: a number is the same quantity as its text.
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    requests: dict[str, str] = pydantic.Field(default_factory=dict)
    limits: dict[str, str] = pydantic.Field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "limits": dict(self.limits)}


def _default(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Resources:
    return Resources(
        requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu_limit, "memory": memory_limit}
    )


class CellResources(pydantic.BaseModel):
    """``--cell-resources``: each container's defaults, and the cap on a RunSpec's own.

    >>> CellResources.model_validate_json('{"max": {"cpu": "4", "memory": "8Gi"}}').max["cpu"]
    '4'
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    controller: Resources = _default("100m", "256Mi", "1", "1Gi")
    """The controller (one test body) and the discovery pod."""
    gateway: Resources = _default("50m", "64Mi", "500m", "256Mi")
    target: Resources = _default("100m", "256Mi", "1", "1Gi")
    """The target when its RunSpec names no resources (or leaves some out)."""
    peer: Resources = _default("50m", "64Mi", "500m", "512Mi")
    """Each peer likewise."""
    max: dict[str, str] = pydantic.Field(default_factory=lambda: {"cpu": "4", "memory": "8Gi"})
    """The highest limit a RunSpec may ask for its target or a peer, by resource name."""

    @pydantic.model_validator(mode="after")
    def _complete(self) -> CellResources:
        for name in ("controller", "gateway", "target", "peer"):
            block: Resources = getattr(self, name)
            missing = [r for r in LIMITED if r not in block.limits]
            if missing:
                raise ValueError(f"{name}.limits needs {' and '.join(missing)}")
            for kind in ("requests", "limits"):
                for resource, value in getattr(block, kind).items():
                    _check(value, f"{name}.{kind}.{resource}")
        for resource, value in self.max.items():
            _check(value, f"max.{resource}")
        return self


def parse(text: str) -> CellResources:
    """``--cell-resources`` JSON over the defaults (a key left out keeps its default).

    A ValueError names the flag and the bad field.
    """
    flag = "--cell-resources (or AGENT_HEALTH_CELL_RESOURCES)"
    try:
        given = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise ValueError(f"{flag}: not JSON: {err}") from None
    if not isinstance(given, dict):
        raise ValueError(f"{flag}: expected a JSON object, got {type(given).__name__}")
    merged = CellResources().model_dump()
    for name, block in given.items():
        if isinstance(block, dict) and isinstance(merged.get(name), dict):
            for kind, values in block.items():
                if isinstance(values, dict) and isinstance(merged[name].get(kind), dict):
                    merged[name][kind] |= values
                else:
                    merged[name][kind] = values
        else:
            merged[name] = block
    try:
        return CellResources.model_validate(merged)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{flag}: {where + ': ' if where else ''}{first['msg']}") from None


def quantity(value: str | int | float) -> decimal.Decimal:
    """A Kubernetes quantity (``500m``, ``1.5``, ``256Mi``, ``1e3``) as a number.

    A ValueError when Kubernetes would not read it, or it is negative.
    """
    # The kubernetes client (the operator extra) parses quantities as the API server does;
    # imported here so the manifests load without it (``agent-health crds``, say).
    from kubernetes.utils import quantity as k8s_quantity

    usage = f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 256Mi, 1Gi)"
    try:
        parsed: decimal.Decimal = k8s_quantity.parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, decimal.InvalidOperation):
        raise ValueError(usage) from None
    if not parsed.is_finite() or parsed < 0:
        raise ValueError(usage)
    return parsed


def _check(value: str, where: str) -> None:
    try:
        quantity(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def effective(
    default: Resources, asked: Mapping[str, Any], cap: Mapping[str, str], *, where: str
) -> dict[str, Any]:
    """The ``resources`` of a container: ``asked`` (a RunSpec's) over ``default``, checked.

    A request above the default limit raises that limit to the request (the RunSpec asked
    for more and named no limit); every limit must stay within ``cap``. ``where`` names the
    RunSpec field in errors, e.g. ``RunSpec team/triage spec.target.resources``.
    """
    unknown = sorted(set(asked) - {"requests", "limits"})
    if unknown:
        raise errors.SpecError(
            f"{where}: {', '.join(unknown)} not supported in a cell; use requests and limits"
        )
    out = default.wire()
    for kind in ("requests", "limits"):
        given = asked.get(kind) or {}
        if not isinstance(given, Mapping):
            raise errors.SpecError(f"{where}.{kind}: expected a map of resource name to quantity")
        for resource, value in given.items():
            try:
                quantity(value)
            except ValueError as err:
                raise errors.SpecError(f"{where}.{kind}.{resource}: {err}") from None
            out[kind][str(resource)] = str(value)
    explicit = asked.get("limits") or {}
    for resource, request in out["requests"].items():
        limit = out["limits"].get(resource)
        if limit is None or quantity(request) <= quantity(limit):
            continue
        if resource in explicit:
            raise errors.SpecError(
                f"{where}: requests.{resource} {request} is above limits.{resource} {limit}; "
                "a request may not exceed its limit"
            )
        out["limits"][resource] = request
    for resource, highest in cap.items():
        limit = out["limits"].get(resource)
        if limit is not None and quantity(limit) > quantity(highest):
            raise errors.SpecError(
                f"{where}: limits.{resource} {limit} is above the operator's cap of {highest} "
                "(its --cell-resources max, the chart's cells.resources.max); ask for at most "
                f"{highest} or have the operator's admin raise the cap"
            )
    return copy.deepcopy(out)
