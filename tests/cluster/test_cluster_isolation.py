"""Isolation settings do what they say: CPU and memory limits on every container, the
RuntimeClass an admin sets (a default for sandboxes, or one every cell must use), and no
cloud identity for any container but the gateway.

The attacks of issue #16 replayed here: a target that spins without a CPU limit starves its
node; the chart's ``sandbox.runtimeClassName`` was never read, so sandboxed cells ran on
runc; EKS's identity webhook gave the cells' role to every container, the target's included.
Each is shown refused twice: in the manifests the operator builds, and by the real operator
on the API emulator, configured by the arguments and environment the chart renders.
"""

from __future__ import annotations

import argparse
import copy
import decimal
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from agent_health.cluster import errors, options
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    admission,
    cellgateway,
    cellpod,
    discovery,
    manifests,
    resources,
)
from support.node import crds
from support.operator_support import Kubelet, cluster, kubelet, listing, until
from support.ship_support import helm, one, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text())}
PINNED = "@sha256:" + "d" * 64
SETTINGS = manifests.Settings(
    controller_image=f"ghcr.io/agent-health/controller{PINNED}",
    gateway_image=f"ghcr.io/agent-health/gateway{PINNED}",
    gateway_service_account="cell-gateway",
)
TEST_ID = "suite/rca.py::payment rca"
SANDBOX_CRD = crds.permissive("agents.x-k8s.io", "v1beta1", "Sandbox", "sandboxes")


def _runspec(**spec: Any) -> runspec.RunSpec:
    body = copy.deepcopy(EXAMPLE["RunSpec"])
    body["metadata"] |= {"uid": "4f1c2b7e-0000-4000-8000-000000000001", "generation": 1}
    body["spec"] |= spec
    return runspec.RunSpec.model_validate(body)


def _run() -> evaluationrun.EvaluationRun:
    body = copy.deepcopy(EXAMPLE["EvaluationRun"])
    body["metadata"] |= {"uid": "9a8b7c6d-0000-4000-8000-000000000002"}
    return evaluationrun.EvaluationRun.model_validate(body)


def _digests(spec: runspec.RunSpec) -> dict[str, str]:
    return {image: "sha256:" + "e" * 64 for image in spec.images()}


def _cell(spec: runspec.RunSpec, settings: manifests.Settings = SETTINGS) -> dict[str, Any]:
    return cellpod.cell(
        _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=settings
    )


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]
    return spec["podTemplate"]["spec"] if obj["kind"] == "Sandbox" else spec


def _containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def _limited(container: dict[str, Any]) -> None:
    """Both limits set, and no request above its limit (what the API server would refuse)."""
    block = container["resources"]
    for name in resources.LIMITED:
        assert name in block["limits"], (container["name"], block)
    for name, request in block.get("requests", {}).items():
        if name in block["limits"]:
            assert resources.quantity(request) <= resources.quantity(block["limits"][name])


# --- CPU and memory limits ----------------------------------------------------------------


@pytest.mark.parametrize("asked", [None, {}, {"requests": {"cpu": "2"}}], ids=str)
def test_every_container_of_a_cell_and_of_discovery_has_cpu_and_memory_limits(
    asked: dict[str, Any] | None,
) -> None:
    target = dict(EXAMPLE["RunSpec"]["spec"]["target"])
    if asked is None:
        target.pop("resources")
    else:
        target["resources"] = asked
    spec = _runspec(target=target)
    pod = _cell(spec)
    names = [c["name"] for c in _containers(_pod_spec(pod))]
    assert names == ["gateway", "peer-logs", "target", "controller"]
    for container in _containers(_pod_spec(pod)):
        _limited(container)
    box = discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS)
    for container in _containers(box["spec"]):
        _limited(container)


def test_a_request_above_the_default_limit_raises_the_limit_with_it() -> None:
    target = EXAMPLE["RunSpec"]["spec"]["target"] | {"resources": {"requests": {"cpu": "2"}}}
    container = {c["name"]: c for c in _containers(_pod_spec(_cell(_runspec(target=target))))}
    assert container["target"]["resources"]["limits"]["cpu"] == "2"
    assert container["target"]["resources"]["limits"]["memory"] == "1Gi"  # the default


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"limits": {"cpu": "64"}}, "spec.target.resources: limits.cpu 64 is above the "
         "operator's cap of 4"),
        ({"requests": {"memory": "9Gi"}}, "limits.memory 9Gi is above the operator's cap of 8Gi"),
        ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
         "requests.cpu 2 is above limits.cpu 1"),
        ({"limits": {"cpu": "lots"}}, "spec.target.resources.limits.cpu: 'lots' is not a "
         "Kubernetes quantity"),
        ({"claims": [{"name": "gpu"}]}, "claims not supported in a cell"),
    ],
)  # fmt: skip
def test_a_runspec_beyond_the_cap_is_refused_naming_the_field(
    asked: dict[str, Any], message: str
) -> None:
    target = EXAMPLE["RunSpec"]["spec"]["target"] | {"resources": asked}
    spec = _runspec(target=target)
    with pytest.raises(errors.SpecError, match="RunSpec default/triage") as caught:
        admission.admit(spec, SETTINGS)
    assert message in str(caught.value)
    with pytest.raises(errors.SpecError):  # and no pod is made of it either
        _cell(spec)


def test_an_agent_matrix_target_is_held_to_the_same_cap() -> None:
    named = EXAMPLE["RunSpec"]["spec"]["target"] | {"name": "candidate"}
    admission.admit(_runspec(targets=[named]), SETTINGS)
    greedy = named | {"resources": {"limits": {"cpu": "64"}}}
    with pytest.raises(errors.SpecError, match=r"spec\.targets\[candidate\]\.resources: limits"):
        admission.admit(_runspec(targets=[greedy]), SETTINGS)


def test_a_peer_has_its_own_resources_within_the_same_cap() -> None:
    peer = EXAMPLE["RunSpec"]["spec"]["peers"][0] | {"resources": {"limits": {"memory": "2Gi"}}}
    pod = _cell(_runspec(peers=[peer]))
    found = {c["name"]: c for c in _containers(_pod_spec(pod))}["peer-logs"]["resources"]
    assert found["limits"] == {"cpu": "500m", "memory": "2Gi"}
    greedy = peer | {"resources": {"limits": {"memory": "1Ti"}}}
    with pytest.raises(errors.SpecError, match=r"spec\.peers\[logs\]\.resources"):
        admission.admit(_runspec(peers=[greedy]), SETTINGS)


def test_the_admin_sets_defaults_and_the_cap() -> None:
    chosen = resources.parse('{"max": {"cpu": 16}, "target": {"limits": {"cpu": "8"}}}')
    assert chosen.max == {"cpu": "16", "memory": "8Gi"}  # a key left out keeps its default
    assert chosen.target.limits == {"cpu": "8", "memory": "1Gi"}
    settings = manifests.Settings(
        controller_image=SETTINGS.controller_image,
        gateway_image=SETTINGS.gateway_image,
        resources=chosen,
    )
    target = dict(EXAMPLE["RunSpec"]["spec"]["target"])
    target.pop("resources")
    container = {
        c["name"]: c for c in _containers(_pod_spec(_cell(_runspec(target=target), settings)))
    }
    assert container["target"]["resources"]["limits"]["cpu"] == "8"
    admission.admit(_runspec(target=target | {"resources": {"limits": {"cpu": "12"}}}), settings)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "expected a JSON object"),
        ("{not json", "not JSON"),
        ('{"gateway": {"limits": {"cpu": "fast"}}}', "gateway.limits.cpu: 'fast' is not a"),
        ('{"target": {"limits": {"cpu": null}}}', "target.limits.cpu"),
        ('{"sidecar": {}}', "sidecar"),
    ],
)
def test_a_malformed_cell_resources_flag_names_the_flag_and_field(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="--cell-resources") as caught:
        resources.parse(text)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("2", "2"), ("1.5", "1.5"), ("256Mi", "268435456"), ("1e3", "1000")],
)
def test_quantities_read_as_the_api_server_reads_them(text: str, value: str) -> None:
    assert resources.quantity(text) == decimal.Decimal(value)


@pytest.mark.parametrize("text", ["-1", "1Gi ", "abc", ""])
def test_a_quantity_kubernetes_would_not_read_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        resources.quantity(text)


# --- cloud identity -------------------------------------------------------------------------


def test_the_cells_role_reaches_the_gateway_alone() -> None:
    pod = _cell(_runspec(isolation={"mode": "pod"}))
    skipped = pod["metadata"]["annotations"][manifests.SKIP_CONTAINERS].split(",")
    assert skipped == ["peer-logs", "target", "controller"]
    assert {c["name"] for c in _containers(_pod_spec(pod))} - set(skipped) == {cellgateway.NAME}
    # A Sandbox carries it on the pod it makes.
    box = _cell(_runspec(isolation={"mode": "agentSandbox", "runtimeClassName": "gvisor"}))
    template = box["spec"]["podTemplate"]["metadata"]["annotations"]
    assert template[manifests.SKIP_CONTAINERS] == "peer-logs,target,controller"


def test_the_discovery_pod_gets_no_cloud_identity() -> None:
    spec = _runspec()
    pod = discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS)
    assert pod["metadata"]["annotations"] == {manifests.SKIP_CONTAINERS: discovery.CONTAINER}


# --- RuntimeClass ---------------------------------------------------------------------------


def _settings(**more: Any) -> manifests.Settings:
    return manifests.Settings(
        controller_image=SETTINGS.controller_image, gateway_image=SETTINGS.gateway_image, **more
    )


def test_the_sandbox_default_runtime_class_applies_to_sandboxes_that_name_none() -> None:
    settings = _settings(sandbox_runtime_class="gvisor")
    unnamed = _cell(_runspec(isolation={"mode": "agentSandbox"}), settings)
    assert _pod_spec(unnamed)["runtimeClassName"] == "gvisor"
    named = _cell(
        _runspec(isolation={"mode": "agentSandbox", "runtimeClassName": "kata"}), settings
    )
    assert _pod_spec(named)["runtimeClassName"] == "kata"  # the RunSpec's own choice
    plain = _cell(_runspec(isolation={"mode": "pod"}), settings)
    assert "runtimeClassName" not in _pod_spec(plain)


def test_a_required_runtime_class_runs_every_cell_and_discovery_pod() -> None:
    settings = _settings(runtime_class="gvisor")
    for isolation in ({"mode": "pod"}, {"mode": "agentSandbox"}):
        spec = _runspec(isolation=isolation)
        admission.admit(spec, settings)
        assert _pod_spec(_cell(spec, settings))["runtimeClassName"] == "gvisor"
        box = discovery.discovery_pod(spec, digests=_digests(spec), settings=settings)
        assert box["spec"]["runtimeClassName"] == "gvisor"


def test_a_runspec_choosing_another_runtime_class_is_refused() -> None:
    spec = _runspec(isolation={"mode": "agentSandbox", "runtimeClassName": "runc"})
    with pytest.raises(errors.SpecError, match=r"spec\.isolation\.runtimeClassName: 'runc'"):
        admission.admit(spec, _settings(runtime_class="gvisor"))
    admission.admit(_runspec(), _settings(runtime_class="gvisor"))  # naming the same is fine


def _admitted_by_chart(policy: dict[str, Any], body: dict[str, Any]) -> tuple[bool, str]:
    """What the API server would say of ``body`` under the chart's admission policy: its CEL
    expressions evaluated as Kubernetes would (``object`` is the RunSpec)."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(body)}
    for rule in policy["spec"]["validations"]:
        if not env.program(env.compile(rule["expression"])).evaluate(activation):
            message = env.program(env.compile(rule["messageExpression"])).evaluate(activation)
            return False, str(message)
    return True, ""


@pytest.mark.parametrize(
    "isolation",
    [None, {"mode": "pod"}, {"mode": "agentSandbox"},
     {"mode": "agentSandbox", "runtimeClassName": "gvisor"},
     {"mode": "agentSandbox", "runtimeClassName": "runc"}],
    ids=str,
)  # fmt: skip
def test_a_required_runtime_class_is_also_refused_at_admission_as_the_operator_refuses_it(
    isolation: dict[str, Any] | None,
) -> None:
    """With cells.runtimeClassName set, `kubectl apply` of a RunSpec naming another
    RuntimeClass is refused by the API server, naming the field: the same verdict the
    operator gives when it resolves the RunSpec."""
    documents = render(
        helm(), None, "--set", "cells.runtimeClassName=gvisor",
        "--set", "operator.watchNamespace=team-a",
    )  # fmt: skip
    policy = one(documents, "ValidatingAdmissionPolicy")
    binding = one(documents, "ValidatingAdmissionPolicyBinding")
    for document in (policy, binding):
        assert kubernetes_validate.validate(document, "1.31", strict=True) == "1.31"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
    ]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["agenthealth.dev"], ["runspecs"])
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}

    body = copy.deepcopy(EXAMPLE["RunSpec"])
    body["spec"].pop("isolation", None)
    if isolation is not None:
        body["spec"]["isolation"] = isolation
    admitted, message = _admitted_by_chart(policy, body)
    try:
        admission.admit(runspec.RunSpec.model_validate(body), _settings(runtime_class="gvisor"))
        operator_admits = True
    except errors.SpecError:
        operator_admits = False
    assert admitted is operator_admits
    assert admitted is ((isolation or {}).get("runtimeClassName") in (None, "gvisor"))
    if not admitted:
        assert message.startswith("spec.isolation.runtimeClassName: runc is not allowed")
        assert "RuntimeClass gvisor" in message


def test_without_a_required_runtime_class_the_chart_renders_no_admission_policy() -> None:
    policies = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert not {d["kind"] for d in render(helm())} & policies
    # A cluster before Kubernetes 1.30 turns it off; the operator still refuses (above).
    older = render(
        helm(), None, "--set", "cells.runtimeClassName=gvisor",
        "--set", "cells.admissionPolicy=false",
    )  # fmt: skip
    assert not {d["kind"] for d in older} & policies
    deployment = one(older, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--cell-runtime-class=gvisor" in deployment["args"]


def _parse(argv: list[str], environ: dict[str, str]) -> options.Options:
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, environ)
    images = ["--controller-image=c@sha256:" + "a" * 64, "--gateway-image=g@sha256:" + "b" * 64]
    return options.from_args(parser.parse_args([*images, *argv]))


def test_the_operator_reads_the_runtime_classes_and_resources_from_its_flags_and_env() -> None:
    chosen = _parse([], {"AGENT_HEALTH_SANDBOX_RUNTIME_CLASS": "gvisor"})
    assert (chosen.sandbox_runtime_class, chosen.cell_runtime_class) == ("gvisor", None)
    chosen = _parse(["--cell-runtime-class=gvisor", '--cell-resources={"max": {"cpu": 2}}'], {})
    assert chosen.cell_runtime_class == "gvisor"
    assert chosen.cell_resources.max["cpu"] == "2"
    with pytest.raises(ValueError, match="differs from --cell-runtime-class gvisor"):
        _parse(["--cell-runtime-class=gvisor", "--sandbox-runtime-class=kata"], {})


# --- the real operator, configured as the chart renders it ----------------------------------


def _chart_options(*values: str) -> tuple[list[str], dict[str, str]]:
    """The operator's arguments and literal environment as the chart renders them."""
    deployment = one(render(helm(), None, *values), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return container["args"][1:], env


@pytest.mark.slow
async def test_the_operator_as_the_chart_configures_it_limits_classes_and_roles() -> None:
    argv, env = _chart_options(
        "--set", "sandbox.runtimeClassName=gvisor", "--set", "cells.resources.max.cpu=2"
    )
    wanted = {a.split("=")[0] for a in argv}
    assert {"--cell-resources", "--gateway-service-account"} <= wanted
    chart = _parse([a for a in argv if a.startswith(("--cell-", "--gateway-service-account"))], env)
    assert chart.sandbox_runtime_class == "gvisor"  # the value the chart always rendered
    tests = listing((TEST_ID, ["category:RCA"]))
    async with cluster() as k8s:
        answer = await k8s.client.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=SANDBOX_CRD
        )
        assert answer.status_code == 201, answer.text
        fake = Kubelet(
            k8s, tests, "configmap://default/triage-ledger-{run}", outcome=lambda _: "hold"
        )
        configured = {
            "sandboxes": True,
            "cell_resources": chart.cell_resources,
            "sandbox_runtime_class": chart.sandbox_runtime_class,
            "gateway_service_account": chart.gateway_service_account,
        }
        async with kubelet(fake), k8s.operator(**configured):
            greedy, run = k8s.example(ledger="configmap://default/triage-ledger-{run}")
            greedy["metadata"]["name"] = "greedy"
            greedy["spec"]["isolation"] = {"mode": "pod"}
            greedy["spec"]["target"]["resources"] = {"limits": {"cpu": "3"}}
            await k8s.apply(greedy)
            refused = await until(lambda: _condition(k8s.runspec("greedy"), "Resolved"), "refusal")
            assert (refused["status"], refused["reason"]) == ("False", "NotAllowed")
            assert (
                "spec.target.resources: limits.cpu 3 is above the operator's cap of 2"
                in (refused["message"])
            )
            assert not k8s.pods("discovery")  # refused before any pod ran its suite

            runspec, run = k8s.example(ledger="configmap://default/triage-ledger-{run}")
            runspec["spec"]["isolation"] = {"mode": "agentSandbox"}  # names no RuntimeClass
            run["spec"] |= {"repeats": 1, "selection": {}}
            await k8s.apply(runspec)
            await k8s.apply(run)
            boxes = await until(lambda: _sandboxes(k8s), "a sandboxed cell")
        (discovered,) = k8s.pods("discovery")
    for container in _containers(discovered["spec"]):
        _limited(container)
    assert discovered["metadata"]["annotations"][manifests.SKIP_CONTAINERS] == "discover"
    for box in boxes:
        pod_spec = box["spec"]["podTemplate"]["spec"]
        assert pod_spec["runtimeClassName"] == "gvisor"
        # A ConfigMap ledger's cells run as no identity (the gateway logs its records, the
        # operator stores them); the chart's gateway account (an object store's cloud
        # identity) serves the other ledgers.
        assert "serviceAccountName" not in pod_spec
        for container in _containers(pod_spec):
            _limited(container)
        skipped = box["spec"]["podTemplate"]["metadata"]["annotations"][manifests.SKIP_CONTAINERS]
        assert set(skipped.split(",")) == {c["name"] for c in _containers(pod_spec)} - {"gateway"}


@pytest.mark.slow
async def test_a_required_runtime_class_refuses_a_runspec_that_names_another() -> None:
    tests = listing((TEST_ID, ["category:RCA"]))
    async with cluster() as k8s:
        fake = Kubelet(
            k8s, tests, "configmap://default/triage-ledger-{run}", outcome=lambda _: "hold"
        )
        async with kubelet(fake), k8s.operator(cell_runtime_class="gvisor"):
            runc, run = k8s.example(ledger="configmap://default/triage-ledger-{run}")
            runc["spec"]["isolation"] = {"mode": "agentSandbox", "runtimeClassName": "runc"}
            await k8s.apply(runc)
            await k8s.apply(run)
            refused = await until(lambda: _condition(k8s.runspec("triage"), "Resolved"), "refusal")
            failed = await until(
                lambda: (
                    k8s.run("triage-nightly").get("status", {}).get("phase") == "Failed"
                    and k8s.run("triage-nightly")
                ),
                "the run to fail",
            )
            plain, _ = k8s.example(ledger="configmap://default/triage-ledger-{run}")
            plain["metadata"]["name"] = "plain"
            await k8s.apply(plain)
            await until(lambda: k8s.pods("discovery"), "a discovery pod")
    assert (refused["status"], refused["reason"]) == ("False", "NotAllowed")
    assert "spec.isolation.runtimeClassName: 'runc' is not allowed" in refused["message"]
    assert "--cell-runtime-class" in refused["message"]
    assert "runtimeClassName" in str(failed["status"]["conditions"])
    assert not k8s.pods("cell")
    (pod,) = k8s.pods("discovery")
    assert pod["spec"]["runtimeClassName"] == "gvisor"


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in body.get("status", {}).get("conditions", []):
        if condition["type"] == kind and condition["status"] != "Unknown":
            return dict(condition)
    return None


def _sandboxes(k8s: Any) -> list[dict[str, Any]]:
    kind = k8s.emulator.store.kinds[("agents.x-k8s.io", "sandboxes")]
    return list(k8s.emulator.store.list(kind, "default", lambda _labels: True))
