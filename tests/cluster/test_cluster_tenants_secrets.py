"""The operator reads a Secret for a tenant only when it is offered, and never one of its own.

Each attack of issue 16 is replayed against the real operator on the API emulator: a
tenant's RunSpec names a Secret through ``spec.judge.secretRef`` (the operator would send
its value to the RunSpec's own ``baseUrl``) or ``env[].valueFrom`` (the kubelet would hand it
to the target). The run fails with ``SecretNotOffered``, the message naming the field, the
Secret and the label to add; the tenant's endpoint never sees a request and no cell starts.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.cluster.cells import cellsecrets
from agent_health.cluster.reconcile import secretrefs
from support.judge_servers import Answer, ScriptedModel
from support.operator_support import (
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    listing,
    offered_secret,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))


def failed(k8s: Any, run: str) -> dict[str, Any] | None:
    status = k8s.run(run).get("status") or {}
    if status.get("phase") != "Failed":
        return None
    return next(c for c in status["conditions"] if c["type"] == "Failed")


def renamed(body: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    return body | {
        "metadata": {"name": name, "namespace": "default"},
        "spec": body["spec"] | spec,
    }


async def label(k8s: Any, name: str) -> None:
    """The tenant labels a Secret as offered (it may: it is its namespace)."""
    answer = await k8s.client.patch(
        f"/api/v1/namespaces/default/secrets/{name}",
        json={"metadata": {"labels": {secretrefs.LABEL: secretrefs.OFFERED}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert answer.status_code == 200, answer.text


async def test_a_judge_secret_ref_to_another_runs_cell_tokens_is_refused() -> None:
    """The attack: read a live run's controller token through the judge's API key."""
    async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "ok")) as thief:
        async with cluster() as k8s:
            example, template = k8s.example(ledger=LEDGER)
            fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
            async with kubelet(fake), k8s.operator():
                await k8s.apply(example)
                await k8s.apply(renamed(template, "victim", repeats=1))
                await until(lambda: fake.held, "the victim's live cell")
                victim = next(p for p in k8s.pods() if p["metadata"]["name"] in fake.held)
                place = cellsecrets.place_of(victim)
                assert place is not None
                tokens = place.secret  # the victim run's shared token Secret
                await label(k8s, tokens)  # even labelled, it stays the operator's
                judge = {
                    "provider": "openai", "model": "m", "baseUrl": thief.url,
                    "secretRef": {"name": tokens, "key": place.item(cellsecrets.CONTROLLER)},
                }  # fmt: skip
                await k8s.apply(renamed(example, "thief", judge=judge))
                await k8s.apply(renamed(template, "steal", runSpecRef={"name": "thief"}, repeats=1))
                refused = await until(lambda: failed(k8s, "steal"), "the thief's run to fail")
        assert refused["reason"] == "SecretNotOffered"
        assert refused["message"].startswith(
            f"RunSpec thief: spec.judge.secretRef names Secret default/{tokens}, "
        )
        assert "a run can never use it" in refused["message"]
        assert thief.requests == []  # the token never left the operator


async def test_an_env_value_from_a_secret_not_offered_is_refused_with_the_label_to_add() -> None:
    async with cluster() as k8s:
        example, template = k8s.example(ledger=LEDGER)
        answer = await k8s.client.post(
            "/api/v1/namespaces/default/secrets",
            json=offered_secret("payroll-db", "default", offered=False),
        )
        assert answer.status_code == 201, answer.text
        target = example["spec"]["target"]
        env = [{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "payroll-db", "key": "k"}}}]
        spec = renamed(example, "nosy", target=target | {"env": env})
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator():
            await k8s.apply(spec)
            await k8s.apply(renamed(template, "nosy-run", runSpecRef={"name": "nosy"}))
            refused = await until(lambda: failed(k8s, "nosy-run"), "the run to fail")
        assert refused["reason"] == "SecretNotOffered"
        assert refused["message"] == (
            "RunSpec nosy: spec.target.env[DB].valueFrom.secretKeyRef names Secret "
            "default/payroll-db, which is not offered to runs: the operator uses a Secret for "
            "a RunSpec only when it is labelled agenthealth.dev/usable-by-runs=true (kubectl "
            "label secret payroll-db -n default agenthealth.dev/usable-by-runs=true)"
        )
        assert not k8s.pods()  # no cell was made to carry it


async def test_a_peer_env_reading_another_runs_ledger_key_is_refused() -> None:
    async with cluster() as k8s:
        example, template = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(example)
            await k8s.apply(renamed(template, "victim", repeats=1))
            await until(lambda: fake.held, "the victim's live cell")
            key = cellsecrets.ledger_key_secret_name("victim")
            peers = example["spec"]["peers"]
            source = {"secretKeyRef": {"name": key, "key": cellsecrets.LEDGER_KEY}}
            peers = [peers[0] | {"env": [{"name": "K", "valueFrom": source}]}]
            await k8s.apply(renamed(example, "forger", peers=peers))
            await k8s.apply(renamed(template, "forge", runSpecRef={"name": "forger"}))
            refused = await until(lambda: failed(k8s, "forge"), "the forger's run to fail")
        assert refused["reason"] == "SecretNotOffered"
        assert (
            f"spec.peers[logs].env[K].valueFrom.secretKeyRef names Secret default/{key}"
            in (refused["message"])
        )
        assert "named like agent-health's own" in refused["message"]


async def test_nothing_in_the_operators_own_namespace_is_offered() -> None:
    """A RunSpec beside the operator cannot borrow its credentials, labelled or not."""
    async with cluster() as k8s:
        example, template = k8s.example(ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator(operator_namespace="default"):
            await k8s.apply(example)
            await k8s.apply(template)
            refused = await until(lambda: failed(k8s, "triage-nightly"), "the run to fail")
        assert refused["reason"] == "SecretNotOffered"
        assert "in the operator's own namespace, where its credentials live" in (refused["message"])


async def test_a_run_that_skips_judging_needs_no_judge_secret_and_one_that_judges_does() -> None:
    """The keyless first run (docs/operator.md, "On kind"): a RunSpec names a judge Secret
    that does not exist yet; a ``skipJudge`` run never reads it, so it runs."""
    async with cluster() as k8s:
        example, template = k8s.example(ledger=LEDGER)
        judge = example["spec"]["judge"] | {"secretRef": {"name": "not-made-yet", "key": "k"}}
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator():
            await k8s.apply(renamed(example, "keyless", judge=judge))
            await k8s.apply(
                renamed(template, "skips", runSpecRef={"name": "keyless"}, skipJudge=True)
            )
            await until(lambda: k8s.pods(), "the skipJudge run's cells")
            await k8s.apply(renamed(template, "judges", runSpecRef={"name": "keyless"}))
            refused = await until(lambda: failed(k8s, "judges"), "the judging run to fail")
            assert failed(k8s, "skips") is None
        assert refused["reason"] == "SecretNotOffered"
        assert (
            "spec.judge.secretRef names Secret default/not-made-yet, which does not exist"
            in (refused["message"])
        )


@pytest.mark.parametrize("agent", ["candidate", "stable"])
async def test_a_matrix_agents_env_is_held_to_the_same_rule_as_the_targets(agent: str) -> None:
    """Issue 34 item 2: every agent of a matrix is a target its cells run, whether or not
    the run names it: an un-offered Secret in any ``spec.targets[].env`` fails the run with
    the error a single target gets, and no cell carries it."""
    async with cluster() as k8s:
        example, template = k8s.example(ledger=LEDGER)
        answer = await k8s.client.post(
            "/api/v1/namespaces/default/secrets",
            json=offered_secret("payroll-db", "default", offered=False),
        )
        assert answer.status_code == 201, answer.text
        target = example["spec"]["target"]
        env = [{"name": "DB", "valueFrom": {"secretKeyRef": {"name": "payroll-db", "key": "k"}}}]
        targets = [
            target | {"name": name} | ({"env": env} if name == agent else {})
            for name in ("stable", "candidate")
        ]
        spec = renamed(example, "matrix", targets=targets)
        async with kubelet(Kubelet(k8s, TESTS, LEDGER)), k8s.operator():
            await k8s.apply(spec)
            run = renamed(template, "matrix-run", runSpecRef={"name": "matrix"})
            await k8s.apply(run | {"spec": run["spec"] | {"agents": ["candidate"]}})
            done = await until(lambda: finished(k8s, "matrix-run"), "the run to end")
        assert done["phase"] == "Failed", done  # was: Succeeded, the Secret in its cells
        refused = condition(done, "Failed")
        assert refused["reason"] == "SecretNotOffered"
        assert refused["message"] == (
            f"RunSpec matrix: spec.targets[{agent}].env[DB].valueFrom.secretKeyRef names Secret "
            "default/payroll-db, which is not offered to runs: the operator uses a Secret for "
            "a RunSpec only when it is labelled agenthealth.dev/usable-by-runs=true (kubectl "
            "label secret payroll-db -n default agenthealth.dev/usable-by-runs=true)"
        )
        assert not k8s.pods()  # no cell was made to carry it
