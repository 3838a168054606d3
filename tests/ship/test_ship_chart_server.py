"""The chart with ``server.enabled``: agent-health serve's Deployment, Service, ServiceAccount,
RBAC and NetworkPolicy rendered and valid for Kubernetes 1.31 (the ``server`` scenario runs
through every check of tests/test_ship_chart.py too), its command line, its credentials only
as mounted files, its RBAC exactly what its role needs, and settings that cannot serve
refused at install."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from support import ship_support
from support.ship_support import CHART, by_kind, render, run


@pytest.fixture(scope="module")
def helm() -> Path:
    return ship_support.helm()


def _server(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [
        d
        for d in by_kind(documents, kind)
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "server"
    ]
    return found


def test_server_enabled_renders_its_objects_valid_for_kubernetes(helm: Path) -> None:
    documents = render(helm, "server")
    for kind in ("Deployment", "Service", "ServiceAccount", "ClusterRole",
                 "ClusterRoleBinding", "NetworkPolicy"):  # fmt: skip
        found = _server(documents, kind)
        assert kubernetes_validate.validate(found, "1.31", strict=True) == "1.31", kind
    assert not [d for d in render(helm, "default") if "server" in d["metadata"]["name"]]


def test_the_server_command_line_and_its_credentials_as_files(helm: Path) -> None:
    documents = render(helm, "server")
    pod = _server(documents, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "serve",
        "--host=0.0.0.0",
        "--port=8340",
        "--history=postgresql://agent_health@postgres.databases.svc:5432/agent_health",
        "--cluster",
        "--root=/tmp/agent-health",
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "AGENT_HEALTH_SERVE_READ_TOKEN_FILE": "/var/run/agent-health/tokens/read",
        "AGENT_HEALTH_SERVE_OPERATE_TOKEN_FILE": "/var/run/agent-health/tokens/operate",
        "AGENT_HEALTH_HISTORY_PASSWORD_FILE": "/var/run/agent-health/history/password",
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "agent-health-server-tokens"
    assert volumes["history-password"]["secret"]["items"] == [
        {"key": "password", "path": "password"}
    ]
    assert pod["serviceAccountName"] == "evals-agent-health-server"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # No secret value is ever in a rendered manifest: only Secrets' names.
    assert "secretKeyRef" not in str(documents)


def test_the_server_selects_its_own_pods_and_never_the_operators(helm: Path) -> None:
    documents = render(helm, "server")
    server_pod = _server(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for kind in ("Deployment", "Service", "NetworkPolicy"):
        for document in by_kind(documents, kind):
            spec = document["spec"]
            chosen = (
                spec.get("selector", {}).get("matchLabels")
                or spec.get("selector")
                or (spec.get("podSelector", {}).get("matchLabels"))
            )
            if not chosen or "app.kubernetes.io/component" not in chosen:
                continue
            mine = document["metadata"]["labels"]["app.kubernetes.io/component"] == "server"
            matches = all(server_pod.get(k) == v for k, v in chosen.items())
            assert matches == mine, document["metadata"]["name"]
    policy = _server(documents, "NetworkPolicy")
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 8340}]}
    ]


def test_the_servers_rbac_is_what_its_role_needs(helm: Path) -> None:
    operating = _server(render(helm, "server"), "ClusterRole")
    assert operating["rules"] == [
        {
            "apiGroups": ["agenthealth.dev"],
            "resources": ["evaluationruns"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"],
        }
    ]
    watching = _server(render(helm, "server", "--set", "server.operate=false"), "ClusterRole")
    assert watching["rules"][0]["verbs"] == ["get", "list", "watch"]
    one = render(helm, "server", "--set", "server.watchNamespace=evals")
    binding = _server(one, "RoleBinding")
    assert binding["metadata"]["namespace"] == "evals"
    assert _server(one, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"][5] == (
        "--namespace=evals"
    )


def _history_of(documents: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
    """The server's --history and the Secret item mounted as its password file."""
    pod = _server(documents, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (url,) = [a.removeprefix("--history=") for a in container["args"] if "--history=" in a]
    volumes = {v["name"]: v for v in pod["volumes"]}
    found = volumes.get("history-password")
    return url, found["secret"] if found is not None else None


def test_the_server_reads_the_operators_history_unless_told_another(helm: Path) -> None:
    """One place names the database: history.* (the operator's), which the server reads by
    default, its password from the same Secret; server.history.* names another."""
    documents = render(helm, "server")
    operator_env = {
        e["name"]: e.get("value")
        for e in by_kind(documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    url, secret = _history_of(documents)
    assert url == operator_env["AGENT_HEALTH_HISTORY"]
    assert url == "postgresql://agent_health@postgres.databases.svc:5432/agent_health"
    assert secret == {
        "secretName": "agent-health-history",
        "defaultMode": 0o400,
        "items": [{"key": "password", "path": "password"}],
    }
    keyed = render(helm, "server", "--set", "history.passwordKey=pw")
    assert _history_of(keyed)[1]["items"] == [{"key": "pw", "path": "password"}]  # type: ignore[index]
    other = render(
        helm, "server", "--set", "server.history.url=postgresql://reader@replica.db:5432/h",
        "--set", "server.history.existingSecret=replica", "--set", "server.history.passwordKey=k",
    )  # fmt: skip
    url, secret = _history_of(other)
    assert url == "postgresql://reader@replica.db:5432/h"
    assert secret is not None
    assert (secret["secretName"], secret["items"]) == (
        "replica",
        [{"key": "k", "path": "password"}],
    )
    bare = render(helm, "server", "--set", "server.history.url=postgresql://reader@replica.db/h")
    assert _history_of(bare)[1] is None  # its own database: not the operator's password


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["--set", "server.enabled=true", "--set", "server.auth.existingSecret=t"],
         "server.enabled needs a history: set history.url"),
        (["--set", "server.enabled=true", "--set",
          "history.url=postgresql://u@db/h"], "server.enabled needs server.auth"),
        (["--set", "server.enabled=true", "--set", "server.history.url=sqlite:////x.db",
          "--set", "server.auth.existingSecret=t"], "server.history.url"),
        (["--set", "server.enabled=true", "--set", "history.persistence.enabled=true",
          "--set", "server.auth.existingSecret=t"],
         "server.enabled reads the history sqlite:////var/lib/agent-health/history/history.db, "
         "a SQLite file only the operator's pod has"),
        (["--set", "server.enabled=true", "--set", "history.url=sqlite:////data/h.db",
          "--set", "server.auth.existingSecret=t"], "set history.url to a PostgreSQL database"),
    ],
)  # fmt: skip
def test_settings_that_cannot_serve_are_refused_at_install(
    helm: Path, values: list[str], said: str
) -> None:
    done = run([helm, "template", "evals", CHART, *values])
    assert done.returncode != 0
    assert said in done.stderr
