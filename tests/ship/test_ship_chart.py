"""The Helm chart: lint and render every ci/ scenario; every manifest valid for Kubernetes 1.31.

The prometheus-operator kinds (ServiceMonitor, PrometheusRule) have no schema in
kubernetes-validate; they are checked against the small schemas below, which hold the
fields this chart writes as prometheus-operator's CRDs define them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from agent_health.cluster import options, rbac
from agent_health.cluster.cells import netpol, resources
from support import ship_support
from support.ship_support import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    SCENARIOS,
    by_kind,
    notes,
    one,
    render,
    run,
)

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": STRING_MAP},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                    },
                },
            },
        },
    },
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                                    "properties": {
                                        "record": {"type": "string"},
                                        "alert": {"type": "string"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string"},
                                        "labels": STRING_MAP,
                                        "annotations": STRING_MAP,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}
MONITORING = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}


@pytest.fixture(scope="module")
def helm() -> Path:
    return ship_support.helm()


def _argv(documents: list[dict[str, Any]]) -> list[str]:
    container = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["agent-health"]
    assert container["args"][0] == "operator"
    return list(container["args"][1:])


def _args(documents: list[dict[str, Any]]) -> dict[str, str]:
    """The operator's flags by name (a switch maps to ""; a repeated flag to its last value)."""
    pairs = (a.removeprefix("--").partition("=") for a in _argv(documents))
    return {name: value for name, _, value in pairs}


def _env(documents: list[dict[str, Any]]) -> dict[str, Any]:
    container = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_passes_strictly(helm: Path, scenario: str) -> None:
    values = CHART / "ci" / f"{scenario}-values.yaml"
    done = run([helm, "lint", CHART, "--strict", "--values", values])
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_scenarios_are_the_documented_ones() -> None:
    assert SCENARIOS == ["default", "gke", "kind", "minimal", "server"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_manifest_validates_for_kubernetes_1_31(helm: Path, scenario: str) -> None:
    documents = render(helm, scenario, "--include-crds")
    for document in documents:
        what = f"{scenario}: {document['kind']} {document['metadata']['name']}"
        if document["kind"] in MONITORING:
            jsonschema.Draft7Validator(MONITORING[document["kind"]]).validate(document)
        else:
            assert kubernetes_validate.validate(document, "1.31", strict=True) == "1.31", what


def test_the_monitoring_schemas_do_reject_an_unknown_field(helm: Path) -> None:
    monitor = one(render(helm, "kind"), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
        jsonschema.Draft7Validator(SERVICE_MONITOR).validate(monitor)


def test_the_chart_crds_are_byte_identical_to_the_generated_ones() -> None:
    generated = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == generated
    for name in generated:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"charts/agent-health/crds/{name} differs from crds/{name}: run `make generate`"
        )


def test_the_default_install_is_the_operator_and_what_it_needs(helm: Path) -> None:
    documents = render(helm, "default")
    assert sorted(d["kind"] for d in documents) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "NetworkPolicy",  # the operator's own: /metrics not for cells
        "Role",  # the operator's, in the one cell namespace
        "RoleBinding",
        "Service",
        "Service",
        "ServiceAccount",
        "ServiceAccount",
    ]
    deployment = one(documents, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_the_operator_command_line_follows_the_contract(helm: Path) -> None:
    args = _args(render(helm, "default"))
    # Every cell container's CPU and memory: the chart's defaults are the operator's own.
    cells = resources.parse(args.pop("cell-resources"))
    assert cells == resources.CellResources()
    assert args == {
        "health-addr": "0.0.0.0:8080",
        "judge-addr": "0.0.0.0:8090",
        "metrics-addr": "0.0.0.0:9090",
        "controller-image": "ghcr.io/agent-health/controller:0.1.0",
        "gateway-image": "ghcr.io/agent-health/gateway:0.1.0",
        "judge-service-url": f"http://{RELEASE}-agent-health-judge.{NAMESPACE}.svc:8090",
        "judge-cache": "/var/cache/agent-health/judge",
        "operator-namespace": NAMESPACE,  # no RunSpec may name a Secret there
        "gateway-service-account": f"{RELEASE}-agent-health-cell-gateway",
        # Cells are fenced by default: one NetworkPolicy per run.
        "network-policy": "",
        "judge-pod-labels": "app.kubernetes.io/component=operator,"
        f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=agent-health",
        "dns-namespace": "kube-system",
        "dns-pod-labels": "k8s-app=kube-dns",
    }
    minimal = _args(render(helm, "minimal"))
    assert minimal["namespace"] == "evals"
    kind = _args(render(helm, "kind"))
    assert kind["ledger-url"] == "configmap://{namespace}/agent-health-ledger-{run}"


def test_probes_ports_and_security(helm: Path) -> None:
    pod = one(render(helm, "default"), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "judge": 8090, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    assert container["resources"]["limits"]["cpu"]
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_services_point_at_the_operator_ports(helm: Path) -> None:
    documents = render(helm, "default")
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind(documents, "Service")}
    pod_labels = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    judge = services[f"{RELEASE}-agent-health-judge"]
    metrics = services[f"{RELEASE}-agent-health-metrics"]
    assert judge["ports"] == [
        {"name": "judge", "port": 8090, "targetPort": "judge", "protocol": "TCP"}
    ]
    assert metrics["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    for spec in (judge, metrics):
        assert spec["selector"].items() <= pod_labels.items()


def test_rbac_is_exactly_the_operators_rules(helm: Path) -> None:
    documents = render(helm, "default", "--set", "cells.gatewayServiceAccount.create=false")
    role = one(documents, "ClusterRole")
    # Rendered from the same rules the operator's end-to-end test checks every request
    # against (agent_health.cluster.rbac): exactly what it uses, nothing more; cluster-wide
    # only the watching, the rest in a Role per cell namespace.
    assert role["rules"] == rbac.CLUSTER_RULES
    roles = by_kind(documents, "Role")
    assert [r["metadata"]["namespace"] for r in roles] == [NAMESPACE]  # the default cell ns
    assert all(r["rules"] == rbac.NAMESPACE_RULES for r in roles)
    (role_binding,) = by_kind(documents, "RoleBinding")
    assert role_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": roles[0]["metadata"]["name"],
    }
    for body in (*roles, role_binding):
        assert kubernetes_validate.validate(body, "1.31", strict=True) == "1.31"
    listed = render(helm, "default", "--set", "cells.namespaces={team-a,team-b}")
    assert [r["metadata"]["namespace"] for r in by_kind(listed, "Role")] == [
        NAMESPACE, "team-a", "team-b",
    ]  # fmt: skip
    binding = one(documents, "ClusterRoleBinding")
    account = one(documents, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    subjects = [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert binding["subjects"] == role_binding["subjects"] == subjects
    deployment = one(documents, "Deployment")
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule


def test_the_gke_scenario_gives_cells_no_google_identity_and_runs_them_on_gvisor(
    helm: Path,
) -> None:
    documents = render(helm, "gke")
    accounts = {
        (a["metadata"]["name"], a["metadata"]["namespace"]): a["metadata"].get("annotations", {})
        for a in by_kind(documents, "ServiceAccount")
    }
    gateway = f"{RELEASE}-agent-health-cell-gateway"
    assert set(accounts) == {
        (f"{RELEASE}-agent-health", NAMESPACE), (gateway, NAMESPACE), (gateway, "evals"),
    }  # fmt: skip
    # Workload Identity would answer every container of a cell: the cells get none.
    for noted in accounts.values():
        assert "iam.gke.io/gcp-service-account" not in noted
    values = (CHART / "ci" / "gke-values.yaml").read_text()
    assert "cannot be limited to one container" in values  # and the values say why
    assert _env(documents)["AGENT_HEALTH_SANDBOX_RUNTIME_CLASS"] == "gvisor"
    # The operator watches Sandboxes here; elsewhere it does not (no agent-sandbox CRDs).
    assert _env(documents)["AGENT_HEALTH_SANDBOXES"] == "1"
    assert "AGENT_HEALTH_SANDBOXES" not in _env(render(helm, "kind"))
    # And claims on warm pools (isolation.warmPool), with the Role to make them.
    assert _env(documents)["AGENT_HEALTH_WARM_POOLS"] == "1"
    assert "AGENT_HEALTH_WARM_POOLS" not in _env(render(helm, "kind"))
    granted = {
        (group, resource, verb)
        for role in by_kind(documents, "Role")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    pools = "extensions.agents.x-k8s.io"
    assert {(pools, "sandboxclaims", "create"), (pools, "sandboxwarmpools", "patch")} <= granted
    # Runs that name no queue wait in each namespace's LocalQueue "evals"; elsewhere none.
    assert _env(documents)["AGENT_HEALTH_DEFAULT_QUEUE"] == "evals"
    assert "AGENT_HEALTH_DEFAULT_QUEUE" not in _env(render(helm, "kind"))
    # ...and sandboxed cells (gVisor) with them: admitted through the queue, not refused.
    assert _env(documents)["AGENT_HEALTH_SANDBOX_QUEUEING"] == "admit"
    args = _args(documents)
    assert args["cell-runtime-class"] == "gvisor"
    assert args["ledger-url"] == "configmap://{namespace}/agent-health-ledger-{run}"
    assert "network-policy" in args
    assert re.fullmatch(r".+/controller@sha256:[0-9a-f]{64}", args["controller-image"])
    image = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert re.fullmatch(r".+-docker\.pkg\.dev/.+/operator@sha256:[0-9a-f]{64}", image)
    claim = one(documents, "PersistentVolumeClaim")
    volumes = one(documents, "Deployment")["spec"]["template"]["spec"]["volumes"]
    cache = next(v for v in volumes if v["name"] == "judge-cache")
    assert cache == {
        "name": "judge-cache",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    }


def test_the_judge_key_comes_from_a_secret_and_never_from_values(helm: Path) -> None:
    env = _env(render(helm, "kind"))
    assert env["AGENT_HEALTH_JUDGE_PROVIDER"] == "openai"
    assert env["AGENT_HEALTH_JUDGE_MODEL"] == "gpt-4o-mini"
    assert env["AGENT_HEALTH_JUDGE_API_KEY_ENV"] == "OPENAI_API_KEY"
    assert env["OPENAI_API_KEY"] == {
        "secretKeyRef": {"name": "judge-credentials", "key": "api-key"}
    }
    assert "AGENT_HEALTH_JUDGE_FOR_ALL_RUNS" not in env  # offered to all runs only if asked
    assert _env(render(helm, "default")) == {
        "AGENT_HEALTH_JUDGE_MAX_TOKENS": "4096",
        "AGENT_HEALTH_SANDBOX_QUEUEING": "refuse",
        "AGENT_HEALTH_MAX_WARM_REPLICAS": "100",
    }


def test_the_minimal_scenario_renders_no_monitoring_objects(helm: Path) -> None:
    documents = render(helm, "minimal")
    kinds = {d["kind"] for d in documents}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert _cell_policies(documents) == []  # no static policy: the operator's per run


def test_the_monitoring_objects_select_what_the_chart_serves(helm: Path) -> None:
    documents = render(helm, "kind")
    monitor = one(documents, "ServiceMonitor")
    services = {s["metadata"]["name"].rsplit("-", 1)[1]: s for s in by_kind(documents, "Service")}
    metrics, judge = services["metrics"], services["judge"]
    selected = monitor["spec"]["selector"]["matchLabels"].items()
    assert selected <= metrics["metadata"]["labels"].items()
    assert not selected <= judge["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == metrics["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rule = one(documents, "PrometheusRule")
    raw = yaml.safe_load((CHART / "rules" / "agent-health.rules.yaml").read_text())
    assert rule["spec"] == raw
    dashboard = one(documents, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "agent-health.json").read_text())
    assert json.loads(dashboard["data"]["agent-health.json"]) == shipped


def test_the_cell_network_policy_allows_only_dns_the_judge_and_declared_cidrs(helm: Path) -> None:
    documents = render(helm, "kind", "--set", "cellNetworkPolicy.enabled=true")
    assert [p["metadata"]["namespace"] for p in _cell_policies(documents)] == [
        NAMESPACE, "default",
    ]  # fmt: skip
    documents = [d for d in documents if d["metadata"].get("namespace") != "default"]
    (policy,) = _cell_policies(documents)
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "agent-health"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    dns, judge, *cidrs = spec["egress"]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    pod = one(documents, "Deployment")["spec"]["template"]
    peer = judge["to"][0]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert peer["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert judge["ports"] == [{"protocol": "TCP", "port": 8090}]
    assert [c["to"][0]["ipBlock"]["cidr"] for c in cidrs] == ["0.0.0.0/0"]
    # The operator itself is no cell: the policy must not fence it in.
    labels = pod["metadata"]["labels"]
    assert labels.get("app.kubernetes.io/managed-by") != "agent-health"


def test_the_cell_network_policy_is_rendered_per_namespace(helm: Path) -> None:
    documents = render(
        helm, "default", "--set", "cellNetworkPolicy.enabled=true",
        "--set", "cells.namespaces={team-a,team-b}",
    )  # fmt: skip
    policies = _cell_policies(documents)
    assert [p["metadata"]["namespace"] for p in policies] == [NAMESPACE, "team-a", "team-b"]
    default = _cell_policies(render(helm, "default", "--set", "cellNetworkPolicy.enabled=true"))
    assert [p["metadata"]["namespace"] for p in default] == [NAMESPACE]


def _cell_policies(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The static cell policies (the operator's own policy aside)."""
    return [
        p for p in by_kind(documents, "NetworkPolicy") if p["metadata"]["name"].endswith("-cells")
    ]


def test_the_static_cell_policy_is_off_by_default_and_every_run_is_fenced(helm: Path) -> None:
    assert not _cell_policies(render(helm, "default"))
    assert not _cell_policies(render(helm, "kind"))  # the operator's per run instead
    assert "network-policy" in _args(render(helm, "default"))  # on unless turned off
    off = render(helm, "default", "--set", "cellNetworkPolicy.perRun=false")
    assert "network-policy" not in _args(off)


def test_per_run_policies_get_the_egress_dns_and_judge_pods_from_values(helm: Path) -> None:
    documents = render(helm, "kind")
    argv = _argv(documents)
    assert "--network-policy" in argv
    egress = [a.removeprefix("--egress=") for a in argv if a.startswith("--egress=")]
    # The API server is found by the operator and let through to ConfigMap-ledger runs only.
    assert egress == ["0.0.0.0/0~10.0.0.0/8~172.16.0.0/12~192.168.0.0/16:443"]
    parsed = [netpol.egress(e) for e in egress]
    assert parsed[0].excluding == ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    assert [p.ports for p in parsed] == [(443,)]
    args = _args(documents)
    assert args["dns-namespace"] == "kube-system"
    assert args["dns-pod-labels"] == "k8s-app=kube-dns"
    assert args["operator-namespace"] == NAMESPACE
    judge = dict(p.split("=", 1) for p in args["judge-pod-labels"].split(","))
    pod = one(documents, "Deployment")["spec"]["template"]
    assert judge.items() <= pod["metadata"]["labels"].items()


def test_the_cell_gateway_account_is_in_each_cell_namespace_and_granted_nothing(
    helm: Path,
) -> None:
    documents = render(helm, "kind", "--set", "cells.ledgerCredentialsSecret=ledger-creds")
    name = f"{RELEASE}-agent-health-cell-gateway"
    args = _args(documents)
    assert args["gateway-service-account"] == name
    assert args["ledger-credentials-secret"] == "ledger-creds"
    namespaces = [NAMESPACE, "default"]
    accounts = [a for a in by_kind(documents, "ServiceAccount") if a["metadata"]["name"] == name]
    assert [a["metadata"]["namespace"] for a in accounts] == namespaces
    assert all(a["automountServiceAccountToken"] is False for a in accounts)
    # A gateway shared by every run of a namespace may write no ConfigMap there: the suite's
    # (test code) and other runs' ledgers stay out of its reach. ConfigMap ledgers are
    # written by each run's own ServiceAccount (the operator makes it, with its Role).
    bound = [
        b for b in by_kind(documents, "RoleBinding") + by_kind(documents, "ClusterRoleBinding")
        if any(s.get("name") == name for s in b.get("subjects") or [])
    ]  # fmt: skip
    assert bound == []


def test_an_existing_gateway_account_is_named_and_none_is_created(helm: Path) -> None:
    documents = render(
        helm, "default", "--set", "cells.gatewayServiceAccount.create=false",
        "--set", "cells.gatewayServiceAccount.name=ledger-writer",
    )  # fmt: skip
    assert _args(documents)["gateway-service-account"] == "ledger-writer"
    assert all(r["rules"] == rbac.NAMESPACE_RULES for r in by_kind(documents, "Role"))
    assert len(by_kind(documents, "ServiceAccount")) == 1  # the operator's
    none = render(helm, "default", "--set", "cells.gatewayServiceAccount.create=false")
    assert "gateway-service-account" not in _args(none)


def test_the_watched_namespace_is_a_cell_namespace(helm: Path) -> None:
    accounts = [
        a for a in by_kind(render(helm, "minimal"), "ServiceAccount")
        if a["metadata"]["name"].endswith("-cell-gateway")
    ]  # fmt: skip
    assert [a["metadata"]["namespace"] for a in accounts] == [NAMESPACE, "evals"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("bogus=1", "(root): Additional property bogus is not allowed"),
        ("image.operator.tagg=x", "image.operator: Additional property tagg is not allowed"),
        ("judge.provider=gemini", "judge.provider must be one of"),
        ("image.controller.digest=latest", "image.controller.digest: Does not match pattern"),
        ("podLabels.app\\.kubernetes\\.io/managed-by=agent-health", "podLabels: Must not"),
        ("cells.gatewayAccount=x", "cells: Additional property gatewayAccount is not allowed"),
        ("cellNetworkPolicy.namespaces={a}", "Additional property namespaces is not allowed"),
        ("kueue.defaultQueue=Team_A", "kueue.defaultQueue: Does not match pattern"),
        ("sandbox.queueing=allow", "sandbox.queueing must be one of"),
        ("sandbox.maxWarmReplicas=-1", "sandbox.maxWarmReplicas: Must be greater than"),
        ("history.url=mysql://db/evals", "history.url: Does not match pattern"),
        ("history.url=postgresql://evals:pw@db/evals", "history.url: Must not validate"),
        ("history.persistence.size=lots", "history.persistence.size: Does not match pattern"),
    ],
)
def test_the_values_schema_refuses_mistakes(helm: Path, setting: str, complaint: str) -> None:
    done = run([helm, "template", RELEASE, CHART, "--set", setting])
    assert done.returncode != 0
    assert complaint in done.stderr, done.stderr


def _schema_objects(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)] if "properties" in node else []
    for name, child in node.get("properties", {}).items():
        found += _schema_objects(child, f"{path}.{name}")
    return found


def test_the_values_schema_is_strict_everywhere() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path, node in _schema_objects(schema):
        assert node.get("additionalProperties") is False, f"{path or '(root)'} is not strict"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    assert set(schema["properties"]) - {"global"} == set(values)


# Pass-through values (Kubernetes objects, label maps, RBAC rules): their inner keys are
# Kubernetes fields, documented by the comment on the block itself.
FREE_FORM = {
    "podSecurityContext", "securityContext", "resources", "rules", "namespaceRules",
    "podLabels", "probes",
    "labels", "annotations",
}  # fmt: skip


def test_every_values_key_has_a_comment() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    parents: list[tuple[int, str]] = []  # (indent, key) of the enclosing blocks
    for number, line in enumerate(lines):
        key = re.match(r"^(\s*)(- )?([A-Za-z][\w.-]*):", line)
        if not key:
            continue
        indent = len(key.group(1)) + (2 if key.group(2) else 0)
        parents = [(i, k) for i, k in parents if i < indent]
        free = any(k in FREE_FORM for _, k in parents)
        commented = number > 0 and lines[number - 1].strip().startswith("#")
        assert free or commented, f"values.yaml:{number + 1}: {key.group(3)} has no comment"
        parents.append((indent, key.group(3)))


def test_every_helper_is_prefixed_and_commented() -> None:
    text = (CHART / "templates" / "_helpers.tpl").read_text()
    defines = re.findall(r"(\*/\}\}\n)?\{\{- define \"([^\"]+)\" -\}\}", text)
    assert defines
    for commented, name in defines:
        assert name.startswith("agent-health."), f"helper {name} is not prefixed with the chart"
        assert commented, f"helper {name} has no comment above it"
        assert f"{name}:" in text, f"the comment above {name} does not name it"
    used = set(re.findall(r"include \"([^\"]+)\"", "".join(
        p.read_text() for p in (CHART / "templates").iterdir()
    )))  # fmt: skip
    assert used == {name for _, name in defines}, "a helper is unused or undefined"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_notes_say_how_to_reach_what_was_installed(
    helm: Path, tmp_path: Path, scenario: str
) -> None:
    text = notes(helm, tmp_path, scenario)
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{RELEASE}-agent-health" in text
    assert "kubectl get evaluationruns -w" in text
    assert f"{RELEASE}-agent-health-metrics.{NAMESPACE}.svc:9090/metrics" in text
    assert "{{" not in text
    if scenario in ("kind", "gke"):
        for what in ("ServiceMonitor", "dashboard", "PrometheusRule"):
            assert what in text
    else:
        assert "port-forward svc/" in text
    if scenario in ("default", "minimal"):
        assert "No default judge is configured" in text


def test_the_ledger_prefixes_a_runspec_may_choose_are_the_operators(helm: Path) -> None:
    assert "ledger-allow" not in _args(render(helm, "default"))  # configmap://{namespace}/
    allow = '["s3://evals/{namespace}/","gs://evals/{namespace}/"]'
    argv = _argv(render(helm, "default", "--set-json", f"operator.ledgerAllow={allow}"))
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, {})
    chosen = options.from_args(parser.parse_args(argv))
    assert chosen.ledger_allowed == ("s3://evals/{namespace}/", "gs://evals/{namespace}/")


def test_the_admin_chooses_what_a_queue_does_to_sandboxes_and_caps_warm_sandboxes(
    helm: Path,
) -> None:
    """Issue 34 item 8: the switch and the cap reach the operator, from values to Options."""

    def chosen(*settings: str) -> options.Options:
        documents = render(helm, "default", *settings)
        environ = {k: v for k, v in _env(documents).items() if isinstance(v, str)}
        parser = argparse.ArgumentParser()
        options.add_arguments(parser, environ)
        return options.from_args(parser.parse_args(_argv(documents)))

    default = chosen()
    assert (default.sandbox_queueing, default.max_warm_replicas) == ("refuse", 100)
    admitting = chosen("--set", "sandbox.queueing=admit", "--set", "sandbox.maxWarmReplicas=0")
    assert (admitting.sandbox_queueing, admitting.max_warm_replicas) == ("admit", 0)
    uncapped = chosen("--set", "sandbox.maxWarmReplicas=null")
    assert uncapped.max_warm_replicas is None


def _volumes(documents: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operator pod's volumes and its container's mounts, by name."""
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    return {v["name"]: v for v in pod["volumes"]}, mounts


def _history(env: dict[str, Any]) -> Any:
    """What the operator makes of the rendered environment's history."""
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, {k: v for k, v in env.items() if isinstance(v, str)})
    return options.from_args(parser.parse_args(["--controller-image=c", "--gateway-image=g"]))


def test_the_history_is_off_unless_the_values_name_one(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, "default")
    env = _env(documents)
    assert "AGENT_HEALTH_HISTORY" not in env
    assert _history(env).history is None
    volumes, _ = _volumes(documents)
    assert set(volumes) == {"judge-cache", "tmp"}
    assert "PersistentVolumeClaim" not in {d["kind"] for d in documents}
    said = notes(helm, tmp_path, "default")
    assert "5. History: off (history.url and history.persistence.enabled are unset)" in said


def test_a_teams_history_is_a_url_and_its_password_a_file_from_a_secret(
    helm: Path, tmp_path: Path
) -> None:
    documents = render(helm, "gke")
    env = _env(documents)
    url = "postgresql://agent_health@10.20.0.3:5432/agent_health?sslmode=require"
    assert env["AGENT_HEALTH_HISTORY"] == url
    assert env["AGENT_HEALTH_HISTORY_PASSWORD_FILE"] == "/etc/agent-health/history/password"
    volumes, mounts = _volumes(documents)
    assert volumes["history-password"] == {
        "name": "history-password",
        "secret": {
            "secretName": "history-db",
            "items": [{"key": "password", "path": "password"}],
            "defaultMode": 0o440,
        },
    }
    assert mounts["history-password"] == {
        "name": "history-password",
        "mountPath": "/etc/agent-health/history",
        "readOnly": True,
    }
    # The password is the user's Secret's alone: the chart renders none, and holds no value
    # of it (a URL with a password is refused by the schema).
    assert by_kind(documents, "Secret") == []
    chosen = _history(env).history
    assert chosen is not None
    assert (chosen.kind, chosen.shown) == (
        "postgresql",
        "postgresql://agent_health@10.20.0.3:5432/agent_health",
    )
    said = notes(helm, tmp_path, "gke")
    assert "every finished EvaluationRun is recorded in postgresql://agent_health@10.20.0.3" in said
    assert (
        "agent-health history --history postgresql://agent_health@10.20.0.3:5432/agent_health\n"
        in (said + "\n")
    )
    assert "sslmode" not in said


def test_a_sqlite_history_lives_on_a_claim_of_its_own(helm: Path, tmp_path: Path) -> None:
    documents = render(helm, "kind")
    env = _env(documents)
    url = "sqlite:////var/lib/agent-health/history/history.db"
    assert env["AGENT_HEALTH_HISTORY"] == url
    assert "AGENT_HEALTH_HISTORY_PASSWORD_FILE" not in env
    (claim,) = [c for c in by_kind(documents, "PersistentVolumeClaim")
                if c["metadata"]["name"].endswith("-history")]  # fmt: skip
    assert claim["metadata"]["name"] == f"{RELEASE}-agent-health-history"
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    volumes, mounts = _volumes(documents)
    assert volumes["history"] == {
        "name": "history",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    }
    assert mounts["history"]["mountPath"] == "/var/lib/agent-health/history"
    chosen = _history(env).history
    assert chosen is not None
    assert str(chosen.path) == "/var/lib/agent-health/history/history.db"
    said = notes(helm, tmp_path, "kind")
    assert (
        f"kubectl -n {NAMESPACE} exec deployment/{RELEASE}-agent-health -- agent-health history "
        f"--history {url}"
    ) in said
    # An existing claim is used as it is; a URL of its own on the claim wins over the default.
    other = render(
        helm, "kind", "--set", "history.persistence.existingClaim=team-history",
        "--set", "history.url=sqlite:////var/lib/agent-health/history/evals.db",
    )  # fmt: skip
    volumes, _ = _volumes(other)
    assert volumes["history"]["persistentVolumeClaim"] == {"claimName": "team-history"}
    assert not [c for c in by_kind(other, "PersistentVolumeClaim")
                if c["metadata"]["name"].endswith("-history")]  # fmt: skip
    assert _env(other)["AGENT_HEALTH_HISTORY"].endswith("/evals.db")


def test_every_history_setting_renders_valid_manifests(helm: Path) -> None:
    documents = render(
        helm, None, "--set", "history.url=postgresql://evals@db.evals.svc:5432/history",
        "--set", "history.existingSecret=history-db", "--set", "history.passwordKey=pw",
        "--set", "history.persistence.enabled=true",
        "--set", "history.persistence.storageClassName=fast",
    )  # fmt: skip
    for document in documents:
        if document["kind"] == "CustomResourceDefinition":
            continue
        assert kubernetes_validate.validate(document, "1.31", strict=True) == "1.31"
    volumes, _ = _volumes(documents)
    assert volumes["history-password"]["secret"]["items"] == [{"key": "pw", "path": "password"}]
    claim = one(documents, "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == "fast"
