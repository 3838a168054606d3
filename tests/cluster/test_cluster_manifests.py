"""Cell, discovery, sandbox and network-policy manifests: valid for Kubernetes 1.31, restricted,
secrets mounted only where they belong, stable names, every image by digest."""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    cellgateway,
    cellpod,
    cellsecrets,
    discovery,
    manifests,
    netpol,
    sandbox,
)
from agent_health.gateway import admin

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text())}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
KUBERNETES = "1.31"
TEST_ID = "rca/payment.test.py::payment RCA names the DB outage"


def _digest(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"


JUDGE = manifests.JudgeService(
    url="http://agent-health-judge.agent-health.svc:8080",
    namespace="agent-health",
    pod_labels={"app.kubernetes.io/name": "agent-health-operator"},
    port=8081,
)
SETTINGS = manifests.Settings(
    controller_image=f"ghcr.io/agent-health/controller@{_digest('controller')}",
    gateway_image=f"ghcr.io/agent-health/gateway@{_digest('gateway')}",
    judge=JUDGE,
    gateway_service_account="ledger-writer",
    ledger_credentials_secret="ledger-s3",
    image_pull_secrets=("regcred",),
)


SANDBOXED = {"mode": "agentSandbox", "runtimeClassName": "gvisor"}
OTLP = {
    "endpoint": "http://otel-collector.observability.svc:4318",
    "headersSecretRef": {"name": "otlp-headers", "key": "headers"},
    "captureContent": True,
}


def _runspec(**spec: Any) -> runspec.RunSpec:
    body = copy.deepcopy(EXAMPLE["RunSpec"])
    body["metadata"] |= {"uid": "4f1c2b7e-0000-4000-8000-000000000001", "generation": 3}
    body["spec"] |= spec
    return runspec.RunSpec.model_validate(body)


def _run(name: str = "triage-nightly", **spec: Any) -> evaluationrun.EvaluationRun:
    body = copy.deepcopy(EXAMPLE["EvaluationRun"])
    body["metadata"] |= {"name": name, "uid": "9a8b7c6d-0000-4000-8000-000000000002"}
    body["spec"] |= spec
    return evaluationrun.EvaluationRun.model_validate(body)


def _digests(spec: runspec.RunSpec) -> dict[str, str]:
    return {image: _digest(image) for image in spec.images()}


def _pod(
    run: evaluationrun.EvaluationRun | None = None,
    spec: runspec.RunSpec | None = None,
    settings: manifests.Settings = SETTINGS,
    test_id: str = TEST_ID,
    repeat: int = 0,
    attempt: int = 0,
    place: cellsecrets.Place | None = None,
) -> dict[str, Any]:
    spec = spec or _runspec()
    return cellpod.cell_pod(
        run or _run(),
        spec,
        test_id=test_id,
        repeat=repeat,
        digests=_digests(spec),
        settings=settings,
        attempt=attempt,
        place=place,
    )


def _containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers", [])
    yield from pod_spec["containers"]


def _by_name(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _containers(pod_spec)}


def _mounted_by(pod_spec: dict[str, Any], volume: str) -> set[str]:
    return {
        c["name"]
        for c in _containers(pod_spec)
        if any(m["name"] == volume for m in c.get("volumeMounts", []))
    }


def _volumes_of_secret(pod_spec: dict[str, Any], secret: str) -> list[dict[str, Any]]:
    return [v for v in pod_spec["volumes"] if v.get("secret", {}).get("secretName") == secret]


def _arg(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


# --- the restricted Pod Security Standard, as the admission controller checks it --------

_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_problems(pod_spec: dict[str, Any]) -> list[str]:
    """Violations of the restricted Pod Security Standard (v1.31), plus our own stricter rules."""
    found = []
    pod_context = pod_spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(field):
            found.append(f"pod: {field}")
    for volume in pod_spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {kinds}")
    if pod_context.get("runAsUser") == 0:
        found.append("pod: runAsUser 0")
    for container in _containers(pod_spec):
        name, context = container["name"], container.get("securityContext", {})
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation not false")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities not dropping ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities added")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot not true")
        if not context.get("runAsUser", pod_context.get("runAsUser")):
            found.append(f"{name}: runAsUser not set non-zero")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile {seccomp}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        if any(p.get("hostPort") for p in container.get("ports", [])):
            found.append(f"{name}: hostPort")
        if context.get("readOnlyRootFilesystem") is not True:
            found.append(f"{name}: root filesystem writable")
        if not any(m["mountPath"] == "/tmp" for m in container.get("volumeMounts", [])):
            found.append(f"{name}: no scratch /tmp")
    return found


# --- validity --------------------------------------------------------------------------


def _variants() -> dict[str, dict[str, Any]]:
    image_suite = {"suite": {"image": "ghcr.io/acme/triage-suite:2.0"}, "isolation": {}}
    no_peers = {"peers": [], "ledger": None, "judge": None}
    bare = manifests.Settings(
        controller_image=SETTINGS.controller_image,
        gateway_image=SETTINGS.gateway_image,
        ledger_url="s3://ledgers/cells",
    )
    return {
        "example": _pod(),
        "suite-image": _pod(spec=_runspec(**image_suite)),
        "no-peers-bare-operator": _pod(spec=_runspec(**no_peers), settings=bare),
        "skip-judge": _pod(run=_run(skipJudge=True)),
        "otlp": _pod(spec=_runspec(otlp=OTLP)),
    }


@pytest.mark.parametrize(("variant", "pod"), _variants().items(), ids=list(_variants()))
def test_cell_pods_validate_strictly_against_kubernetes(variant: str, pod: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(pod, KUBERNETES, strict=True) == KUBERNETES


def test_kubernetes_validate_does_reject_a_misspelt_pod_field() -> None:
    pod = _pod()
    pod["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicyy"):
        kubernetes_validate.validate(pod, KUBERNETES, strict=True)


def test_the_other_objects_validate_strictly_against_kubernetes() -> None:
    run, spec = _run(), _runspec()
    tokens = {p: f"token-{p}" for p in cellsecrets.principals(spec)}
    objects = [
        cellsecrets.token_secret(
            run, spec, test_id=TEST_ID, repeat=0, tokens=tokens, ledger_key=b"k" * 44
        ),
        cellsecrets.ledger_key_secret(run, b"k" * 32),
        discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS),
        netpol.network_policy(
            run, settings=SETTINGS, egress=[netpol.Egress("10.0.0.1/32", (443,), excluding=())]
        ),
    ]
    for manifest in objects:
        assert kubernetes_validate.validate(manifest, KUBERNETES, strict=True) == KUBERNETES


# Derived from kubernetes-sigs/agent-sandbox api/v1beta1/sandbox_types.go (Sandbox,
# SandboxSpec = SandboxBlueprint + Lifecycle + operatingMode, PodTemplate, PodMetadata).
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SANDBOX_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"enum": ["agents.x-k8s.io/v1beta1"]},
        "kind": {"enum": ["Sandbox"]},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["podTemplate"],
            "additionalProperties": False,
            "properties": {
                "podTemplate": {
                    "type": "object",
                    "required": ["spec"],
                    "additionalProperties": False,
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"labels": _STRING_MAP, "annotations": _STRING_MAP},
                        },
                        "spec": {"type": "object", "required": ["containers"]},
                    },
                },
                "volumeClaimTemplates": {"type": "array", "items": {"type": "object"}},
                "service": {"type": "boolean"},
                "shutdownTime": {"type": "string", "format": "date-time"},
                "shutdownPolicy": {"enum": ["Delete", "Retain"]},
                "operatingMode": {"enum": ["Running", "Suspended"]},
            },
        },
    },
}


def test_a_sandboxed_cell_matches_the_agent_sandbox_crd_and_embeds_a_valid_pod() -> None:
    spec = _runspec(isolation=SANDBOXED)
    assert spec.spec.isolation.mode == "agentSandbox"
    box = cellpod.cell(
        _run(), spec, test_id=TEST_ID, repeat=1, digests=_digests(spec), settings=SETTINGS
    )
    jsonschema.Draft7Validator(SANDBOX_SCHEMA).validate(box)
    template = box["spec"]["podTemplate"]
    assert template["spec"]["runtimeClassName"] == "gvisor"
    wrapped = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**box["metadata"], **template["metadata"]},
        "spec": template["spec"],
    }
    assert kubernetes_validate.validate(wrapped, KUBERNETES, strict=True) == KUBERNETES
    assert restricted_problems(template["spec"]) == []
    assert template["metadata"]["labels"] == box["metadata"]["labels"]


def test_a_pod_isolated_cell_is_the_pod_itself() -> None:
    spec = _runspec(isolation={"mode": "pod"})
    made = cellpod.cell(
        _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=SETTINGS
    )
    assert made == _pod(spec=spec)
    assert "runtimeClassName" not in made["spec"]


def test_a_sandboxed_cell_takes_the_operators_runtime_class_when_its_runspec_names_none() -> None:
    spec = _runspec(isolation={"mode": "agentSandbox"})
    chosen = dataclasses.replace(SETTINGS, sandbox_runtime_class="kata")
    box = cellpod.cell(
        _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=chosen
    )
    assert box["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "kata"
    named = _runspec(isolation=SANDBOXED)  # names gvisor: the RunSpec wins
    box = cellpod.cell(
        _run(), named, test_id=TEST_ID, repeat=0, digests=_digests(named), settings=chosen
    )
    assert box["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "gvisor"
    plain = cellpod.cell(
        _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=SETTINGS
    )
    assert "runtimeClassName" not in plain["spec"]["podTemplate"]["spec"]


def test_sandbox_wrapping_leaves_the_pod_untouched() -> None:
    pod = _pod()
    before = copy.deepcopy(pod)
    sandbox.sandbox(pod, runtime_class_name="kata")
    assert pod == before


# --- security --------------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "pod"), _variants().items(), ids=list(_variants()))
def test_every_container_is_restricted(variant: str, pod: dict[str, Any]) -> None:
    assert restricted_problems(pod["spec"]) == []
    assert pod["spec"]["securityContext"]["runAsUser"] != 0


def test_the_restricted_check_does_catch_a_violation() -> None:
    pod = _pod()
    target = _by_name(pod["spec"])["target"]
    target["securityContext"]["allowPrivilegeEscalation"] = True
    del target["securityContext"]["capabilities"]
    pod["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    problems = restricted_problems(pod["spec"])
    assert "target: allowPrivilegeEscalation not false" in problems
    assert "target: capabilities not dropping ALL" in problems
    assert any(p.startswith("volume host") for p in problems)


def test_the_pod_has_no_api_token_no_shared_processes_no_host_namespaces() -> None:
    spec = _pod()["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["shareProcessNamespace"] is False
    assert spec["enableServiceLinks"] is False
    assert (spec["hostNetwork"], spec["hostPID"], spec["hostIPC"]) == (False, False, False)
    assert spec["restartPolicy"] == "Never"


def test_the_ledger_key_and_credentials_reach_only_the_gateway() -> None:
    pod = _pod()
    spec = pod["spec"]
    assert not _volumes_of_secret(spec, cellsecrets.ledger_key_secret_name("triage-nightly"))
    own = _volumes_of_secret(spec, cellsecrets.token_secret_name(pod["metadata"]["name"]))
    [key_volume] = [v for v in own if v["secret"]["items"][0]["key"] == "ledger-key"]
    assert key_volume["secret"]["items"] == [{"key": "ledger-key", "path": "key"}]
    assert _mounted_by(spec, key_volume["name"]) == {"gateway"}  # the cell's key, not the run's
    assert [c["name"] for c in _containers(spec) if "envFrom" in c] == ["gateway"]
    assert _by_name(spec)["gateway"]["envFrom"] == [{"secretRef": {"name": "ledger-s3"}}]
    assert _mounted_by(spec, cellgateway.SERVICE_ACCOUNT_VOLUME) == {"gateway"}
    assert spec["serviceAccountName"] == "ledger-writer"


def test_each_token_reaches_only_its_owner_and_the_gateway() -> None:
    spec = _runspec(
        peers=[
            {"name": "logs", "image": "ghcr.io/acme/logs:1", "port": 9000},
            {"name": "user", "image": "ghcr.io/acme/user-sim:1", "port": 9100},
        ]
    )
    pod = _pod(spec=spec)
    cell = pod["metadata"]["name"]
    volumes = _volumes_of_secret(pod["spec"], cellsecrets.token_secret_name(cell))
    owners = {v["secret"]["items"][0]["key"]: _mounted_by(pod["spec"], v["name"]) for v in volumes}
    assert owners == {
        "controller": {"controller", "gateway"},
        "peer-logs": {"peer-logs", "gateway"},
        "peer-user": {"peer-user", "gateway"},
        "ledger-key": {"gateway"},
    }
    assert all(len(v["secret"]["items"]) == 1 for v in volumes), "one token per volume"


def test_from_the_runs_shared_secret_a_pod_mounts_its_own_items_and_no_others() -> None:
    """Many cells' tokens and keys in one Secret: each container still gets one file, its own."""
    cell = manifests.cell_name("triage-nightly", TEST_ID, 0)
    place = cellsecrets.Place.shared("triage-nightly", 0, cell)
    pod = _pod(place=place)
    assert cellsecrets.place_of(pod) == place
    volumes = _volumes_of_secret(pod["spec"], cellsecrets.shared_secret_name("triage-nightly", 0))
    owners = {v["secret"]["items"][0]["key"]: _mounted_by(pod["spec"], v["name"]) for v in volumes}
    assert owners == {
        f"{cell}.controller": {"controller", "gateway"},
        f"{cell}.peer-logs": {"peer-logs", "gateway"},
        f"{cell}.ledger-key": {"gateway"},
    }
    assert all(len(v["secret"]["items"]) == 1 for v in volumes), "one item per volume"
    assert not _volumes_of_secret(pod["spec"], cellsecrets.token_secret_name(cell))
    target = _by_name(pod["spec"])["target"]
    assert [m["mountPath"] for m in target["volumeMounts"]] == ["/tmp"]


def test_the_target_mounts_nothing_but_its_scratch_and_holds_no_agent_health_secret() -> None:
    target = _by_name(_pod()["spec"])["target"]
    assert [m["mountPath"] for m in target["volumeMounts"]] == ["/tmp"]
    assert not any(e["name"] == "AGENT_HEALTH_TOKEN_FILE" for e in target["env"])
    assert "envFrom" not in target


def test_a_principal_finds_its_token_where_its_env_says() -> None:
    containers = _by_name(_pod()["spec"])
    for name in ("controller", "peer-logs"):
        env = {e["name"]: e.get("value") for e in containers[name]["env"]}
        directory = env["AGENT_HEALTH_TOKEN_FILE"].rsplit("/", 1)[0]
        assert directory in {m["mountPath"] for m in containers[name]["volumeMounts"]}


# --- wiring ----------------------------------------------------------------------------


def test_the_gateway_starts_first_and_every_sidecar_is_native() -> None:
    spec = _pod()["spec"]
    # Peers before the target: the target cannot bind a peer's port and answer as that peer.
    assert [c["name"] for c in spec["initContainers"]] == ["gateway", "peer-logs", "target"]
    assert all(c["restartPolicy"] == "Always" for c in spec["initContainers"])
    assert [c["name"] for c in spec["containers"]] == ["controller"]
    assert "restartPolicy" not in spec["containers"][0]


def test_the_gateway_is_probed_inside_its_container_over_its_admin_socket() -> None:
    gateway = _by_name(_pod()["spec"])["gateway"]
    assert "--health" not in gateway["args"]  # no listener beyond the pod's loopback
    assert _arg(gateway["args"], "--admin") == [f"unix:{cellgateway.ADMIN_SOCKET}"]
    command = gateway["startupProbe"]["exec"]["command"]
    assert command == ["python", "-I", "-S", "-c", admin.PROBE, cellgateway.ADMIN_SOCKET]
    assert "readinessProbe" not in gateway
    assert "livenessProbe" not in gateway
    assert "ports" not in gateway


def test_the_controller_and_the_gateway_alone_share_the_sockets_directory() -> None:
    spec = _pod()["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == cellgateway.SOCKET_VOLUME]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
    assert _mounted_by(spec, cellgateway.SOCKET_VOLUME) == {"gateway", "controller"}
    controller = _by_name(spec)["controller"]
    env = {e["name"]: e.get("value") for e in controller["env"]}
    sockets = {k: v for k, v in env.items() if k.endswith("_SOCKET")}
    assert sockets == {
        "AGENT_HEALTH_AGENT_SOCKET": cellgateway.AGENT_SOCKET,
        "AGENT_HEALTH_GATEWAY_ADMIN_SOCKET": cellgateway.ADMIN_SOCKET,
        "AGENT_HEALTH_JUDGE_SOCKET": cellgateway.JUDGE_SOCKET,
    }
    assert all(path.startswith(cellgateway.SOCKET_DIR + "/") for path in sockets.values())


def test_gateway_routes_connect_every_caller_to_its_callee() -> None:
    pod = _pod()
    containers = _by_name(pod["spec"])
    gateway = containers["gateway"]
    routes = _arg(gateway["args"], "--route")
    plan = cellgateway.ports(_runspec())
    assert routes == [
        f"principal=controller,to=target,listen=unix:{cellgateway.AGENT_SOCKET},"
        "upstream=http://127.0.0.1:8080",
        f"principal=controller,to=judge,listen=unix:{cellgateway.JUDGE_SOCKET},"
        f"upstream={JUDGE.url}",
        f"principal=target,to=peer:logs,listen=127.0.0.1:{plan.peers['logs']},"
        "upstream=http://127.0.0.1:9000",
        f"principal=peer:logs,to=target,listen=127.0.0.1:{plan.peer_target['logs']},"
        "upstream=http://127.0.0.1:8080",
    ]
    tokens = dict(t.split("=", 1) for t in _arg(gateway["args"], "--token"))
    assert tokens == {
        "controller": "/var/run/agent-health/tokens/controller/token",
        "peer:logs": "/var/run/agent-health/tokens/peer-logs/token",
    }
    mounts = {m["mountPath"] for m in gateway["volumeMounts"]}
    assert {path.rsplit("/", 1)[0] for path in tokens.values()} <= mounts
    assert _arg(gateway["args"], "--key-file")[0].rsplit("/", 1)[0] in mounts
    # A ConfigMap ledger: the gateway logs its records for the operator, and names no store.
    assert "--ledger-log" in gateway["args"]
    assert _arg(gateway["args"], "--ledger") == _arg(gateway["args"], "--spool") == []
    assert _arg(gateway["args"], "--cell") == [pod["metadata"]["name"]]
    assert _arg(gateway["args"], "--run-id") == [pod["metadata"]["name"]]
    assert _arg(gateway["args"], "--test-id") == [TEST_ID]
    images = dict(i.split("=", 1) for i in _arg(gateway["args"], "--image"))
    assert set(images) == {"target", "peer-logs", "controller"}
    assert all("@sha256:" in image for image in images.values())


def test_the_real_gateway_accepts_the_cell_command_line(tmp_path: Any) -> None:
    import argparse

    from agent_health.gateway import command

    gateway = _by_name(_pod()["spec"])["gateway"]
    assert gateway["command"] == ["agent-health"]
    assert gateway["args"][0] == "gateway"
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    settings = command.settings(parser.parse_args(gateway["args"][1:]))
    by_listener = {(r.principal, r.to): r for r in settings.routes}
    assert set(by_listener) == {
        ("controller", "target"),
        ("controller", "judge"),
        ("target", "peer:logs"),
        ("peer:logs", "target"),
    }
    assert settings.cell == _pod()["metadata"]["name"]


def test_the_controller_reaches_target_and_judge_only_through_the_gateway() -> None:
    pod = _pod()
    controller = _by_name(pod["spec"])["controller"]
    env = {e["name"]: e["value"] for e in controller["env"]}
    # Host names only: the connections go to the gateway's sockets (AGENT_HEALTH_*_SOCKET).
    assert env["AGENT_HEALTH_AGENT_URL"] == "rest+http://gateway/run"
    assert env["AGENT_HEALTH_JUDGE_URL"] == "http://gateway"
    assert env["AGENT_HEALTH_JUDGE_MODEL"] == _runspec().spec.judge.model  # type: ignore[union-attr]
    assert env["AGENT_HEALTH_RUN_ID"] == env["AGENT_HEALTH_CELL"] == pod["metadata"]["name"]
    assert env["AGENT_HEALTH_TIMEOUT"] == "300"
    assert "AGENT_HEALTH_SKIP_JUDGE" not in env
    assert "AGENT_HEALTH_SKIP_SIMULATE" not in env
    assert controller["command"] == ["agent-health"]
    assert controller["args"] == ["cell", "--test", TEST_ID, "--repeat", "0", "--suite", "/suite"]


def test_skip_judge_sets_the_variable_and_opens_no_judge_route() -> None:
    pod = _pod(run=_run(skipJudge=True, timeoutSeconds=42))
    containers = _by_name(pod["spec"])
    env = {e["name"]: e["value"] for e in containers["controller"]["env"]}
    assert env["AGENT_HEALTH_SKIP_JUDGE"] == "1"
    assert "AGENT_HEALTH_JUDGE_URL" not in env
    assert JUDGE.url not in " ".join(containers["gateway"]["args"])
    assert env["AGENT_HEALTH_TIMEOUT"] == "42"
    assert pod["spec"]["activeDeadlineSeconds"] == 42 + SETTINGS.startup_seconds


def test_skip_simulate_tells_the_controller_and_keeps_the_judge() -> None:
    pod = _pod(run=_run(skipSimulate=True))
    env = {e["name"]: e["value"] for e in _by_name(pod["spec"])["controller"]["env"]}
    assert env["AGENT_HEALTH_SKIP_SIMULATE"] == "1"
    assert env["AGENT_HEALTH_JUDGE_URL"] == "http://gateway"  # judge() still judges


def test_a_configmap_suite_is_mounted_read_only_into_the_stock_controller_only() -> None:
    spec = _pod()["spec"]
    (suite,) = [v for v in spec["volumes"] if "configMap" in v and v["name"] == "suite"]
    assert suite["configMap"]["name"] == "triage-suite"
    assert _mounted_by(spec, "suite") == {"controller"}
    controller = _by_name(spec)["controller"]
    assert controller["image"] == SETTINGS.controller_image
    (mount,) = [m for m in controller["volumeMounts"] if m["name"] == "suite"]
    assert mount == {"name": "suite", "mountPath": "/suite", "readOnly": True}


def test_a_suite_image_is_the_controller_image_by_digest() -> None:
    spec = _runspec(suite={"image": "ghcr.io/acme/triage-suite:2.0", "path": "/app/tests"})
    controller = _by_name(_pod(spec=spec)["spec"])["controller"]
    digest = _digest("ghcr.io/acme/triage-suite:2.0")
    assert controller["image"] == f"ghcr.io/acme/triage-suite@{digest}"
    assert controller["args"][-2:] == ["--suite", "/app/tests"]
    assert all(m["name"] != "suite" for m in controller["volumeMounts"])


def test_peer_urls_in_the_target_env_are_rewritten_to_the_gateway() -> None:
    env = [
        {"name": "LOGS_URL", "value": "http://logs:9000/api"},
        {"name": "LOCAL", "value": "http://localhost:9000"},
        {"name": "OTHER_PORT", "value": "http://127.0.0.1:90001"},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    target = {**EXAMPLE["RunSpec"]["spec"]["target"], "env": env}
    spec = _runspec(target=target)
    listener = cellgateway.ports(spec).peers["logs"]
    got = {e["name"]: e for e in _by_name(_pod(spec=spec)["spec"])["target"]["env"]}
    assert got["LOGS_URL"]["value"] == f"http://127.0.0.1:{listener}/api"
    assert got["LOCAL"]["value"] == f"http://127.0.0.1:{listener}"
    assert got["OTHER_PORT"]["value"] == "http://127.0.0.1:90001"
    assert got["KEY"]["valueFrom"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert got["AGENT_HEALTH_PEER_LOGS_URL"]["value"] == f"http://127.0.0.1:{listener}"


def test_the_target_is_told_to_export_its_spans_to_the_gateways_otlp_receiver() -> None:
    spec = _runspec()
    pod = _by_name(_pod(spec=spec)["spec"])
    port = cellgateway.ports(spec).otlp
    env = {e["name"]: e.get("value") for e in pod["target"]["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://127.0.0.1:{port}"
    args = pod["gateway"]["args"]
    assert args[args.index("--otlp-listen") + 1] == f"127.0.0.1:{port}"
    # A RunSpec that names its own collector keeps it (its spans are read from OpenSearch).
    own = [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://collector:4318"}]
    target = {**EXAMPLE["RunSpec"]["spec"]["target"], "env": own}
    pod = _by_name(_pod(spec=_runspec(target=target))["spec"])
    told = [e for e in pod["target"]["env"] if e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert told == own


def test_gateway_ports_avoid_every_port_the_runspec_uses() -> None:
    target = {**EXAMPLE["RunSpec"]["spec"]["target"], "port": 15000}
    peers = [{"name": "a", "image": "ghcr.io/acme/a:1", "port": 15002}]
    plan = cellgateway.ports(_runspec(target=target, peers=peers))
    used = [*plan.peers.values(), *plan.peer_target.values(), plan.otlp]
    assert len(set(used)) == len(used)
    assert not {15000, 15002} & set(used)


def test_the_target_and_peers_are_probed_on_their_own_ports() -> None:
    containers = _by_name(_pod()["spec"])
    assert containers["target"]["startupProbe"]["tcpSocket"] == {"port": 8080}
    assert containers["peer-logs"]["startupProbe"]["tcpSocket"] == {"port": 9000}


def test_target_env_and_resources_are_carried_over() -> None:
    target = _by_name(_pod()["spec"])["target"]
    assert {"name": "LOG_LEVEL", "value": "info"} in target["env"]
    asked = EXAMPLE["RunSpec"]["spec"]["target"]["resources"]
    for kind in ("requests", "limits"):  # the RunSpec's own, the rest from the defaults
        assert target["resources"][kind] == SETTINGS.resources.target.wire()[kind] | asked[kind]


# --- pinning ---------------------------------------------------------------------------


def _images(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from _images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def test_every_image_in_every_manifest_is_pinned_by_digest() -> None:
    spec = _runspec()
    outputs = [
        *_variants().values(),
        cellpod.cell(
            _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=SETTINGS
        ),
        discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS),
    ]
    images = [i for o in outputs for i in _images(o)]
    assert len(images) > 10
    for image in images:
        assert re.fullmatch(r"[a-z0-9.:/_-]+@sha256:[a-f0-9]{64}", image), image


def test_an_unresolved_image_is_refused() -> None:
    spec = _runspec()
    digests = _digests(spec)
    del digests["ghcr.io/agent-health/examples/log-server:0.1.0"]
    with pytest.raises(errors.SpecError, match=r"log-server:0\.1\.0 has no resolved digest"):
        cellpod.cell_pod(
            _run(), spec, test_id=TEST_ID, repeat=0, digests=digests, settings=SETTINGS
        )


def test_operator_images_must_be_pinned() -> None:
    with pytest.raises(ValueError, match="controller_image must be pinned"):
        manifests.Settings(controller_image="ghcr.io/x/c:1", gateway_image=SETTINGS.gateway_image)


# --- names and labels ------------------------------------------------------------------


def test_cell_names_are_stable_and_follow_the_documented_shape() -> None:
    expected = hashlib.sha256(TEST_ID.encode()).hexdigest()[:10]
    assert manifests.cell_name("triage-nightly", TEST_ID, 2) == f"triage-nightly-{expected}-r2"
    pod = _pod(repeat=2)
    assert pod["metadata"]["name"] == f"triage-nightly-{expected}-r2"
    assert pod == _pod(repeat=2), "same inputs, same manifest"


@pytest.mark.parametrize(
    "run_name",
    ["x", "triage-nightly", "a" * 253, "nightly.2024-06-01.eu-west" * 8, "a.b", "a-b"],
)
def test_cell_names_are_dns_labels_within_63_characters(run_name: str) -> None:
    long_test = "suite/" + "deeply/nested/" * 40 + "file.test.py::" + "a very long title " * 30
    for test_id in (TEST_ID, long_test):
        for repeat in (0, 99):
            name = manifests.cell_name(run_name, test_id, repeat)
            assert len(name) <= 63
            assert DNS_LABEL.match(name), name


def test_distinct_cells_get_distinct_names() -> None:
    runs = ["a" * 100 + "1", "a" * 100 + "2", "a.b", "a-b", "triage"]
    tests = [TEST_ID, TEST_ID + " ", "other::test"]
    names = {manifests.cell_name(r, t, k) for r in runs for t in tests for k in range(3)}
    assert len(names) == len(runs) * len(tests) * 3


def test_cell_labels_annotations_and_owner() -> None:
    pod = _pod(repeat=1)
    meta = pod["metadata"]
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "agent-health",
        "agenthealth.dev/run": "triage-nightly",
        "agenthealth.dev/runspec": "triage",
        "agenthealth.dev/component": "cell",
        "agenthealth.dev/test-hash": hashlib.sha256(TEST_ID.encode()).hexdigest()[:10],
        "agenthealth.dev/repeat": "1",
    }
    assert meta["annotations"]["agenthealth.dev/test-id"] == TEST_ID
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "agenthealth.dev/v1alpha1",
            "kind": "EvaluationRun",
            "name": "triage-nightly",
            "uid": "9a8b7c6d-0000-4000-8000-000000000002",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_a_long_run_name_still_gives_valid_label_values() -> None:
    pod = _pod(run=_run(name="nightly." * 30 + "x"))
    assert kubernetes_validate.validate(pod, KUBERNETES, strict=True) == KUBERNETES
    assert len(pod["metadata"]["labels"]["agenthealth.dev/run"]) <= 63


def test_an_object_not_read_from_the_api_server_cannot_own_children() -> None:
    body = copy.deepcopy(EXAMPLE["EvaluationRun"])
    run = evaluationrun.EvaluationRun.model_validate(body)  # no uid
    with pytest.raises(errors.SpecError, match="metadata lacks uid"):
        _pod(run=run)


# --- secrets ---------------------------------------------------------------------------


def test_the_token_secret_carries_one_key_per_principal_and_matches_the_pod() -> None:
    run, spec = _run(), _runspec()
    tokens = {"controller": "c-token", "peer:logs": "l-token"}
    secret = cellsecrets.token_secret(
        run, spec, test_id=TEST_ID, repeat=0, tokens=tokens, ledger_key=b"k" * 44
    )
    assert set(secret["data"]) == {"controller", "peer-logs", "ledger-key"}
    assert base64.b64decode(secret["data"]["ledger-key"]) == b"k" * 44
    assert secret["immutable"] is True
    pod = _pod()
    referenced = {v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v}
    assert referenced == {secret["metadata"]["name"]}  # the run's ledger key is not mounted
    retry = cellsecrets.token_secret(
        run, spec, test_id=TEST_ID, repeat=0, tokens=tokens, ledger_key=b"k" * 44, attempt=2
    )
    assert retry["metadata"]["name"] == secret["metadata"]["name"].replace("-tokens", "-a2-tokens")
    retried = _pod(attempt=2)
    referenced = {v["secret"]["secretName"] for v in retried["spec"]["volumes"] if "secret" in v}
    assert referenced == {retry["metadata"]["name"]}
    with pytest.raises(ValueError, match="tokens must cover exactly"):
        cellsecrets.token_secret(
            run, spec, test_id=TEST_ID, repeat=0, tokens={"controller": "x"}, ledger_key=b"k" * 44
        )


def test_a_subprocess_target_is_refused_with_a_hint() -> None:
    spec = _runspec(target={"image": "ghcr.io/acme/agent:1", "connector": "subprocess"})
    with pytest.raises(errors.SpecError, match="subprocess cannot run in a cluster cell"):
        _pod(spec=spec)


def test_no_ledger_anywhere_is_a_spec_error() -> None:
    bare = manifests.Settings(
        controller_image=SETTINGS.controller_image, gateway_image=SETTINGS.gateway_image
    )
    with pytest.raises(errors.SpecError, match=r"set spec\.ledger\.url"):
        _pod(spec=_runspec(ledger=None), settings=bare)


# --- discovery -------------------------------------------------------------------------


def test_the_discovery_pod_lists_the_suite_and_nothing_more() -> None:
    spec = _runspec()
    pod = discovery.discovery_pod(
        spec, digests=_digests(spec), settings=SETTINGS, deadline_seconds=120
    )
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["list", "--json", "/suite"]
    assert container["image"] == SETTINGS.controller_image
    assert "initContainers" not in pod["spec"]
    assert not any("secret" in v or "projected" in v for v in pod["spec"]["volumes"])
    assert pod["spec"]["activeDeadlineSeconds"] == 120
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert restricted_problems(pod["spec"]) == []
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "RunSpec"
    assert pod["metadata"]["labels"]["agenthealth.dev/component"] == "discovery"


def test_the_discovery_pod_runs_the_mcp_peers_and_lists_their_tools() -> None:
    """A RunSpec's MCP peers run in its discovery pod, each as it runs in a cell (pinned
    image, env, port probe, limits; no token), and a second container asks each its tools."""
    peers = [
        {"name": "logs", "image": "ghcr.io/agent-health/examples/log-server:0.1.0", "port": 9000,
         "tools": ["search_logs"]},  # a plain peer: not run here
        {"name": "time", "image": "ghcr.io/agent-health/examples/mcp-time:0.1.0", "port": 9100,
         "protocol": "mcp", "env": [{"name": "TZ", "value": "UTC"}]},
    ]  # fmt: skip
    spec = _runspec(peers=peers)
    pod = discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS)
    assert kubernetes_validate.validate(pod, KUBERNETES, strict=True) == KUBERNETES
    assert restricted_problems(pod["spec"]) == []
    (peer,) = pod["spec"]["initContainers"]
    assert peer["name"] == "peer-time"
    assert peer["image"].startswith("ghcr.io/agent-health/examples/mcp-time@sha256:")
    assert peer["restartPolicy"] == "Always"
    assert peer["startupProbe"]["tcpSocket"]["port"] == 9100
    assert peer["env"] == [{"name": "TZ", "value": "UTC"}]  # its own, and no token
    assert peer["resources"]["limits"]
    discover, tools = pod["spec"]["containers"]
    assert discover["args"] == ["list", "--json", "/suite"]
    assert tools["args"] == ["mcp", "tools", "time=http://127.0.0.1:9100/mcp"]
    assert tools["image"] == SETTINGS.controller_image
    # It starts where it can on a read-only root: in a directory it mounts (the image's own
    # working directory is where a suite is mounted, which it does not mount).
    assert tools["workingDir"] in {m["mountPath"] for m in tools["volumeMounts"]}
    assert not any("secret" in v or "projected" in v for v in pod["spec"]["volumes"])
    assert _shared_objects(pod) == []
    assert (
        "initContainers"
        not in discovery.discovery_pod(_runspec(), digests=_digests(_runspec()), settings=SETTINGS)[
            "spec"
        ]
    )


def test_a_new_suite_revision_gets_a_new_discovery_pod() -> None:
    spec = _runspec()
    digests = _digests(spec)
    first = discovery.discovery_name(spec, digests, revision="100")
    assert first == discovery.discovery_name(spec, digests, revision="100")
    assert first != discovery.discovery_name(spec, digests, revision="101")
    assert first.startswith("triage-discover-")
    assert len(first) <= 63


# --- network policy --------------------------------------------------------------------


def test_the_network_policy_selects_the_runs_cells_and_fences_them() -> None:
    run = _run()
    policy = netpol.network_policy(
        run,
        settings=SETTINGS,
        egress=[netpol.Egress("203.0.113.0/24", (443,), excluding=("203.0.113.7/32",))],
    )
    selector = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = _pod()["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    other_run = _pod(run=_run(name="another-run"))["metadata"]["labels"]
    assert not selector.items() <= other_run.items()
    discovery_labels = discovery.discovery_pod(
        _runspec(), digests=_digests(_runspec()), settings=SETTINGS
    )["metadata"]["labels"]
    assert not selector.items() <= discovery_labels.items()
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    dns, judge, cidr = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert judge["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "agent-health"
    }
    assert judge["to"][0]["podSelector"]["matchLabels"] == dict(JUDGE.pod_labels)
    assert judge["ports"] == [{"protocol": "TCP", "port": 8081}]
    assert cidr == {
        "to": [{"ipBlock": {"cidr": "203.0.113.0/24", "except": ["203.0.113.7/32"]}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }


# --- independence ----------------------------------------------------------------------


def _shared_objects(node: Any, seen: dict[int, Any] | None = None) -> list[Any]:
    """Dicts and lists that occur more than once in one manifest (aliases of one object)."""
    seen = {} if seen is None else seen
    if not isinstance(node, dict | list):
        return []
    if id(node) in seen:
        return [node]
    seen[id(node)] = node
    children = node.values() if isinstance(node, dict) else node
    return [shared for child in children for shared in _shared_objects(child, seen)]


def test_no_manifest_shares_an_object_between_two_places() -> None:
    spec = _runspec()
    outputs = [
        *_variants().values(),
        cellpod.cell(
            _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=SETTINGS
        ),
        discovery.discovery_pod(spec, digests=_digests(spec), settings=SETTINGS),
        netpol.network_policy(_run(), settings=SETTINGS),
    ]
    for output in outputs:
        assert _shared_objects(output) == []


def test_editing_a_manifest_leaves_the_settings_and_the_next_manifest_alone() -> None:
    pod = _pod()
    for container in _containers(pod["spec"]):
        container["command"] = ["sh"]
        container.get("resources", {}).get("requests", {})["cpu"] = "64"
    assert SETTINGS.resources.gateway.requests["cpu"] == "50m"
    assert manifests.COMMAND == ("agent-health",)
    assert _pod() != pod


def test_a_retried_attempt_records_into_its_own_ledger_cell() -> None:
    first = _pod()
    retry = cellpod.cell_pod(
        _run(), _runspec(), test_id=TEST_ID, repeat=0, digests=_digests(_runspec()),
        settings=SETTINGS,
        attempt=2,
    )  # fmt: skip
    name = first["metadata"]["name"]
    assert retry["metadata"]["name"] == name  # the same cell, pod and run id
    gateway = _by_name(retry["spec"])["gateway"]
    assert _arg(gateway["args"], "--cell") == [f"{name}.a2"]
    assert _arg(gateway["args"], "--run-id") == [name]
    assert _arg(_by_name(first["spec"])["gateway"]["args"], "--cell") == [name]


def _env_of(pod: dict[str, Any], container: str) -> dict[str, Any]:
    env = _by_name(pod["spec"])[container]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def test_a_runspecs_otlp_is_the_controllers_export_env_and_no_other_containers() -> None:
    pod = _pod(spec=_runspec(otlp=OTLP))
    env = _env_of(pod, cellpod.CONTROLLER)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == OTLP["endpoint"]
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == {
        "secretKeyRef": {"name": "otlp-headers", "key": "headers"}
    }
    assert env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] == "true"
    receiver = f"http://127.0.0.1:{cellgateway.ports(_runspec(otlp=OTLP)).otlp}"
    for name, container in _by_name(pod["spec"]).items():
        if name == cellpod.CONTROLLER:
            continue
        otel = {e["name"]: e.get("value") for e in container.get("env", [])}
        otel = {k: v for k, v in otel.items() if k.startswith("OTEL_")}
        # The target never gets the export's endpoint or headers: only where the gateway's
        # OTLP receiver listens, for its own spans.
        assert otel == ({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver} if name == "target" else {})
    # The headers Secret is checked like every Secret a RunSpec names (offered to runs).
    from agent_health.cluster.reconcile import secretrefs

    refs = secretrefs.references(_runspec(otlp=OTLP))
    assert ("spec.otlp.headersSecretRef", "otlp-headers", "headers") in {
        (r.field, r.name, r.key) for r in refs
    }


def test_the_operators_otlp_endpoint_serves_runspecs_that_name_none() -> None:
    assert not any(k.startswith("OTEL_") for k in _env_of(_pod(), cellpod.CONTROLLER))
    settings = dataclasses.replace(SETTINGS, otlp_endpoint="http://collector:4318")
    env = _env_of(_pod(settings=settings), cellpod.CONTROLLER)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env
    own = _env_of(_pod(spec=_runspec(otlp=OTLP), settings=settings), cellpod.CONTROLLER)
    assert own["OTEL_EXPORTER_OTLP_ENDPOINT"] == OTLP["endpoint"]  # the RunSpec's wins


def test_an_mcp_peers_route_reads_mcp_and_the_target_is_given_its_mcp_url() -> None:
    body = copy.deepcopy(EXAMPLE["RunSpec"])
    peer = {**body["spec"]["peers"][0], "protocol": "mcp"}
    spec = _runspec(peers=[peer])
    pod = _pod(spec=spec)
    containers = _by_name(pod["spec"])
    routes = _arg(containers["gateway"]["args"], "--route")
    to_peer = [r for r in routes if f"to=peer:{peer['name']}" in r]
    assert len(to_peer) == 1
    assert to_peer[0].endswith(",protocol=mcp")
    assert all(not r.endswith("protocol=mcp") for r in routes if r not in to_peer)
    env = {e["name"]: e.get("value") for e in containers["target"]["env"]}
    name = peer["name"].upper().replace("-", "_")
    assert env[f"AGENT_HEALTH_PEER_{name}_URL"].endswith("/mcp")
    kubernetes_validate.validate(pod, "1.31", strict=True)
