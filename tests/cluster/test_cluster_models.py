"""The CRD models: the example validates; bad objects are refused by the schema or the model.

CEL rules are evaluated for real (cel-python, in ``kube.schemas``) next to the pydantic
validators that mirror them, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
import yaml
from agent_health.cluster import apigroup, errors
from agent_health.cluster.api import crds, evaluationrun, meta, runspec
from support.kube import schemas

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = list(yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text()))
SCHEMAS = {
    d["spec"]["names"]["kind"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for d in crds.definitions()
}
MODELS: dict[str, type[pydantic.BaseModel]] = {
    "RunSpec": runspec.RunSpec,
    "EvaluationRun": evaluationrun.EvaluationRun,
}


def _example(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in EXAMPLE if d["kind"] == kind))


def _schema_problems(body: dict[str, Any]) -> list[str]:
    schema = SCHEMAS[body["kind"]]
    return schemas.problems(schema, schemas.admit(schema, body))


def test_the_example_has_one_of_each_kind() -> None:
    assert [d["kind"] for d in EXAMPLE] == ["RunSpec", "EvaluationRun"]


@pytest.mark.parametrize("document", EXAMPLE, ids=lambda d: d["kind"])
def test_the_example_validates_against_the_generated_schema(document: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(SCHEMAS[document["kind"]]).validate(document)
    assert _schema_problems(document) == []


@pytest.mark.parametrize("document", EXAMPLE, ids=lambda d: d["kind"])
def test_the_example_parses_with_the_model(document: dict[str, Any]) -> None:
    model = MODELS[document["kind"]]
    parsed = meta.parse(model, document, what=document["kind"])
    admitted = model.model_validate(schemas.admit(SCHEMAS[document["kind"]], document))
    assert parsed == admitted, "the model's defaults and the schema's defaults differ"


def test_model_defaults_match_the_schema_defaults_for_a_minimal_run() -> None:
    body = {
        "apiVersion": apigroup.API_VERSION,
        "kind": "EvaluationRun",
        "spec": {"runSpecRef": {"name": "x"}},
    }
    admitted = schemas.admit(SCHEMAS["EvaluationRun"], body)
    parsed = evaluationrun.EvaluationRun.model_validate(body)
    assert admitted["spec"]["repeats"] == parsed.spec.repeats == 1
    assert admitted["spec"]["parallelism"] == parsed.spec.parallelism == 1
    assert admitted["spec"]["skipJudge"] is parsed.spec.skip_judge is False


def test_the_runspec_lists_its_images_once_in_order() -> None:
    body = _example("RunSpec")
    body["spec"]["peers"].append(
        {"name": "twin", "image": body["spec"]["target"]["image"], "port": 1}
    )
    parsed = runspec.RunSpec.model_validate(body)
    assert parsed.images() == [
        "ghcr.io/agent-health/examples/triage-agent:0.1.0",
        "ghcr.io/agent-health/examples/log-server:0.1.0",
    ]


def _two_suite_sources(body: dict[str, Any]) -> None:
    body["spec"]["suite"]["image"] = "ghcr.io/agent-health/suite:1"


def _no_suite_source(body: dict[str, Any]) -> None:
    del body["spec"]["suite"]["configMap"]


def _runtime_class_without_sandbox(body: dict[str, Any]) -> None:
    body["spec"]["isolation"] = {"mode": "pod", "runtimeClassName": "gvisor"}


def _http_target_without_port(body: dict[str, Any]) -> None:
    del body["spec"]["target"]["port"]


def _env_value_and_source(body: dict[str, Any]) -> None:
    body["spec"]["target"]["env"][1]["value"] = "literal"


# Rules spanning fields: the CEL rule and the model's mirror must refuse them with one message.
CROSS_FIELD = [
    (_two_suite_sources, "suite needs exactly one source: image or configMap"),
    (_no_suite_source, "suite needs exactly one source: image or configMap"),
    (_runtime_class_without_sandbox, "runtimeClassName is only allowed with mode agentSandbox"),
    (_http_target_without_port, "target.port is required unless the connector is subprocess"),
    (_env_value_and_source, "env: set value or valueFrom, not both"),
]


@pytest.mark.parametrize(
    ("breaks", "message"), CROSS_FIELD, ids=lambda x: getattr(x, "__name__", "")
)
def test_cross_field_rules_are_refused_by_cel_and_by_the_model(breaks: Any, message: str) -> None:
    body = _example("RunSpec")
    breaks(body)
    assert any(message in p for p in _schema_problems(body)), _schema_problems(body)
    with pytest.raises(errors.SpecError, match=message) as caught:
        meta.parse(runspec.RunSpec, body, what="RunSpec default/triage")
    assert str(caught.value).startswith("RunSpec default/triage is invalid: spec.")
    assert "\n" not in str(caught.value)


def test_a_subprocess_target_needs_no_port() -> None:
    body = _example("RunSpec")
    body["spec"]["target"]["connector"] = "subprocess"
    del body["spec"]["target"]["port"]
    assert _schema_problems(body) == []
    assert runspec.RunSpec.model_validate(body).spec.target.port is None


@pytest.mark.parametrize(
    ("field", "value", "schema_says", "model_says"),
    [
        ("repeats", 0, "0 is less than the minimum of 1", "greater than or equal to 1"),
        ("parallelism", 0, "0 is less than the minimum of 1", "greater than or equal to 1"),
        ("repeats", "three", "'three' is not of type 'integer'", "valid integer"),
    ],
)
def test_out_of_range_run_fields_are_refused(
    field: str, value: Any, schema_says: str, model_says: str
) -> None:
    body = _example("EvaluationRun")
    body["spec"][field] = value
    assert any(f"spec.{field}: {schema_says}" in p for p in _schema_problems(body))
    with pytest.raises(errors.SpecError, match=f"spec.{field}: .*{model_says}"):
        meta.parse(evaluationrun.EvaluationRun, body, what="EvaluationRun default/nightly")


@pytest.mark.parametrize(
    "image",
    ["Ghcr.io/UPPER/case", "ghcr.io/x/y:", "ghcr.io/x/y@sha256:short", "has space", "-lead/x", ""],
)
def test_bad_image_references_are_refused(image: str) -> None:
    body = _example("RunSpec")
    body["spec"]["target"]["image"] = image
    assert any(p.startswith("spec.target.image:") for p in _schema_problems(body))
    with pytest.raises(errors.SpecError, match=r"spec\.target\.image"):
        meta.parse(runspec.RunSpec, body, what="RunSpec default/triage")


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "library/busybox:1.36",
        "localhost:5000/agent",
        "registry.example.com:443/team/agent-x_y.z:v1.2.3-rc.1",
        "ghcr.io/x/y@sha256:" + "a" * 64,
        "ghcr.io/x/y:1@sha256:" + "0" * 64,
    ],
)
def test_good_image_references_are_accepted(image: str) -> None:
    body = _example("RunSpec")
    body["spec"]["target"]["image"] = image
    assert _schema_problems(body) == []
    assert runspec.RunSpec.model_validate(body).spec.target.image == image


def test_unknown_fields_are_refused_by_the_model_and_pruned_by_the_server() -> None:
    body = _example("EvaluationRun")
    body["spec"]["repeat"] = 3  # a typo of `repeats`
    assert "repeat" not in schemas.admit(SCHEMAS["EvaluationRun"], body)["spec"]
    with pytest.raises(errors.SpecError, match=r"spec\.repeat: Extra inputs are not permitted"):
        meta.parse(evaluationrun.EvaluationRun, body, what="EvaluationRun default/nightly")


IMMUTABLE = (
    "spec: spec is immutable but for suspend, parallelism, budget, requeueErrored: create a new "
    "EvaluationRun instead"
)


def test_an_evaluation_run_spec_is_immutable_but_what_steers_it() -> None:
    old = _example("EvaluationRun")
    new = copy.deepcopy(old)
    new["spec"]["repeats"] = 5
    schema = SCHEMAS["EvaluationRun"]
    assert schemas.problems(schema, schemas.admit(schema, new), schemas.admit(schema, old)) == [
        IMMUTABLE
    ]
    added = copy.deepcopy(old)
    added["spec"]["timeoutSeconds"] = 30  # a field left out stays left out
    assert schemas.problems(schema, schemas.admit(schema, added), schemas.admit(schema, old)) == [
        IMMUTABLE
    ]
    steered = copy.deepcopy(old)
    steered["spec"] |= {
        "suspend": True,
        "parallelism": 9,
        "requeueErrored": 1,
        "budget": {"maxTokens": 1000},
    }
    admitted = schemas.admit(schema, steered)
    assert schemas.problems(schema, admitted, schemas.admit(schema, old)) == []
    assert schemas.problems(schema, schemas.admit(schema, old), schemas.admit(schema, old)) == []


def test_a_full_status_round_trips_through_schema_and_model() -> None:
    body = _example("EvaluationRun")
    body["status"] = {
        "observedGeneration": 1,
        "phase": "Running",
        "counts": {"total": 6, "pending": 1, "running": 1, "passed": 3, "failed": 1, "errored": 0},
        "passRate": 0.75,
        "score": 0.8,
        "passAtK": 1.0,
        "tests": [{"id": "suite/test_triage.py::payment", "passed": 3, "failed": 1, "score": 0.8}],
        "runningCells": [
            {"test": "suite/test_triage.py::payment", "repeat": 1, "since": "2026-01-01T00:00:05Z"}
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "CellsRunning",
                "message": "2 of 6 cells left",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
        "startTime": "2026-01-01T00:00:00Z",
    }
    assert _schema_problems(body) == []
    parsed = evaluationrun.EvaluationRun.model_validate(body)
    assert parsed.wire()["status"] == body["status"] | {
        "counts": body["status"]["counts"]
        | {
            "queued": 0,
            "skipped": 0,
            "erroredByCause": {"agent": 0, "judge": 0, "test": 0, "infra": 0},
            "unverifiedClaims": 0,
            "conversations": 0,
            "goalMet": 0,
        },
        "tests": [body["status"]["tests"][0] | {"errored": 0, "erroredByAgent": 0, "agents": []}],
        "startTime": "2026-01-01T00:00:00Z",
        "agents": [],  # an agent matrix's side-by-side tallies: none for one agent
        "pairs": [],
    }


def test_the_per_test_summary_is_bounded() -> None:
    body = _example("EvaluationRun")
    body["status"] = {
        "tests": [{"id": f"t{i}"} for i in range(evaluationrun.MAX_TEST_SUMMARIES + 1)]
    }
    assert any("status.tests" in p and "too long" in p for p in _schema_problems(body))
    with pytest.raises(
        errors.SpecError, match=r"status\.tests: List should have at most 200 items"
    ):
        meta.parse(evaluationrun.EvaluationRun, body, what="EvaluationRun default/nightly")


def test_a_condition_status_must_be_true_false_or_unknown() -> None:
    with pytest.raises(pydantic.ValidationError, match="'True', 'False' or 'Unknown'"):
        meta.Condition.model_validate(
            {
                "type": "Ready",
                "status": "yes",
                "reason": "R",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        )


def test_the_api_group_is_named_once() -> None:
    """The models' apiVersion (a Literal: a type cannot read a constant) is apigroup's, and no
    other module of the operator spells the group: each reads apigroup."""
    for model in (runspec.RunSpec, evaluationrun.EvaluationRun):
        assert typing.get_args(model.model_fields["api_version"].annotation) == (
            apigroup.API_VERSION,
        )
    package = ROOT / "operator" / "agent_health" / "cluster"
    spelled = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "apigroup.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"[\"']agenthealth\.dev", line) and "api_version: Literal[" not in line
    ]
    assert not spelled, f"read apigroup.GROUP instead: {spelled}"
