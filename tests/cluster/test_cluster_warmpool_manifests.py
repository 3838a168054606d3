"""What the operator makes for a warm-pool RunSpec, as manifests: the pooled pod is a valid
Kubernetes pod (1.31 schemas) that names no cell, gives the target no token and its principals
only their own, and the claim, pool and template carry what Agent Sandbox reads."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import kubernetes_validate
import pytest
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import cellgateway, manifests, netpol, warmpool
from agent_health.ledger import assignment, keys
from test_cluster_isolation import EXAMPLE, _digests, _run

PINNED = "@sha256:" + "d" * 64
SETTINGS = manifests.Settings(
    controller_image=f"ghcr.io/agent-health/controller{PINNED}",
    gateway_image=f"ghcr.io/agent-health/gateway{PINNED}",
    ledger_url="configmap://{namespace}/ledger-{run}",
)


def _runspec(**isolation: Any) -> runspec.RunSpec:
    body = copy.deepcopy(EXAMPLE["RunSpec"])
    body["metadata"] |= {"uid": "4f1c2b7e-0000-4000-8000-000000000001", "generation": 3}
    body["spec"]["isolation"] = {"mode": "agentSandbox", "warmPool": {"replicas": 4}} | isolation
    return runspec.RunSpec.model_validate(body)


SECRET = "cell-keys-0123456789abcdef"


def _template(
    spec: runspec.RunSpec, *, secret: str = SECRET, agent: str | None = None, **settings: Any
) -> dict[str, Any]:
    chosen = dataclasses.replace(SETTINGS, **settings)
    return warmpool.template(
        spec, digests=_digests(spec), settings=chosen, secret=secret, agent=agent
    )


def _env(container: dict[str, Any]) -> str:
    return json.dumps(container.get("env") or [])


def test_the_pooled_pod_is_a_valid_pod_that_names_no_cell() -> None:
    spec = _runspec()
    template = _template(spec)
    pod_template = template["spec"]["podTemplate"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "triage-g3-abcde", "namespace": "default", **pod_template["metadata"]},
        "spec": pod_template["spec"],
    }
    assert kubernetes_validate.validate(pod, "1.31", strict=True) == "1.31"
    containers = {
        c["name"]: c for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]
    }
    gateway, controller, target = (
        containers["gateway"],
        containers["controller"],
        containers["target"],
    )
    assert "--assignment" in gateway["args"]
    for flag in ("--cell", "--run-id", "--test-id", "--key-file", "--ledger"):
        assert flag not in gateway["args"], flag
    assert controller["args"][:3] == ["cell", "--assignment", assignment.FILE]
    assert "activeDeadlineSeconds" not in pod["spec"]
    assert "AGENT_HEALTH_RUN_ID" not in _env(controller)
    # Tokens: the target none; the controller and the peer their own; the gateway all + the key.
    assert SECRET not in _env(target)
    assert (
        json.loads(_env(controller)).count(
            {
                "name": "AGENT_HEALTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "controller"}},
            }
        )
        == 1
    )
    peer = containers["peer-logs"]
    assert '"key": "peer-logs"' in _env(peer)
    assert '"key": "controller"' not in _env(peer)
    assert all(f'"key": "{k}"' in _env(gateway) for k in ("controller", "peer-logs", "sandbox-key"))
    # The assignment file: the gateway and the controller mount it, no one else.
    mounting = {
        name
        for name, c in containers.items()
        if any(m["name"] == cellgateway.ASSIGNMENT_VOLUME for m in c.get("volumeMounts") or [])
    }
    assert mounting == {"gateway", "controller"}
    images = [c["image"] for c in containers.values()]
    assert all("@sha256:" in image for image in images), images
    assert pod["metadata"]["labels"][warmpool.LABEL_POOL] == template["metadata"]["name"]


def test_the_template_generates_each_sandbox_its_own_tokens_and_key() -> None:
    template = _template(_runspec())
    (generated,) = template["spec"]["generatedSecrets"]
    assert generated["name"] == SECRET
    assert [d["key"] for d in generated["data"]] == ["controller", "peer-logs", "sandbox-key"]
    assert template["spec"]["envVarsInjectionPolicy"] == "Disallowed"
    assert template["metadata"]["ownerReferences"][0]["kind"] == "RunSpec"


def test_a_claim_is_the_cell_and_goes_with_its_sandbox() -> None:
    spec, run = _runspec(), _run()
    pool = _template(spec)["metadata"]["name"]
    claim = warmpool.claim(run, test_id="suite/t.py::a", repeat=1, pool=pool)
    assert claim["metadata"]["name"] == manifests.cell_name(
        run.metadata["name"], "suite/t.py::a", 1
    )
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "EvaluationRun"
    assert claim["spec"]["warmPoolRef"] == {"name": pool}
    assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Delete"
    assert "env" not in claim["spec"]  # an env would force a cold start


def test_an_agent_matrix_gets_a_pool_per_agent() -> None:
    body = _runspec().model_dump(mode="json", by_alias=True, exclude_none=True)
    target = body["spec"]["target"]
    body["spec"]["targets"] = [target | {"name": "fast"}, target | {"name": "slow"}]
    spec = runspec.RunSpec.model_validate(body)
    names = [_template(spec, agent=agent)["metadata"]["name"] for agent in (None, "fast", "slow")]
    assert [name.rsplit("-", 1)[0] for name in names] == [
        "triage-g3",
        "triage-fast-g3",
        "triage-slow-g3",
    ]
    assert warmpool.pool(spec, 4, name=names[1], agent="fast")["spec"] == {
        "replicas": 4,
        "sandboxTemplateRef": {"name": names[1]},
    }


def test_a_pools_name_is_its_templates_digest_whatever_its_secret_is_called() -> None:
    """The same RunSpec generation and settings: the same name, whichever random logical name
    the template's Secret got; another setting (an image, a RuntimeClass): another pool."""
    spec = _runspec()
    first, second = _template(spec), _template(spec, secret=warmpool.new_secret_name())
    assert first["metadata"]["name"] == second["metadata"]["name"]
    assert first["metadata"]["name"].startswith("triage-g3-")
    assert first["spec"] != second["spec"]  # the Secret's logical name differs
    digest = first["metadata"]["annotations"][warmpool.ANNOTATION_DIGEST]
    assert digest == warmpool.digest(first["spec"])
    other = _template(spec, gateway_image=f"ghcr.io/agent-health/gateway@sha256:{'e' * 64}")
    assert other["metadata"]["name"] != first["metadata"]["name"]
    assert warmpool.new_secret_name() != warmpool.new_secret_name()
    assert warmpool.secret_of(second) == second["spec"]["generatedSecrets"][0]["name"]
    assert warmpool.secret_of({"spec": {"generatedSecrets": [{"name": "cell-keys"}]}}) is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda t: t["spec"]["podTemplate"]["spec"]["initContainers"][-1]["env"].append(
                {"name": "X", "value": "y"}
            ),
            "spec.podTemplate.spec.initContainers[2].env",
        ),
        (
            lambda t: t["spec"]["podTemplate"]["spec"]["containers"][0].update(image="evil:1"),
            "spec.podTemplate.spec.containers[0].image",
        ),
        (
            lambda t: t["spec"].update(envVarsInjectionPolicy="Allowed"),
            "spec.envVarsInjectionPolicy",
        ),
        (lambda t: t["spec"].update(extra=True), "spec.extra"),
        (
            lambda t: t["metadata"]["annotations"].update({warmpool.ANNOTATION_DIGEST: "0"}),
            f"metadata.annotations[{warmpool.ANNOTATION_DIGEST}]",
        ),
    ],
)
def test_a_stored_template_that_differs_in_any_field_is_named_by_that_field(
    change: Any, field: str
) -> None:
    wanted = _template(_runspec())
    stored = copy.deepcopy(wanted)
    assert warmpool.difference(stored, wanted) is None
    change(stored)
    assert warmpool.difference(stored, wanted) == field


def test_a_stored_pool_is_the_operators_at_any_replicas_but_only_on_its_template() -> None:
    spec = _runspec()
    name = _template(spec)["metadata"]["name"]
    wanted = warmpool.pool(spec, 4, name=name)
    scaled = copy.deepcopy(wanted) | {"spec": wanted["spec"] | {"replicas": 0}}
    assert warmpool.difference(scaled, wanted) is None
    elsewhere = copy.deepcopy(wanted)
    elsewhere["spec"]["sandboxTemplateRef"] = {"name": "planted"}
    assert warmpool.difference(elsewhere, wanted) == "spec.sandboxTemplateRef.name"


@pytest.mark.parametrize(
    ("container", "source", "field"),
    [
        ("target", {"secretKeyRef": {"name": SECRET, "key": "sandbox-key"}}, "env"),
        ("target", {"secretKeyRef": {"name": SECRET, "key": "controller"}}, "env"),
        ("target", {"secretKeyRef": {"name": f"triage-g3-abcde-{SECRET}", "key": "x"}}, "env"),
        ("peer-logs", {"secretKeyRef": {"name": SECRET, "key": "controller"}}, "env"),
        ("controller", {"secretKeyRef": {"name": SECRET, "key": "sandbox-key"}}, "env"),
        ("target", {"secretRef": {"name": SECRET}}, "envFrom"),
    ],
)
def test_a_pod_that_gives_a_container_more_than_its_own_share_is_found(
    container: str, source: dict[str, Any], field: str
) -> None:
    """Whatever puts it there — a RunSpec, an edited template or sandbox — a container that
    would hold another principal's token or the sandbox key is named, field and item."""
    spec = _runspec()
    pod_spec = copy.deepcopy(_template(spec)["spec"]["podTemplate"]["spec"])
    assert warmpool.leak(pod_spec, spec, {SECRET}) is None
    every = [*pod_spec["initContainers"], *pod_spec["containers"]]
    chosen = next(c for c in every if c["name"] == container)
    if field == "envFrom":
        chosen["envFrom"] = [source]
    else:
        chosen["env"] = [*chosen.get("env", []), {"name": "STOLEN", "valueFrom": source}]
    found = warmpool.leak(pod_spec, spec, {SECRET})
    assert found is not None
    assert f"({container}).{field}[" in found, found


def test_a_volume_of_the_generated_secret_is_found() -> None:
    spec = _runspec()
    pod_spec = copy.deepcopy(_template(spec)["spec"]["podTemplate"]["spec"])
    pod_spec["volumes"].append({"name": "keys", "secret": {"secretName": "x-cell-keys-1"}})
    assert warmpool.leak(pod_spec, spec, {SECRET}) == (
        f"volumes[{len(pod_spec['volumes']) - 1}] (keys) mounts Secret x-cell-keys-1"
    )


def test_the_assignment_carries_the_run_key_derived_cell_key_wrapped() -> None:
    spec, run = _runspec(), _run()
    run_key, sandbox_key = b"r" * 44, b"s" * 43
    handed = warmpool.assignment(
        run, spec, SETTINGS, cell="c-1", test_id="t", repeat=0, attempt=1, agent=None,
        run_key=run_key, sandbox_key=sandbox_key,
    )  # fmt: skip
    assert handed.ledger_cell == "c-1.a1"
    assert keys.unwrap_cell_key(sandbox_key, "c-1.a1", handed.ledger_key) == keys.cell_key(
        run_key, "c-1.a1"
    )
    assert spec.spec.ledger is not None
    assert handed.ledger == spec.spec.ledger.url  # the run's (intake fills in {run})
    assert assignment.Assignment.parse(handed.annotation()) == handed


def test_the_pools_network_policy_is_valid_and_selects_the_pools_pods() -> None:
    spec = _runspec()
    fence = netpol.Fence(egress=(netpol.egress("0.0.0.0/0:443"),))
    policy = warmpool.network_policy(spec, fence, SETTINGS, "triage-g3")
    policy["metadata"]["namespace"] = "default"
    assert kubernetes_validate.validate(policy, "1.31", strict=True) == "1.31"
    assert policy["spec"]["podSelector"] == {"matchLabels": {warmpool.LABEL_POOL: "triage-g3"}}
    assert policy["spec"]["ingress"] == []


@pytest.mark.parametrize("mode", ["pod"])
def test_a_warm_pool_is_refused_without_agent_sandbox(mode: str) -> None:
    with pytest.raises(ValueError, match="warmPool is only allowed with mode agentSandbox"):
        _runspec(mode=mode)


def test_a_bound_sandbox_runs_the_pod_its_template_made_or_the_change_is_named() -> None:
    """The sandbox controller renames the generated Secret in env references (not a change);
    any other change to what runs or what it reaches is named, field by field."""
    spec = _runspec()
    made = _template(spec)["spec"]["podTemplate"]["spec"]
    concrete = f"triage-g3-abcde-{SECRET}"
    bound = json.loads(json.dumps(made).replace(f'"{SECRET}"', f'"{concrete}"'))
    assert bound != made
    assert warmpool.drift(bound, made, {concrete: SECRET}) is None
    swapped = copy.deepcopy(bound)
    target = next(n for n, c in enumerate(swapped["initContainers"]) if c["name"] == "target")
    swapped["initContainers"][target]["image"] = "registry.example/squatter:1"
    assert warmpool.drift(swapped, made, {concrete: SECRET}) == (
        f"initContainers[{target}] (target).image"
    )
    extra = copy.deepcopy(bound)
    extra["containers"].append({"name": "miner", "image": "registry.example/miner:1"})
    assert warmpool.drift(extra, made, {concrete: SECRET}) == "containers"
    mounted = copy.deepcopy(bound) | {"hostPID": True}
    assert warmpool.drift(mounted, made, {concrete: SECRET}) == "hostPID"
