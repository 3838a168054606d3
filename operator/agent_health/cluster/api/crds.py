"""The CustomResourceDefinitions, generated from the models; ``crds/`` holds their YAML.

``agent-health crds`` prints :func:`render` (multi-document YAML); ``--out DIR`` writes
one file per CRD, named ``<group>_<plural>.yaml`` as controller-gen does. Never edit the
YAML by hand: change the models and regenerate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import yaml

from agent_health.cluster import apigroup
from agent_health.cluster.api import evaluationrun, meta, runspec, schema

CATEGORY = "agenthealth"


@dataclass(frozen=True)
class Kind:
    """What a CRD needs beyond its spec and status models."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec: type[pydantic.BaseModel]
    status: type[pydantic.BaseModel]
    columns: tuple[dict[str, Any], ...]
    spec_rules: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.plural}.{apigroup.GROUP}"

    @property
    def file_name(self) -> str:
        return f"{apigroup.GROUP}_{self.plural}.yaml"


def _column(name: str, path: str, kind: str = "string", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "jsonPath": path, **extra}


_AGE = _column("Age", ".metadata.creationTimestamp", "date")

# `rs` is ReplicaSet's short name; a clash would make `kubectl get rs` ambiguous.
KINDS: tuple[Kind, ...] = (
    Kind(
        kind=runspec.KIND,
        plural=runspec.PLURAL,
        short_names=("rspec", "rspecs"),
        description="What is evaluated: the suite, the target agent, peers, judge and isolation.",
        spec=runspec.Spec,
        status=runspec.Status,
        columns=(
            _column("Target", ".spec.target.image"),
            _column("Connector", ".spec.target.connector"),
            _column("Isolation", ".spec.isolation.mode"),
            _column("Tests", ".status.testCount", "integer"),
            _column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
            _AGE,
        ),
    ),
    Kind(
        kind=evaluationrun.KIND,
        plural=evaluationrun.PLURAL,
        short_names=("evalrun", "er"),
        description="One execution of a RunSpec: repeats, parallelism, selection and its tally.",
        spec=evaluationrun.Spec,
        status=evaluationrun.Status,
        columns=(
            _column("RunSpec", ".spec.runSpecRef.name", priority=1),
            _column("Phase", ".status.phase"),
            _column("Queued", ".status.counts.queued", "integer"),
            _column("Passed", ".status.counts.passed", "integer"),
            _column("Failed", ".status.counts.failed", "integer"),
            _column("Errored", ".status.counts.errored", "integer"),
            _column("Agent errors", ".status.counts.erroredByCause.agent", "integer", priority=1),
            _column("Pass rate", ".status.passRate", "number"),
            _column("Score", ".status.score", "number", priority=1),
            _AGE,
        ),
        spec_rules=(evaluationrun.SPEC_IMMUTABLE,),
    ),
)


def open_api_schema(kind: Kind) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of one kind: envelope, spec (required) and status."""
    spec = schema.of(kind.spec)
    if kind.spec_rules:
        spec["x-kubernetes-validations"] = [
            *spec.get("x-kubernetes-validations", []),
            *meta.cel(*kind.spec_rules)["x-kubernetes-validations"],
        ]
    return {
        "description": kind.description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": schema.of(kind.status),
        },
    }


def definition(kind: Kind) -> dict[str, Any]:
    """One ``apiextensions.k8s.io/v1`` CustomResourceDefinition."""
    singular = kind.kind.lower()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.name,
            "labels": {"app.kubernetes.io/part-of": "agent-health"},
        },
        "spec": {
            "group": apigroup.GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": singular,
                "shortNames": list(kind.short_names),
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": apigroup.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in kind.columns],
                    "schema": {"openAPIV3Schema": open_api_schema(kind)},
                }
            ],
        },
    }


def definitions() -> list[dict[str, Any]]:
    """Every CRD of the operator, in a stable order."""
    return [definition(k) for k in KINDS]


def dump(document: dict[str, Any]) -> str:
    """One YAML document, keys in model order, with a do-not-edit header."""
    header = (
        "# Generated by `agent-health crds --out crds/` from the pydantic models. Do not edit.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def render() -> str:
    """All CRDs as one multi-document YAML stream."""
    return "---\n".join(dump(d) for d in definitions())


def write(directory: Path) -> list[Path]:
    """Write one file per CRD into ``directory`` (created if missing); return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in KINDS:
        path = directory / kind.file_name
        path.write_text(dump(definition(kind)))
        paths.append(path)
    return paths
