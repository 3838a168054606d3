"""The generated CRDs: committed YAML is current, valid for Kubernetes 1.31, structural, usable."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from agent_health import cli
from agent_health.cluster import errors
from agent_health.cluster.api import crds, evaluationrun, schema

ROOT = Path(__file__).resolve().parents[2]
COMPOSITIONS = ("$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "const")


def _schema(definition: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def test_the_committed_crds_are_the_generated_ones() -> None:
    for kind in crds.KINDS:
        committed = ROOT / "crds" / kind.file_name
        assert committed.exists(), f"{committed} is missing: run `make generate`"
        assert committed.read_text() == crds.dump(crds.definition(kind)), (
            f"{committed} is out of date with the models: run `make generate`"
        )


@pytest.mark.parametrize("definition", crds.definitions(), ids=lambda d: d["metadata"]["name"])
def test_the_crds_validate_strictly_against_kubernetes_1_31(definition: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(definition, "1.31", strict=True) == "1.31"


def test_kubernetes_validate_does_reject_a_malformed_crd() -> None:
    definition = crds.definitions()[0]
    definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["propertys"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="propertys"):
        kubernetes_validate.validate(definition, "1.31", strict=True)


@pytest.mark.parametrize("definition", crds.definitions(), ids=lambda d: d["metadata"]["name"])
def test_the_schemas_are_structural(definition: dict[str, Any]) -> None:
    for path, node in _nodes(_schema(definition)):
        assert not set(COMPOSITIONS) & set(node), f"{path} keeps {set(COMPOSITIONS) & set(node)}"
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "nullable" not in node, f"{path}: null is pruned, not kept"
        if node.get("x-kubernetes-list-type") == "map":
            required = set(node["items"].get("required", []))
            assert set(node["x-kubernetes-list-map-keys"]) <= required, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(bound, True), bool), f"{path}.{bound} must be a boolean"


def test_only_free_form_fields_preserve_unknown_fields() -> None:
    preserved = [
        path
        for definition in crds.definitions()
        for path, node in _nodes(_schema(definition))
        if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert preserved == [
        ".spec.target.resources",
        ".spec.targets[].resources",  # the agent matrix's named agents: a target each
        ".spec.peers[].resources",
    ]


@pytest.mark.parametrize("definition", crds.definitions(), ids=lambda d: d["metadata"]["name"])
def test_every_printer_column_points_at_a_schema_field(definition: dict[str, Any]) -> None:
    paths = {path for path, _ in _nodes(_schema(definition))}
    for column in definition["spec"]["versions"][0]["additionalPrinterColumns"]:
        json_path = column["jsonPath"].split("[?", 1)[0]
        assert json_path in paths or json_path.startswith(".metadata."), column


def test_names_scope_and_subresources() -> None:
    by_kind = {d["spec"]["names"]["kind"]: d for d in crds.definitions()}
    run = by_kind["EvaluationRun"]["spec"]
    assert run["group"] == "agenthealth.dev"
    assert run["scope"] == "Namespaced"
    assert run["names"]["shortNames"] == ["evalrun", "er"]
    assert run["names"]["categories"] == ["agenthealth"]
    assert run["versions"][0]["subresources"] == {"status": {}}
    columns = [c["name"] for c in run["versions"][0]["additionalPrinterColumns"]]
    assert {"Phase", "Passed", "Failed", "Errored", "Pass rate", "Age"} <= set(columns)
    # `rs` belongs to ReplicaSets; reusing it would make `kubectl get rs` ambiguous.
    assert "rs" not in by_kind["RunSpec"]["spec"]["names"]["shortNames"]


def test_cross_field_rules_are_cel_on_the_right_nodes() -> None:
    by_kind = {d["spec"]["names"]["kind"]: _schema(d) for d in crds.definitions()}
    rules = {
        path: [r["rule"] for r in node.get("x-kubernetes-validations", [])]
        for kind, root in by_kind.items()
        for path, node in _nodes(root, kind)
        if node.get("x-kubernetes-validations")
    }
    assert rules["RunSpec.spec.suite"] == ["has(self.image) != has(self.configMap)"]
    assert rules["RunSpec.spec.isolation"] == [
        "!has(self.runtimeClassName) || self.mode == 'agentSandbox'",
        "!has(self.warmPool) || self.mode == 'agentSandbox'",
    ]
    (fixed,) = rules["EvaluationRun.spec"]
    assert fixed == evaluationrun.SPEC_IMMUTABLE[0]
    # Every field of the spec but those that steer a run is kept as it was.
    for field in ("runSpecRef", "repeats", "selection", "agents", "queue", "retry"):
        assert f"self.{field} == oldSelf.{field}" in fixed
    for field in ("suspend", "parallelism", "budget", "requeueErrored"):
        assert f"self.{field}" not in fixed


def test_the_cli_prints_every_crd_as_multi_document_yaml() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["crds"]) == 0
    documents = list(yaml.safe_load_all(out.getvalue()))
    assert [d["metadata"]["name"] for d in documents] == [
        "runspecs.agenthealth.dev",
        "evaluationruns.agenthealth.dev",
    ]
    assert documents == crds.definitions()


def test_the_cli_writes_one_file_per_crd(tmp_path: Path) -> None:
    assert cli.main(["crds", "--out", str(tmp_path / "out")]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["agenthealth.dev_evaluationruns.yaml", "agenthealth.dev_runspecs.yaml"]


def test_a_union_without_a_structural_form_is_refused_with_its_path() -> None:
    node = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    with pytest.raises(errors.SchemaError, match=r"Spec\.port: anyOf with 2 branches"):
        schema.structural(node, {}, "Spec.port")


def test_a_missing_type_is_refused() -> None:
    with pytest.raises(errors.SchemaError, match=r"Spec\.x: schema node has no type"):
        schema.structural({"description": "anything"}, {}, "Spec.x")
