"""The operator end to end: kopf for real against the emulator, the test playing kubelet.

The example RunSpec and EvaluationRun (``examples/run.yaml``) are applied; the operator pins
their images against a loopback registry, discovers the suite with a pod, schedules cells at
the run's parallelism and grades each from its ledger, written as a gateway would.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
from agent_health.cluster.cells import cellsecrets, manifests, netpol
from agent_health.cluster.reconcile import secretrefs
from agent_health.ledger import keys
from support.judge_servers import Answer, ScriptedModel
from support.operator_support import (
    RUNS,
    Cell,
    Kubelet,
    cluster,
    kubelet,
    listing,
    max_unfinished,
    offered_secret,
    pod_creations,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(
    ("suite/rca.py::payment rca", ["category:RCA"]),
    ("suite/rca.py::payment timeout", ["category:RCA", "difficulty:hard"]),
    ("suite/rca.py::billing rca", ["category:RCA"]),  # not matched by grep "payment"
    ("suite/ui.py::payment page", ["category:UI"]),  # not labelled category:RCA
)


def outcome(cell: Cell) -> str:
    return "failed" if cell.test_id.endswith("timeout") and cell.repeat == 0 else "passed"


def phase(run: dict) -> str | None:  # type: ignore[type-arg]
    return run.get("status", {}).get("phase")


async def test_the_example_run_is_resolved_scheduled_graded_and_reported() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        async with kubelet(fake), k8s.operator() as op:
            await k8s.apply(runspec)
            await k8s.apply(run)
            done = await until(
                lambda: (
                    phase(k8s.run("triage-nightly")) in ("Succeeded", "Failed")
                    and k8s.run("triage-nightly")
                ),
                "the run to finish",
            )
            # RunSpec: digests and discovery in its status.
            spec_status = k8s.runspec("triage")["status"]
            assert set(spec_status["imageDigests"]) == {
                runspec["spec"]["target"]["image"],
                runspec["spec"]["peers"][0]["image"],
            }
            assert spec_status["testCount"] == 4
            assert len(spec_status["discoveredTests"]) == 4
            kinds = {c["type"]: c["status"] for c in spec_status["conditions"]}
            assert kinds == {"Resolved": "True", "Discovered": "True", "Ready": "True"}

            # The run: 2 tests selected × 3 repeats, one failing repeat.
            status = done["status"]
            assert status["phase"] == "Succeeded", status
            assert status["counts"] == {
                "total": 6, "pending": 0, "queued": 0, "running": 0, "passed": 5, "failed": 1,
                "errored": 0, "skipped": 0,
                "erroredByCause": {"agent": 0, "judge": 0, "test": 0, "infra": 0},
                "unverifiedClaims": 0, "conversations": 0, "goalMet": 0,
            }  # fmt: skip
            assert status["passRate"] == pytest.approx(5 / 6)
            assert status["passAtK"] == 1.0
            assert status["passHatK"] == 0.5
            summaries = {t["id"]: t for t in status["tests"]}
            assert summaries["suite/rca.py::payment timeout"]["failed"] == 1
            assert summaries["suite/rca.py::payment rca"]["passed"] == 3
            conditions = {c["type"]: c for c in status["conditions"]}
            assert conditions["Complete"]["status"] == "True"
            assert conditions["TestsPassed"]["status"] == "False"

            # Parallelism held, no cell created twice, pods pinned by digest.
            assert max_unfinished(k8s.emulator) <= 4
            assert sorted(pod_creations(k8s.emulator).values()) == [1] * 6
            pod = k8s.pods()[0]
            images = [c["image"] for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]]
            assert all("@sha256:" in i for i in images)

            # Batched status: far fewer patches than changes, never more than needed.
            patches = [
                r
                for r in k8s.operator_requests()
                if r.method.value == "PATCH" and r.subresource == "status"
                and r.resource.plural == "evaluationruns"
            ]  # fmt: skip
            assert 2 <= len(patches) <= 12
            await until(lambda: op.status.patches_sent == len(patches), "the last answer")

            # Events on phase changes; metrics exposed.
            reasons = [
                e["reason"]
                for e in k8s.emulator.store.list(
                    k8s.emulator.store.kinds[("", "events")], "default", lambda _l: True
                )
                if e["involvedObject"]["name"] == "triage-nightly"
            ]
            assert {"Pending", "Running", "Succeeded"} <= set(reasons)
            async with httpx.AsyncClient() as client:
                scraped = (await client.get(f"http://127.0.0.1:{op.ports['metrics']}/metrics")).text
                ready = await client.get(f"http://127.0.0.1:{op.ports['health']}/readyz")
            graded = 'cells_graded_total{namespace="default",runspec="triage",status="passed"} 5.0'
            assert f"agent_health_{graded}" in scraped
            assert (
                'agent_health_run_pass_rate{namespace="default",run="triage-nightly",runspec="triage"}'
                in scraped
            )
            assert ready.status_code == 200
            assert not op.runs.tokens  # no cell is live: the judge service accepts nobody


async def test_the_judge_service_answers_only_live_cells_controller_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = await ScriptedModel.start("openai", default=Answer(True, 0.9, "it says x"))
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    environ = {
        "AGENT_HEALTH_JUDGE_PROVIDER": "openai",
        "AGENT_HEALTH_JUDGE_MODEL": "judge-model",
        "AGENT_HEALTH_JUDGE_BASE_URL": model.url,
        "AGENT_HEALTH_JUDGE_API_KEY_ENV": "JUDGE_KEY",
    }
    try:
        async with cluster() as k8s:
            runspec, run = k8s.example(ledger=LEDGER)
            del runspec["spec"]["judge"]  # none of its own: the operator's judge, offered to all
            run["spec"] |= {"repeats": 1, "parallelism": 1}
            fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
            cache = str(tmp_path / "judge.sqlite")
            offered = {"judge_cache": cache, "environ": environ, "judge_for_all_runs": True}
            async with kubelet(fake), k8s.operator(**offered) as op:
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: op.runs.tokens, "a live cell's token")
                pod = k8s.pods()[0]
                cell = pod["metadata"]["name"]
                controller = pod["spec"]["containers"][0]
                env = {e["name"]: e.get("value") for e in controller["env"]}
                assert env["AGENT_HEALTH_JUDGE_MODEL"] == "judge-model"  # offered to all runs
                secret, items = k8s.cell_secret(pod)
                owner = secret["metadata"]["ownerReferences"][0]
                assert (owner["kind"], owner["name"]) == ("EvaluationRun", "triage-nightly")
                assert secret["metadata"]["name"] == "triage-nightly-tokens-0"
                assert set(items) == {"controller", "peer-logs", "ledger-key"}
                run_key = base64.b64decode(
                    k8s.emulator.read(
                        "secrets", "default", cellsecrets.ledger_key_secret_name("triage-nightly")
                    )["data"]["key"]
                )
                # The cell's gateway gets a key derived for this cell alone, never the run's.
                assert items["ledger-key"] == keys.cell_key(run_key, cell) != run_key
                token = items["controller"].decode()
                peer = items["peer-logs"].decode()
                url = f"http://127.0.0.1:{op.ports['judge']}/api/judge"
                call = {"text": "the answer is x", "criteria": "says x"}
                async with httpx.AsyncClient() as client:

                    async def judge(bearer: str) -> httpx.Response:
                        headers = {"Authorization": f"Bearer {bearer}"}
                        return await client.post(url, json=call, headers=headers)

                    good, again = await judge(token), await judge(token)
                    refused = [(await judge(t)).status_code for t in ("nope", peer)]
                    judged = len(model.requests)
                    # A simulated user asks the same model: its line counts as a judge call
                    # (this model answers verdicts, not a user's line: an errored one).
                    asked = {"goal": "get a refund", "conversation": [], "turn": 1}
                    user = await client.post(
                        url + "/user", json=asked, headers={"Authorization": f"Bearer {token}"}
                    )
                    scraped = await client.get(f"http://127.0.0.1:{op.ports['metrics']}/metrics")
                assert refused == [401, 401]
                assert good.status_code == 200, good.text
                assert (good.json()["passed"], good.json()["score"]) == (True, 0.9)
                assert again.json()["cached"] is True  # the operator's persistent cache
                assert judged == 1
                assert "sk-test" in str(model.requests[0].headers)
                assert (
                    'agent_health_judge_calls_total{model="judge-model",outcome="cached"} 1.0'
                    in (scraped.text)
                )
                assert user.status_code == 200, user.text
                assert user.json()["errored"] is True
                assert (
                    'agent_health_judge_calls_total{model="judge-model",outcome="errored"} 1.0'
                    in (scraped.text)
                )
    finally:
        await model.close()


def judged_runspec(
    runspec: dict[str, Any], name: str, model: str, url: str, secret: str
) -> dict[str, Any]:
    """The example RunSpec renamed, judged by ``model`` at ``url`` with its key in ``secret``."""
    judge = {"provider": "openai", "model": model, "baseUrl": url}
    judge["secretRef"] = {"name": secret, "key": "api-key"}  # type: ignore[assignment]
    spec = runspec["spec"] | {"judge": judge}
    return runspec | {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def judged_run(run: dict[str, Any], name: str, runspec: str) -> dict[str, Any]:
    spec = run["spec"] | {"runSpecRef": {"name": runspec}, "repeats": 1, "parallelism": 1}
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


async def secret(k8s: Any, name: str, key: str) -> None:
    """A judge key in a Secret offered to runs (``agenthealth.dev/usable-by-runs=true``)."""
    body = offered_secret(name, "default")
    body["data"] = {"api-key": base64.b64encode(key.encode()).decode()}
    answer = await k8s.client.post("/api/v1/namespaces/default/secrets", json=body)
    assert answer.status_code == 201, answer.text


async def offer(k8s: Any, name: str, offered: bool) -> None:
    """Label the Secret as offered to runs, or take the label off."""
    value = secretrefs.OFFERED if offered else None
    answer = await k8s.client.patch(
        f"/api/v1/namespaces/default/secrets/{name}",
        json={"metadata": {"labels": {secretrefs.LABEL: value}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200, answer.text


async def test_each_cell_is_judged_by_its_own_runspecs_judge_with_the_secrets_key(
    tmp_path: Path,
) -> None:
    model_a = await ScriptedModel.start(
        "openai", default=Answer(True, 0.9, "a: says x"), api_key="sk-a"
    )
    model_b = await ScriptedModel.start(
        "openai", default=Answer(False, 0.2, "b: no"), api_key="sk-b"
    )
    try:
        async with cluster() as k8s:
            example, template = k8s.example(ledger=LEDGER)
            fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
            cache = str(tmp_path / "judge.sqlite")
            await secret(k8s, "judge-a", "sk-a")
            await secret(k8s, "judge-b", "sk-b")
            async with kubelet(fake), k8s.operator(judge_cache=cache) as op:
                await k8s.apply(
                    judged_runspec(example, "spec-a", "model-a", model_a.url, "judge-a")
                )
                await k8s.apply(
                    judged_runspec(example, "spec-b", "model-b", model_b.url, "judge-b")
                )
                await k8s.apply(judged_run(template, "run-a", "spec-a"))
                await k8s.apply(judged_run(template, "run-b", "spec-b"))
                await until(lambda: len(op.runs.tokens) == 2, "a live cell in each run")
                tokens = {}
                for pod in k8s.pods():
                    run_name = pod["metadata"]["ownerReferences"][0]["name"]
                    tokens[run_name] = k8s.cell_secret(pod)[1]["controller"].decode()
                url = f"http://127.0.0.1:{op.ports['judge']}/api/judge"
                async with httpx.AsyncClient() as client:

                    async def judge(bearer: str, model: str) -> httpx.Response:
                        call = {"text": "the answer is x", "criteria": "says x", "model": model}
                        headers = {"Authorization": f"Bearer {bearer}"}
                        return await client.post(url, json=call, headers=headers)

                    a = await judge(tokens["run-a"], "model-a")
                    await offer(k8s, "judge-b", False)  # withdrawn after the run started
                    missing = await judge(tokens["run-b"], "model-b")
                    await offer(k8s, "judge-b", True)
                    b = await judge(tokens["run-b"], "model-b")
                    unknown = await judge("not-a-cell", "model-a")
                assert a.status_code == 200, a.text
                assert (a.json()["passed"], a.json()["reasoning"]) == (True, "a: says x")
                assert missing.status_code == 502
                assert (
                    "Secret default/judge-b, which is not offered to runs"
                    in (missing.json()["error"])
                )
                assert b.status_code == 200, b.text
                assert (b.json()["passed"], b.json()["reasoning"]) == (False, "b: no")
                assert unknown.status_code == 401
                for server, key, name in (
                    (model_a, "sk-a", "model-a"),
                    (model_b, "sk-b", "model-b"),
                ):
                    assert len(server.requests) == 1  # no retry: the right key at once
                    seen = server.requests[0]
                    assert seen.headers["Authorization"] == f"Bearer {key}"
                    assert seen.body["model"] == name
                assert len(op.judges.built) == 2
            assert not op.judges.built  # closed with the operator
    finally:
        await model_a.close()
        await model_b.close()


def policies(k8s: Any) -> list[dict[str, Any]]:
    """The runs' NetworkPolicies (not the RunSpecs' discovery ones)."""
    kind = k8s.emulator.store.kinds[("networking.k8s.io", "networkpolicies")]
    return list(
        k8s.emulator.store.list(kind, "default", lambda labels: manifests.LABEL_RUN in labels)
    )


def creations(k8s: Any) -> list[str]:
    """What the operator POSTed, in order: runs' ``networkpolicies`` and cell ``pods``."""
    found = []
    for r in k8s.operator_requests():
        plural = r.resource.plural if r.resource else None
        if r.method.value != "POST" or plural not in ("networkpolicies", "pods"):
            continue
        labels = (r.data or {}).get("metadata", {}).get("labels", {})
        run_policy = plural == "networkpolicies" and manifests.LABEL_RUN in labels
        if run_policy or labels.get(manifests.LABEL_COMPONENT) == "cell":
            found.append(plural)
    return found


async def test_a_fenced_run_gets_one_network_policy_owned_by_it_before_its_first_cell() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"repeats": 1, "parallelism": 1}
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
        egress = ("172.18.0.0/16:6443", "0.0.0.0/0~10.0.0.0/8:443")
        fenced = {
            "network_policy": True,
            "egress": tuple(netpol.egress(e) for e in egress),
            "gateway_service_account": "cell-gateway",
        }
        async with kubelet(fake):
            async with k8s.operator(**fenced):
                await k8s.apply(runspec)
                created = await k8s.apply(run)
                await until(lambda: fake.held, "a running cell")
            async with k8s.operator(**fenced):  # it adopts the run: its policy is a 409
                await until(lambda: creations(k8s).count("networkpolicies") == 2, "a 2nd create")
                fake.outcome = lambda _: "passed"
                for name in list(fake.held):
                    await fake.release(name)
                await until(lambda: phase(k8s.run("triage-nightly")) == "Succeeded", "the run")
        assert creations(k8s)[:2] == ["networkpolicies", "pods"]
        (policy,) = policies(k8s)
        assert kubernetes_validate.validate(policy, "1.31", strict=True) == "1.31"
        (owner,) = policy["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "EvaluationRun", "triage-nightly", created["metadata"]["uid"],
        )  # fmt: skip
        selector = policy["spec"]["podSelector"]["matchLabels"].items()
        cells = k8s.pods()
        assert cells
        assert all(selector <= c["metadata"]["labels"].items() for c in cells)
        assert not any(selector <= p["metadata"]["labels"].items() for p in k8s.pods("discovery"))
        ipv4_metadata = [m for m in netpol.METADATA if ":" not in m]
        assert [r["to"][0] for r in policy["spec"]["egress"][2:]] == [
            {"ipBlock": {"cidr": "172.18.0.0/16"}},
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", *ipv4_metadata]}},
        ]
        assert policy["spec"]["egress"][3]["ports"] == [{"protocol": "TCP", "port": 443}]
        # A ConfigMap ledger's cells run as no identity: not the operator's
        # --gateway-service-account (meant for object stores), and their gateways hold no
        # token (they log their records; the operator stores them).
        assert not any("serviceAccountName" in c["spec"] for c in cells)
        for cell in cells:
            gateway = next(c for c in cell["spec"]["initContainers"] if c["name"] == "gateway")
            assert "--ledger-log" in gateway["args"]
            assert "--ledger" not in gateway["args"]
            assert all(m["name"] != "gateway-sa" for m in gateway["volumeMounts"])
        # Deleting the run collects its policy.
        answer = await k8s.client.delete(f"{RUNS}/triage-nightly")
        assert answer.status_code == 200, answer.text
        await until(lambda: not policies(k8s), "the policy to go with its run")
