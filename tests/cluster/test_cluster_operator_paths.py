"""The operator's harder paths: a restart mid-run, and runs that cannot or do not go well."""

from __future__ import annotations

import base64
import pwd
from typing import Any

import httpx
import pytest
from agent_health.cluster.cells import cellsecrets, manifests
from support.operator_support import (
    RUNS,
    Cell,
    Kubelet,
    cluster,
    finished,
    kubelet,
    listing,
    pod_creations,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(
    ("suite/rca.py::payment rca", ["category:RCA"]),
    ("suite/rca.py::payment timeout", ["category:RCA"]),
)


def status(k8s: Any, run: str) -> dict[str, Any]:
    return dict(k8s.run(run).get("status") or {})


async def test_a_restarted_operator_adopts_its_cells_and_duplicates_nothing() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"parallelism": 2}  # 2 tests × 3 repeats = 6 cells, 2 at a time
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
        async with kubelet(fake):
            async with k8s.operator():
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: len(fake.held) == 2, "the first two cells")
                first = next(iter(fake.held))
                await fake.release(first)
                await until(lambda: len(k8s.pods()) == 3, "a third cell after one ended")
                # A created pod is held only once the kubelet has played it: wait for that.
                await until(lambda: len(fake.held) == 2, "the third cell running")
            # The operator is down; a cell ends meanwhile.
            second = next(iter(fake.held))
            await fake.release(second)
            third = next(iter(fake.held))
            async with k8s.operator() as op:
                await until(lambda: len(k8s.pods()) == 4, "the restarted operator's next cell")
                await until(lambda: len(fake.held) == 2, "the fourth cell running")
                pod = k8s.emulator.read("pods", "default", third)
                adopted = k8s.cell_secret(pod)[1]["controller"].decode()
                assert op.runs.authorize(adopted)  # the live cell's token was read back
                fake.outcome = lambda _: "passed"
                for name in list(fake.held):
                    await fake.release(name)
                done = await until(lambda: finished(k8s, "triage-nightly"), "the run")
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["total"] == 6
        assert done["counts"]["passed"] == 6
        assert sorted(pod_creations(k8s.emulator).values()) == [1] * 6  # nothing twice
        assert len(fake.seen) == 6


async def test_runs_that_cannot_run_fail_with_the_reason() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        runspec["metadata"]["name"] = "broken"
        run["metadata"]["name"] = "broken-run"
        run["spec"]["runSpecRef"]["name"] = "broken"
        missing = run | {"metadata": {"name": "orphan", "namespace": "default"}}
        missing["spec"] = run["spec"] | {"runSpecRef": {"name": "nowhere"}}
        k8s.registry.missing.add("agent-health/examples/triage-agent")
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await k8s.apply(missing)
            broken = await until(lambda: finished(k8s, "broken-run"), "the broken run")
            orphan = await until(lambda: finished(k8s, "orphan"), "the orphan run")
        resolved = {c["type"]: c for c in k8s.runspec("broken")["status"]["conditions"]}["Resolved"]
        assert (resolved["status"], resolved["reason"]) == ("False", "ImageUnresolvable")
        assert "triage-agent" in resolved["message"]
        assert "not found in registry" in resolved["message"]
        failed = {c["type"]: c for c in broken["conditions"]}["Failed"]
        assert broken["phase"] == "Failed"
        assert failed["reason"] == "ImageUnresolvable"
        assert "not found in registry" in failed["message"]
        assert orphan["phase"] == "Failed"
        failed = {c["type"]: c for c in orphan["conditions"]}["Failed"]
        assert failed["reason"] == "RunSpecMissing"
        assert failed["message"] == "RunSpec nowhere does not exist in namespace default"
        assert not k8s.pods()  # no discovery, no cell


async def test_an_evicted_cell_is_retried_per_policy_and_a_tampered_ledger_is_errored() -> None:
    def outcome(cell: Cell) -> str:
        return "evicted" if cell.run == "evicted" else "tampered"

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        evicted = run | {"metadata": {"name": "evicted", "namespace": "default"}}
        evicted["spec"] = run["spec"] | {
            "repeats": 1,
            "selection": {"grep": "payment rca"},
            "retry": {"infraRetries": 1, "backoffSeconds": 1},
        }
        tampered = run | {"metadata": {"name": "tampered", "namespace": "default"}}
        tampered["spec"] = run["spec"] | {"repeats": 1, "selection": {"grep": "timeout"}}
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(evicted)
            await k8s.apply(tampered)
            retried = await until(lambda: finished(k8s, "evicted"), "the evicted run")
            sealed = await until(lambda: finished(k8s, "tampered"), "the tampered run")
        assert retried["phase"] == "Succeeded"
        assert retried["counts"]["errored"] == 1
        error = retried["tests"][0]["error"]
        assert error == (
            "infrastructure failure (evicted): node ran out of memory; no retries left (1 allowed)"
        )
        assert list(pod_creations(k8s.emulator).values()).count(2) == 1  # created, retried once
        assert [s for s in fake.seen if s.startswith("evicted")] == [
            next(s for s in fake.seen if s.startswith("evicted"))
        ] * 2
        assert sealed["counts"]["errored"] == 1
        assert sealed["tests"][0]["error"].startswith("ledger tampered at record 0")
        reasons = {
            e["reason"]
            for e in k8s.emulator.store.list(
                k8s.emulator.store.kinds[("", "events")], "default", lambda _l: True
            )
        }
        assert {"LedgerTampered", "CellInfraFailure"} <= reasons


async def test_a_dead_target_blames_the_agent_and_is_never_retried_a_gateway_restart_is() -> None:
    """A target OOM-killed (seen only in lastState, its ledger passing) or crashed is the
    agent's error and gets no second try; a gateway that restarted is the infrastructure's."""
    outcomes = {"oom": "target-oom", "crash": "target-crash", "restart": "gateway-restart"}

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda cell: outcomes[cell.run])
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            for name in outcomes:
                body = run | {"metadata": {"name": name, "namespace": "default"}}
                body["spec"] = run["spec"] | {
                    "repeats": 1,
                    "selection": {"grep": "payment rca"},
                    "retry": {"infraRetries": 1, "backoffSeconds": 1},
                }
                await k8s.apply(body)
            done = {n: await until(lambda n=n: finished(k8s, n), n) for n in outcomes}
    created = pod_creations(k8s.emulator)
    for name, cause in (("oom", "target-oom"), ("crash", "target-crash")):
        [test] = done[name]["tests"]
        assert (test["errored"], test["erroredByAgent"], test["cause"]) == (1, 1, "agent"), test
        assert test["error"].startswith(f"agent failure ({cause}): the target container")
        assert test["error"].endswith("; not retried")
        assert done[name]["counts"]["erroredByCause"]["agent"] == 1
        assert done[name]["passRate"] == 0.0  # the agent's own death counts against it
        assert [t for n, t in created.items() if n.startswith(name)] == [1]  # never retried
    [test] = done["restart"]["tests"]
    assert (test["errored"], test["erroredByAgent"], test["cause"]) == (1, 0, "infra"), test
    assert "infrastructure failure (gateway-restart): the gateway restarted" in test["error"]
    assert [t for n, t in created.items() if n.startswith("restart")] == [2]  # retried once


async def test_the_operator_starts_as_a_uid_without_a_user_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The images run as uid 65532, which has no passwd entry; kopf's default identity asks
    the password database for the user name and would crash the operator at start."""

    def no_entry(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME", "POD_ID"):
        monkeypatch.delenv(name, raising=False)
    async with cluster() as k8s, k8s.operator() as op:
        assert op.ports["health"] > 0


async def test_judge_calls_of_runs_not_yet_taken_over_after_a_restart_are_asked_to_retry() -> None:
    """A restarted operator knows a cell's token only once it has taken over the cell's run:
    until every run found at start is, an unknown token gets 502 (the cell's judge call
    retries) instead of 401 (the cell's test errored)."""
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        await k8s.apply(run)  # without its RunSpec, the run cannot be taken over yet
        answer = await k8s.client.patch(
            f"{RUNS}/{run['metadata']['name']}/status",
            json={"status": {"phase": "Running"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert answer.status_code == 200, answer.text
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator() as op, httpx.AsyncClient() as client:
            url = f"http://127.0.0.1:{op.ports['judge']}/api/judge"
            call = {"text": "x", "criteria": "says x"}
            headers = {"Authorization": "Bearer not-known-yet"}
            early = await client.post(url, json=call, headers=headers)
            assert early.status_code == 502, early.text
            assert "not taken over every run yet" in early.text
            await k8s.apply(runspec)
            await until(lambda: not op.runs.taking_over(), "the run to be taken over")
            late = await client.post(url, json=call, headers=headers)
            assert late.status_code == 401, late.text


async def test_objects_of_a_cells_name_that_another_owner_made_are_never_adopted() -> None:
    """A tenant creates, before the runs, a Pod with a cell's name, the token Secret a second
    run's cells would share (tokens and ledger keys the tenant knows), and the ledger key
    Secret of a third run. None is used: their cells are errored, the planted Pod is left
    alone, the planted token is never honoured, the third run fails with the reason."""
    planted_token = "planted-controller-token-0123456789abcdef"
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"repeats": 2, "selection": {"grep": "payment rca"}}
        pod_cell = manifests.cell_name("triage-nightly", "suite/rca.py::payment rca", 0)
        shared_cell = manifests.cell_name("planted", "suite/rca.py::payment rca", 0)
        planted = {
            f"{shared_cell}.{item}": value
            for item, value in (("controller", planted_token), ("peer-logs", "p"),
                                ("ledger-key", "k" * 44))
        }  # fmt: skip
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": cellsecrets.shared_secret_name("planted", 0)},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in planted.items()},
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_cell},
            "spec": {"containers": [{"name": "mine", "image": "busybox"}]},
        }
        key = {"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": cellsecrets.ledger_key_secret_name("stolen")},
               "data": {"key": base64.b64encode(b"k" * 44).decode()}}  # fmt: skip
        for path, body in (("secrets", secret), ("pods", pod), ("secrets", key)):
            answer = await k8s.client.post(f"/api/v1/namespaces/default/{path}", json=body)
            assert answer.status_code == 201, answer.text
        shared = run | {"metadata": {"name": "planted", "namespace": "default"}}
        shared["spec"] = run["spec"] | {"repeats": 1}
        stolen = run | {"metadata": {"name": "stolen", "namespace": "default"}}
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator() as op:
            await k8s.apply(runspec)
            for body in (run, shared, stolen):
                await k8s.apply(body)
            done = await until(lambda: finished(k8s, "triage-nightly"), "the run")
            refused = await until(lambda: finished(k8s, "planted"), "the run with planted tokens")
            failed = await until(lambda: finished(k8s, "stolen"), "the run with a planted key")
            assert not op.runs.authorize(planted_token)
    [test] = done["tests"]
    assert (test["passed"], test["errored"], test["erroredByAgent"]) == (1, 1, 0)
    [test] = refused["tests"]
    assert (test["errored"], test["erroredByAgent"]) == (1, 0)
    errors = {e["message"] for e in k8s.emulator.store.list(
        k8s.emulator.store.kinds[("", "events")], "default", lambda _l: True)}  # fmt: skip
    assert any(f"a Pod named {pod_cell} already exists" in m and "not this run's" in m
               for m in errors), errors  # fmt: skip
    assert any("Secret planted-tokens-0 already exists" in m and "not EvaluationRun planted's"
               in m for m in errors), errors  # fmt: skip
    untouched = k8s.emulator.read("pods", "default", pod_cell)
    assert untouched["spec"]["containers"][0]["name"] == "mine"
    assert "ownerReferences" not in untouched["metadata"]
    assert not [p for p in k8s.pods() if p["metadata"]["name"] == shared_cell]  # never made
    assert failed["phase"] == "Failed"
    [condition] = [c for c in failed["conditions"] if c["status"] == "False" or
                   c.get("reason") == "LedgerKeyNotOwned"][:1]  # fmt: skip
    assert condition["reason"] == "LedgerKeyNotOwned", failed["conditions"]
    assert "will not use a ledger key it did not make" in condition["message"]
