"""What a warm pool never hands a cell: a sandbox whose target holds another principal's key
or token, or a template or pool the operator did not make (issue 34, items 1 and 3).

The operator runs for real (kopf) against the emulator with Agent Sandbox's stand-ins
(``tests/support/node/sandboxpools.py``: templates, warm pools, claims, a generated Secret per
sandbox whose env references the controller rewrites in *every* container). The tenant is the
attacker: it writes RunSpecs, and may create or replace SandboxTemplates and SandboxWarmPools
in its namespace, or edit a Sandbox.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from support.node import sandboxpools
from support.operator_support import (
    Cluster,
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    offered_secret,
    until,
)
from test_cluster_warm import EXT, LEDGER, TESTS, named_run, pools, templates, warm_example

pytestmark = pytest.mark.slow
KEEP = 600  # seconds a pool stays up after a run: the next run finds it warm


def _bindings(stand_in: sandboxpools.SandboxPools, run: str) -> list[sandboxpools.Binding]:
    return [b for b in stand_in.bindings if b.claim.startswith(f"{run}-")]


def _env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


# -- item 1: the sandbox's generated Secret is the operator's alone ------------------------


@pytest.mark.parametrize(
    ("where", "secret", "key", "field"),
    [
        # the template's old logical name: the controller rewrote it in the target's env too
        ("target", "cell-keys", "sandbox-key", "spec.target.env[STOLEN]"),
        ("target", "cell-keys", "controller", "spec.target.env[STOLEN]"),
        # a sandbox's own name for it, and a logical name of the current shape
        ("target", "triage-g1-abcde-cell-keys", "sandbox-key", "spec.target.env[STOLEN]"),
        ("peer", "cell-keys-0123456789abcdef", "controller", "spec.peers[logs].env[STOLEN]"),
        # the controller (the tenant's own test code) with the key that unwraps the ledger's
        ("otlp", "cell-keys", "sandbox-key", "spec.otlp.headersSecretRef"),
    ],
)
async def test_a_runspec_naming_the_sandboxes_generated_secret_is_refused(
    where: str, secret: str, key: str, field: str
) -> None:
    async with cluster() as k8s:
        # The tenant makes a Secret of that name and offers it (its namespace, its label): a
        # check of the label alone lets the reference through, and the sandbox controller
        # then points it at the sandbox's own tokens and key.
        offered = offered_secret(secret, "default")
        offered["data"] = {key: "dGVuYW50"}
        answer = await k8s.client.post("/api/v1/namespaces/default/secrets", json=offered)
        assert answer.status_code == 201, answer.text
        runspec_body, run = warm_example(k8s, replicas=1)
        spec = runspec_body["spec"]
        if where == "target":
            spec["target"]["env"] = [_env("STOLEN", secret, key)]
        elif where == "peer":
            spec["peers"][0]["env"] = [_env("STOLEN", secret, key)]
        else:
            spec["otlp"] = {
                "endpoint": "http://collector.example:4318",
                "headersSecretRef": {"name": secret, "key": key},
            }
        async with (
            sandboxpools.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS, LEDGER)),
            k8s.operator(sandboxes=True, warm_pools=True),
        ):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "stealer", repeats=1))
            done = await until(lambda: finished(k8s, "stealer"), "the run to end")
        # Was: Succeeded, its target (or controller) reading the sandbox key or a token.
        assert done["phase"] == "Failed", done
        refused = condition(done, "Failed")
        assert refused["reason"] == "SecretNotOffered"
        assert refused["message"].startswith(f"RunSpec triage: {field}"), refused["message"]
        assert "named like agent-health's own" in refused["message"]
        assert not _bindings(stand_in, "stealer")  # no sandbox was claimed to carry it
        assert not templates(k8s)


@pytest.mark.parametrize("edit", ["key-to-target", "target-image"])
async def test_a_sandbox_edited_after_the_operator_made_it_is_never_handed_a_cell(
    edit: str,
) -> None:
    """Whatever edited it: a pooled Sandbox whose pod would give the target its sandbox key,
    or run another target than the template's, is refused at the hand-over (the cell
    errors, infra) and never learns a cell."""
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=1)
        runspec_body["spec"]["isolation"]["warmPool"]["keepSeconds"] = KEEP
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with (
            sandboxpools.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(fake),
            k8s.operator(sandboxes=True, warm_pools=True),
        ):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "first", repeats=1, parallelism=1))
            done = await until(lambda: finished(k8s, "first"), "the first run")
            assert done["phase"] == "Succeeded", done
            (pool,) = pools(k8s)
            pooled = await until(lambda: _idle_sandbox(k8s, pool), "a ready pooled sandbox")
            name = pooled["metadata"]["name"]
            recorded = pooled["metadata"]["annotations"][sandboxpools.GENERATED_SECRETS]
            (concrete,) = json.loads(recorded).values()
            containers = pooled["spec"]["podTemplate"]["spec"]["initContainers"]
            index = next(n for n, c in enumerate(containers) if c["name"] == "target")
            where = f"/spec/podTemplate/spec/initContainers/{index}"
            patch = (
                [
                    {
                        "op": "add",
                        "path": f"{where}/env/-",
                        "value": _env("STOLEN", concrete, "sandbox-key"),
                    }
                ]
                if edit == "key-to-target"
                else [{"op": "replace", "path": f"{where}/image", "value": "evil.example/agent:1"}]
            )
            answer = await k8s.client.patch(
                f"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/{name}",
                json=patch,
                headers={"Content-Type": "application/json-patch+json"},
            )
            assert answer.status_code == 200, answer.text
            await k8s.apply(
                named_run(run, "second", repeats=1, parallelism=1, retry={"infraRetries": 0})
            )
            second = await until(lambda: finished(k8s, "second"), "the second run")
        assert _bindings(stand_in, "second")[0].sandbox == name  # it was claimed
        assert name not in fake.assignments  # was: handed a cell, its target holding the key
        assert second["counts"]["errored"] >= 1, second
        errors = [t for t in second["tests"] if t.get("errored")]
        assert errors, second["tests"]
        why = "whose target could hold" if edit == "key-to-target" else "(target).image differs"
        assert any(why in str(t.get("error")) for t in errors), [t.get("error") for t in errors]


def _idle_sandbox(k8s: Cluster, pool: dict[str, Any]) -> dict[str, Any] | None:
    store = k8s.emulator.store
    kind = store.kinds[("agents.x-k8s.io", "sandboxes")]
    for sandbox in store.list(kind, "default", lambda _l: True):
        owners = sandbox["metadata"].get("ownerReferences") or []
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (sandbox.get("status") or {}).get("conditions") or []
        )
        if ready and any(o.get("uid") == pool["metadata"]["uid"] for o in owners):
            return dict(sandbox)
    return None


# -- item 3: only what the operator made is adopted ----------------------------------------


def _target_env(template: dict[str, Any]) -> list[dict[str, Any]]:
    containers = template["spec"]["podTemplate"]["spec"]["initContainers"]
    target = next(c for c in containers if c["name"] == "target")
    env: list[dict[str, Any]] = target.setdefault("env", [])
    return env


def _planted(stored: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored object, as someone would create it anew (same name, same owner)."""
    body = copy.deepcopy(stored)
    meta = body["metadata"]
    for field in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        meta.pop(field, None)
    body.pop("status", None)
    return body


async def _replace(k8s: Cluster, plural: str, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    answer = await k8s.client.delete(f"{EXT}/{plural}/{name}")
    assert answer.status_code == 200, answer.text
    answer = await k8s.client.post(f"{EXT}/{plural}", json=body)
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize("plant", ["template-env", "template-not-owned", "pool-elsewhere"])
async def test_a_planted_template_or_pool_of_the_pools_name_is_never_claimed_from(
    plant: str,
) -> None:
    """Between two runs of one RunSpec generation, someone replaces the template (or pool) of
    the pool's name with their own: the RunSpec's ownerReference copied, the content theirs.
    The second run fails with ``WarmPoolNotOwned`` naming the field; no cell is claimed."""
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=1)
        async with (
            sandboxpools.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS, LEDGER)),
            k8s.operator(sandboxes=True, warm_pools=True),
        ):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "first", repeats=1))
            done = await until(lambda: finished(k8s, "first"), "the first run")
            assert done["phase"] == "Succeeded", done
            (template,) = templates(k8s)
            (pool,) = pools(k8s)
            name = template["metadata"]["name"]
            if plant == "template-env":
                planted = _planted(template)
                _target_env(planted).append({"name": "PLANTED", "value": "the squatter's"})
                await _replace(k8s, "sandboxtemplates", planted)
                field = "spec.podTemplate.spec.initContainers["
                why = "is not what the operator makes for RunSpec triage"
            elif plant == "template-not-owned":
                planted = _planted(template)
                planted["metadata"]["ownerReferences"] = []
                await _replace(k8s, "sandboxtemplates", planted)
                field, why = "", "is not RunSpec triage's"
            else:
                theirs = _planted(template) | {"metadata": {"name": "squatter"}}
                _target_env(theirs).append({"name": "PLANTED", "value": "the squatter's"})
                answer = await k8s.client.post(f"{EXT}/sandboxtemplates", json=theirs)
                assert answer.status_code == 201, answer.text
                planted = _planted(pool)
                planted["spec"]["sandboxTemplateRef"] = {"name": "squatter"}
                await _replace(k8s, "sandboxwarmpools", planted)
                field = "spec.sandboxTemplateRef.name"
                why = "is not what the operator makes for RunSpec triage"
            await k8s.apply(named_run(run, "second", repeats=1))
            second = await until(lambda: finished(k8s, "second"), "the second run")
        # Was: Succeeded, every cell in the planted template's sandboxes.
        assert second["phase"] == "Failed", second
        refused = condition(second, "Failed")
        assert refused["reason"] == "WarmPoolNotOwned"
        assert f" {name} already exists in namespace default and {why}" in refused["message"]
        if field:
            assert f"its {field}" in refused["message"], refused["message"]
        assert not _bindings(stand_in, "second")
