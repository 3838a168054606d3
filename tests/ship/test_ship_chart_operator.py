"""The chart's defaults run: every rendered operator completes a run.

For the chart's defaults and each ``ci/*-values.yaml``, the Deployment is rendered with helm
and its operator container is started as a real process — the rendered command, arguments
and environment — against the API emulator; a RunSpec and an EvaluationRun are applied
and the run must succeed (the kubelet's part is played by :class:`operator_support.Kubelet`).

What a pod would have and a test process cannot, and only that, is translated: the listen
addresses bind 127.0.0.1 on free ports (the rendered ports may be taken on a shared
machine), images name the loopback registry instead of their remote host, the judge cache
and history volumes are temporary directories at the mounts' places, a ``secretKeyRef`` is
the Secret's value, a history's PostgreSQL is the tests' own server (its password in the
file the chart mounts from the Secret), and the API server is reached through a kubeconfig
instead of the pod's service account (the same login path,
:func:`agent_health.cluster.kube.login`). A scenario with a history must find its run there,
with the counts of its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_health import history
from support.operator_support import (
    EXAMPLE_SECRETS,
    Kubelet,
    cluster,
    kubelet,
    listing,
    offered_secret,
    until,
)
from support.ship_support import SCENARIOS, by_kind, helm, render

pytestmark = pytest.mark.slow
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))
ADDRESS = re.compile(r"^(--(?:metrics|judge|health)-addr)=.*$")
IMAGE = re.compile(r"^(--(?:controller|gateway)-image)=[^/]+/(.*)$")


def operator_container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [
        d
        for d in by_kind(documents, "Deployment")
        if any(c["name"] == "operator" for c in d["spec"]["template"]["spec"]["containers"])
    ]
    spec = deployment["spec"]["template"]["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "operator")
    return dict(container)


def command_line(container: dict[str, Any], registry: str, volume: Path) -> list[str]:
    """The rendered command, translated for a process on this machine (module docstring)."""
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    cache = mounts.get("judge-cache")
    argv = []
    for arg in [*container["command"], *container["args"]]:
        arg = ADDRESS.sub(r"\1=127.0.0.1:0", arg)
        arg = IMAGE.sub(rf"\1={registry}/\2", arg)
        if cache is not None and arg.startswith("--judge-cache="):
            arg = arg.replace(cache, str(volume), 1)
        argv.append(arg)
    return argv


def environment(container: dict[str, Any], registry: str, kubeconfig: Path) -> dict[str, str]:
    # `agent-health` on PATH, as in the image: this environment's.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"PATH": path, "HOME": str(kubeconfig.parent)}
    for item in container.get("env", []):
        env[item["name"]] = item.get("value", "secret-from-a-secretKeyRef")
    env["AGENT_HEALTH_INSECURE_REGISTRIES"] = registry  # the loopback registry speaks http
    env["KUBECONFIG"] = str(kubeconfig)
    return env


def history_here(
    container: dict[str, Any], env: dict[str, str], here: Path, request: pytest.FixtureRequest
) -> str | None:
    """Translate the rendered history (module docstring) in ``env``; the URL to read it at."""
    url = env.get("AGENT_HEALTH_HISTORY")
    if url is None:
        return None
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    if url.startswith("sqlite"):
        mounted = mounts["history"]
        assert url.startswith(f"sqlite:///{mounted}/"), (url, mounted)
        here.mkdir()
        env["AGENT_HEALTH_HISTORY"] = url.replace(mounted, str(here), 1)
        return env["AGENT_HEALTH_HISTORY"]
    from support import postgres_support

    server: postgres_support.Server = request.getfixturevalue("postgres_server")
    database = server.new_database()
    env["AGENT_HEALTH_HISTORY"] = server.url(database)
    secret = env["AGENT_HEALTH_HISTORY_PASSWORD_FILE"]
    assert secret.startswith(mounts["history-password"] + "/"), secret
    here.mkdir()
    (here / "password").write_text(postgres_support.PASSWORD)
    env["AGENT_HEALTH_HISTORY_PASSWORD_FILE"] = str(here / "password")
    return server.url(database, password=True)  # the test reads it with the password at hand


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "operator", "user": {"token": "operator"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "operator"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def flag(argv: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"{name}=")), None)


@pytest.mark.parametrize("scenario", [None, *SCENARIOS], ids=["defaults", *SCENARIOS])
async def test_the_rendered_operator_completes_a_run(
    scenario: str | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    container = operator_container(render(helm(), scenario))
    volume = tmp_path / "judge-cache"
    volume.mkdir()
    async with cluster() as k8s:
        registry = k8s.registry.host
        argv = command_line(container, registry, volume)
        env = environment(container, registry, write_kubeconfig(tmp_path / "kubeconfig", k8s.url))
        kept = history_here(container, env, tmp_path / "history", request)
        namespace = flag(argv, "--namespace") or "default"
        default_ledger = flag(argv, "--ledger-url") or ""
        runspec, run = k8s.example()
        if default_ledger.startswith("configmap://"):
            del runspec["spec"]["ledger"]  # the chart's default ledger records the run
        else:  # none, or an object store this machine cannot reach: the RunSpec names one
            runspec["spec"]["ledger"] = {"url": "configmap://{namespace}/triage-ledger-{run}"}
        for body in (runspec, run):
            body["metadata"]["namespace"] = namespace
        run["spec"] |= {"repeats": 2}
        log = tmp_path / "operator.log"
        fake = Kubelet(k8s, TESTS, None, namespace=namespace)
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
            )
            try:
                async with kubelet(fake):
                    if namespace != "default":  # the example's Secrets, offered to runs there
                        for name in EXAMPLE_SECRETS:
                            secret = offered_secret(name, namespace)
                            path = f"/api/v1/namespaces/{namespace}/secrets"
                            answer = await k8s.client.post(path, json=secret)
                            assert answer.status_code == 201, answer.text
                    for body in (runspec, run):
                        plural = "runspecs" if body["kind"] == "RunSpec" else "evaluationruns"
                        path = f"/apis/agenthealth.dev/v1alpha1/namespaces/{namespace}/{plural}"
                        answer = await k8s.client.post(path, json=body)
                        assert answer.status_code == 201, answer.text

                    def done() -> dict[str, Any] | None:
                        assert process.returncode is None, log.read_text()[-3000:]
                        stored = k8s.emulator.read(
                            "evaluationruns.agenthealth.dev", namespace, "triage-nightly"
                        )
                        status = dict(stored.get("status") or {})
                        return status if status.get("phase") in ("Succeeded", "Failed") else None

                    status = await until(done, "the run to end", attempts=6000)
                    if kept is not None:

                        def recorded() -> bool:
                            stored = k8s.emulator.read(
                                "evaluationruns.agenthealth.dev", namespace, "triage-nightly"
                            )
                            conditions = (stored.get("status") or {}).get("conditions", [])
                            said = {c["type"]: c["status"] for c in conditions}
                            return said.get("Recorded") == "True"

                        await until(recorded, "the run recorded", attempts=6000)
                if default_ledger.startswith("configmap://"):  # the chart's ledger holds it
                    url = default_ledger.format(namespace=namespace, run="triage-nightly")
                    ledger_ns, ledger_name = url.removeprefix("configmap://").split("/")
                    assert k8s.emulator.exists("configmaps", ledger_ns, ledger_name), url
            finally:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(process.wait(), 60)
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    assert status["phase"] == "Succeeded", (status, log.read_text()[-3000:])
    assert status["counts"]["passed"] == 2
    if kept is not None:  # the chart's history holds the run, as its status counts it
        with history.open_history(kept, create=False) as h:
            (run_kept,) = h.runs()
        assert (run_kept.source, run_kept.suite) == ("operator", f"{namespace}/triage")
        assert (run_kept.total, run_kept.passed) == (2, 2)
    assert process.returncode == 0, log.read_text()[-3000:]  # SIGTERM: a clean stop
    assert "Traceback" not in log.read_text()


def test_the_translation_keeps_every_other_argument() -> None:
    container = {
        "command": ["agent-health"],
        "args": [
            "operator", "--health-addr=0.0.0.0:8080", "--judge-cache=/var/cache/x",
            "--controller-image=ghcr.io/a/controller:1", "--ledger-url=configmap://{namespace}/l",
        ],
        "volumeMounts": [{"name": "judge-cache", "mountPath": "/var/cache/x"}],
    }  # fmt: skip
    argv = command_line(container, "127.0.0.1:5000", Path("/tmp/v"))
    assert argv == [
        "agent-health", "operator", "--health-addr=127.0.0.1:0", "--judge-cache=/tmp/v",
        "--controller-image=127.0.0.1:5000/a/controller:1",
        "--ledger-url=configmap://{namespace}/l",
    ]  # fmt: skip
