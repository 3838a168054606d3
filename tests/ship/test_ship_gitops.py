"""examples/gitops: the kustomization builds and validates; the suite runs; the CI gate gates.

The kustomization is built with kubectl's kustomize; plain manifests are checked against
Kubernetes 1.31 (kubernetes-validate), custom resources against the committed ``crds/``
(OpenAPI keywords and CEL rules, as the API server would). The gate script runs with a real
kubectl against the Kubernetes API emulator the cluster tests use.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, meta, runspec
from support import ship_support
from support.kube import schemas, serve
from support.ship_support import ROOT

GITOPS = ROOT / "examples" / "gitops"
SCHEMAS = {
    d["spec"]["names"]["kind"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for d in (yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml"))
}
MODELS = {"RunSpec": runspec.RunSpec, "EvaluationRun": evaluationrun.EvaluationRun}
RUNS = "/apis/agenthealth.dev/v1alpha1/namespaces/evals/evaluationruns"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def built() -> list[dict[str, Any]]:
    done = ship_support.run([ship_support.kubectl(), "kustomize", GITOPS])
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _custom(document: dict[str, Any]) -> None:
    schema = SCHEMAS[document["kind"]]
    assert schemas.problems(schema, schemas.admit(schema, document)) == []
    meta.parse(MODELS[document["kind"]], document, what=document["kind"])


def test_the_kustomization_builds_what_the_readme_lists(built: list[dict[str, Any]]) -> None:
    kinds = sorted(f"{d['kind']}/{d['metadata']['name'].rsplit('-', 1)[0]}" for d in built)
    assert kinds == [
        "ConfigMap/nightly-evaluationrun",
        "ConfigMap/triage-suite",
        "CronJob/triage",
        "Role/evaluation",
        "RoleBinding/evaluation",
        "RunSpec/triage",
        "ServiceAccount/evaluation",
    ]
    assert {d["metadata"]["namespace"] for d in built} == {"evals"}


def test_plain_manifests_validate_for_kubernetes_1_31(built: list[dict[str, Any]]) -> None:
    for document in built:
        if document["kind"] in SCHEMAS:
            continue
        assert kubernetes_validate.validate(document, "1.31", strict=True) == "1.31"


def test_the_custom_resources_validate_against_the_crds(built: list[dict[str, Any]]) -> None:
    custom = [d for d in built if d["kind"] in SCHEMAS]
    assert [d["kind"] for d in custom] == ["RunSpec"]
    templates = {d["metadata"]["name"]: d for d in built if d["kind"] == "ConfigMap"}
    nightly = next(v for k, v in templates.items() if k.startswith("nightly-evaluationrun"))
    run = yaml.safe_load(nightly["data"]["evaluationrun.yaml"])
    pr_run = yaml.safe_load((GITOPS / "ci" / "pr-run.yaml").read_text())
    for document in [*custom, run, pr_run]:
        _custom(document)
    assert run["metadata"]["generateName"] == "triage-nightly-"
    assert run["spec"]["runSpecRef"]["name"] == custom[0]["metadata"]["name"]


def test_a_broken_run_template_is_caught(built: list[dict[str, Any]]) -> None:
    run = yaml.safe_load((GITOPS / "nightly-run.yaml").read_text())
    run["spec"]["repeat"] = 3  # a typo of repeats: pruned by the server, refused by the model
    with pytest.raises(errors.SpecError, match="repeat"):
        _custom(run)


def test_the_generated_names_are_wired_through(built: list[dict[str, Any]]) -> None:
    names = {d["metadata"]["name"].rsplit("-", 1)[0]: d for d in built}
    suite = names["triage-suite"]["metadata"]["name"]
    spec = next(d for d in built if d["kind"] == "RunSpec")
    assert spec["spec"]["suite"]["configMap"]["name"] == suite
    assert suite != "triage-suite", "the suite ConfigMap carries a content hash"
    cron = next(d for d in built if d["kind"] == "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == names["nightly-evaluationrun"]["metadata"]["name"]
    assert pod["containers"][0]["args"][:2] == [
        "create",
        "--filename=/templates/evaluationrun.yaml",
    ]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    role = next(d for d in built if d["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": ["agenthealth.dev"], "resources": ["evaluationruns"], "verbs": ["create"]}
    ]


def test_the_suite_is_the_quickstarts_own_files_without_a_copy(
    built: list[dict[str, Any]],
) -> None:
    quickstart = ROOT / "examples" / "01-quickstart"
    assert not (GITOPS / "suite").exists(), "the GitOps example keeps no copy of the suite"
    kustomization = yaml.safe_load((GITOPS / "kustomization.yaml").read_text())
    assert "../01-quickstart" in kustomization["resources"]
    suite = next(d for d in built if d["metadata"]["name"].startswith("triage-suite"))
    shipped = sorted(p.name for p in quickstart.iterdir() if p.suffix in (".py", ".json"))
    shipped.remove("agent-health.config.py")  # cells get their agent from the RunSpec
    assert sorted(suite["data"]) == shipped, "every test file of the quickstart is shipped"
    for name, text in suite["data"].items():
        assert text == (quickstart / name).read_text()


@pytest.mark.slow
async def test_the_suite_runs_against_the_example_agent(
    built: list[dict[str, Any]], triage_url: str, tmp_path: Path
) -> None:
    # The files as a cell gets them: the generated ConfigMap's data, mounted as /suite.
    suite_map = next(d for d in built if d["metadata"]["name"].startswith("triage-suite"))
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in suite_map["data"].items():
        (suite / name).write_text(text)
    script = Path(sys.executable).parent / "agent-health"
    process = await asyncio.create_subprocess_exec(
        str(script), "run", str(suite), "--agent", f"rest+{triage_url}",
        "--no-judge", "--reporter", f"json:{tmp_path / 'report.json'}",
        "--ledger", f"file://{tmp_path / 'ledger'}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    summary = json.loads((tmp_path / "report.json").read_text())["summary"]
    assert summary["passed"] >= 3
    assert summary["failed"] == summary["errored"] == 0


# -- the CI gate, with a real kubectl against the API emulator ------------------------------


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    async with serve() as (_, url), httpx.AsyncClient(base_url=url) as client:
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            answer = await client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                json=yaml.safe_load(path.read_text()),
            )
            assert answer.status_code == 201, answer.text
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": url}}],
            "users": [{"name": "test", "user": {}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "test"}}],
            "current-context": "emulator",
        }
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        yield client, kubeconfig


async def _create_run(client: httpx.AsyncClient) -> str:
    body = yaml.safe_load((GITOPS / "ci" / "pr-run.yaml").read_text())
    answer = await client.post(RUNS, json=body)
    assert answer.status_code == 201, answer.text
    name: str = answer.json()["metadata"]["name"]
    return name


async def _finish(client: httpx.AsyncClient, name: str, phase: str, rate: float | None) -> None:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": "Complete", "status": "True", "reason": phase, "message": "all cells ended",
             "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": "TestsPassed", "status": "False", "reason": "CellsFailed",
             "message": "1 of 4 cells failed", "lastTransitionTime": "2025-01-01T00:00:00Z"},
        ],
    }  # fmt: skip
    if rate is not None:
        status["passRate"] = rate
    answer = await client.patch(f"{RUNS}/{name}/status", json={"status": status}, headers=MERGE)
    assert answer.status_code == 200, answer.text


async def _gate(kubeconfig: Path, name: str, threshold: str) -> tuple[int, str]:
    environment = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KUBECTL": str(ship_support.kubectl()),
        "NAMESPACE": "evals",
    }
    process = await asyncio.create_subprocess_exec(
        "bash", str(GITOPS / "ci" / "gate.sh"), f"evaluationrun/{name}", threshold, "60s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=environment,
    )  # fmt: skip
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


@pytest.mark.parametrize(
    ("phase", "rate", "code", "says"),
    [
        ("Succeeded", 0.9, 0, "passed the gate: pass rate 0.9 >= 0.8"),
        ("Succeeded", 0.75, 1, "pass rate 0.75 is below the gate 0.8"),
        ("Failed", 0.9, 1, "ended in phase Failed"),
        ("Succeeded", None, 1, "has no pass rate"),
    ],
)
async def test_the_ci_gate_waits_then_compares_the_pass_rate(
    cluster: tuple[httpx.AsyncClient, Path], phase: str, rate: float | None, code: int, says: str
) -> None:
    client, kubeconfig = cluster
    name = await _create_run(client)
    # The operator finishes the run while (or before) the gate waits for it.
    gate = asyncio.create_task(_gate(kubeconfig, name, "0.8"))
    await _finish(client, name, phase, rate)
    returned, output = await gate
    assert returned == code, output
    assert says in output
    assert "TestsPassed=False (CellsFailed): 1 of 4 cells failed" in output


def test_the_workflow_creates_a_run_and_gates_on_it() -> None:
    workflow = yaml.safe_load((GITOPS / "ci" / "github-actions.yaml").read_text())
    steps = workflow["jobs"]["evaluate"]["steps"]
    commands = "\n".join(step.get("run", "") for step in steps)
    assert "kubectl apply -k examples/gitops" in commands
    assert "kubectl create -f examples/gitops/ci/pr-run.yaml -o name" in commands
    assert 'examples/gitops/ci/gate.sh "${{ steps.run.outputs.name }}" "$MIN_PASS_RATE"' in commands
    assert float(workflow["env"]["MIN_PASS_RATE"]) == 0.8
    assert (
        workflow["env"]["NAMESPACE"]
        == yaml.safe_load((GITOPS / "ci" / "pr-run.yaml").read_text())["metadata"]["namespace"]
    )


# -- the workflow that gates on the history (ci/history-gate.yaml) ----------------------------

HISTORY_WORKFLOW = GITOPS / "ci" / "history-gate.yaml"


def _workflow(path: Path) -> dict[str, Any]:
    # PyYAML reads the key `on` as True (YAML 1.1); GitHub reads it as "on".
    found: dict[Any, Any] = yaml.safe_load(path.read_text())
    return {("on" if k is True else k): v for k, v in found.items()}


def _steps(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    steps = workflow["jobs"]["evaluate"]["steps"]
    return {step.get("name") or step["uses"]: step for step in steps}


def _env(text: str, env: dict[str, str]) -> str:
    """``${{ env.NAME }}`` expressions replaced as the runner would."""
    return re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], text)


@pytest.mark.parametrize("name", ["github-actions.yaml", "history-gate.yaml"])
def test_the_workflows_match_githubs_workflow_schema(name: str) -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    done = ship_support.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", str(GITOPS / "ci" / name)]
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_history_workflow_keeps_the_history_in_the_cache_and_gates_on_last_green() -> None:
    workflow = _workflow(HISTORY_WORKFLOW)
    assert set(workflow["on"]) == {"pull_request", "push"}
    steps = _steps(workflow)
    restore, save = steps["Restore the history"], steps["Keep the history"]
    assert restore["uses"].startswith("actions/cache/restore@")
    assert save["uses"].startswith("actions/cache/save@")
    # the same file, saved whatever the run's outcome (a failing run is history too), under a
    # key of its own each run that the next run's restore finds by its prefix
    assert restore["with"]["path"] == save["with"]["path"]
    assert save["if"] == "always()"
    key = save["with"]["key"]
    assert key == restore["with"]["key"]
    assert "${{ github.run_id }}" in key
    prefixes = restore["with"]["restore-keys"].strip().splitlines()
    assert key.startswith(prefixes[0])
    assert prefixes[1] == "agent-health-history-main-"
    # the cached path is the default history of the suite the run step runs
    env = workflow["env"]
    assert _env(save["with"]["path"], env) == f"{env['SUITE']}/.agent-health/history.db*"
    run_step = steps["Run and gate on the last green run"]["run"]
    assert run_step.startswith('agent-health run "$SUITE" --baseline last-green')
    assert "--reporter markdown:agent-health-summary.md" in run_step
    comment = steps["Comment on the pull request"]
    assert "--body-file agent-health-summary.md" in comment["run"]
    assert workflow["permissions"]["pull-requests"] == "write"
    # the PostgreSQL variant is said where a team needs it: the secrets, in the env block
    text = HISTORY_WORKFLOW.read_text()
    assert "# AGENT_HEALTH_HISTORY: ${{ secrets.AGENT_HEALTH_HISTORY_URL }}" in text
    assert "# PGPASSWORD: ${{ secrets.AGENT_HEALTH_HISTORY_PASSWORD }}" in text


@pytest.mark.slow
def test_the_history_workflows_run_step_gates_on_the_restored_history(tmp_path: Path) -> None:
    """The run step as the runner runs it, twice, in a checkout's layout (the quickstart and
    its agent), the cached files kept between the two as the cache keeps them: the second
    run is compared with the first from the history, and the summary lands in the file the
    comment step reads and in $GITHUB_STEP_SUMMARY."""
    workflow = _workflow(HISTORY_WORKFLOW)
    steps = _steps(workflow)
    checkout = tmp_path / "checkout"
    for folder in ("01-quickstart", "agents"):
        shutil.copytree(
            ROOT / "examples" / folder,
            checkout / "examples" / folder,
            ignore=shutil.ignore_patterns(".agent-health", "__pycache__"),
        )
    bin_dir = str(Path(sys.executable).parent)
    summary = tmp_path / "step-summary.md"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENT_HEALTH_", "GITHUB_"))},
        **workflow["env"],
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "GITHUB_STEP_SUMMARY": str(summary),
        "CI": "true",
    }
    script = steps["Run and gate on the last green run"]["run"]
    cached = _env(steps["Keep the history"]["with"]["path"], workflow["env"])
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        outputs.append(done)
        assert done.returncode == 0, done.stdout + done.stderr
        assert [p.name for p in checkout.glob(cached)] == ["history.db"]
    first, second = outputs
    assert "no green run" in first.stderr  # the first run: nothing to gate on yet, exit 0
    assert "baseline: last-green = run " in second.stdout
    assert "no regression beyond the thresholds" in second.stdout
    body = (checkout / "agent-health-summary.md").read_text()
    assert body.startswith("## agent-health: ✅ all ")
    assert "Baseline: last-green = run " in body
    assert "**Gate: passed** — no regression beyond the thresholds" in body
    assert summary.read_text().count("## agent-health: ") == 2  # appended by each run
