"""The "Run on a cluster" instructions: the files they name exist and the names they use match."""

from __future__ import annotations

import re

import ship_support
import yaml
from ship_support import CHART, ROOT

README = (ROOT / "README.md").read_text()
SECTION = README.split("## Run on a cluster", 1)[1]


def test_the_kind_config_is_a_kind_cluster_with_a_registry_mirror_path() -> None:
    config = yaml.safe_load((ROOT / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["name"] == "agent-health"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert 'config_path = "/etc/containerd/certs.d"' in config["containerdConfigPatches"][0]
    assert "kind get nodes --name agent-health" in SECTION


def test_every_path_the_section_names_exists() -> None:
    paths = set(re.findall(r"(?<![\w/.-])((?:examples|charts|images)/[\w./-]+[\w])", SECTION))
    paths.add("kind-config.yaml")
    assert len(paths) > 6
    for path in sorted(paths):
        cleaned = path.replace("$image", "operator")
        assert (ROOT / cleaned).exists(), f"README.md 'Run on a cluster' names {path}"


def test_the_commands_use_the_names_the_chart_and_the_example_create() -> None:
    done = ship_support.run(
        [ship_support.helm(), "template", "agent-health", CHART, "-n", "agent-health"]
    )
    services = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all(done.stdout)
        if d and d["kind"] == "Service"
    ]
    assert "agent-health-metrics" in services
    assert "svc/agent-health-metrics 9090" in SECTION
    run = list(yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text()))
    suite = run[0]["spec"]["suite"]["configMap"]["name"]
    assert f"kubectl create configmap {suite} " in SECTION
    assert f"kubectl describe evaluationrun {run[1]['metadata']['name']}" in SECTION
    kind_values = yaml.safe_load((CHART / "ci" / "kind-values.yaml").read_text())
    secret = kind_values["judge"]["apiKey"]["existingSecret"]
    assert f"-n agent-health create secret generic {secret} " in SECTION
    assert f"agent-health/operator:{kind_values['image']['operator']['tag']}" in SECTION
