"""``spec.budget`` on the operator, against the API emulator: no new cell once a limit is
reached, cells running finish, the rest are skipped (reason ``budget``), ``BudgetExhausted``
names the limit, and the status shows the spend — the agent's tokens from the cells' ledgers
and the judge's from what the judge service spent for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_health.cluster.api import runbudget
from support.judge_servers import Answer, ScriptedModel
from support.operator_support import Kubelet, cluster, condition, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/budget-ledger-{run}"
TESTS = listing(*((f"suite/t.py::test {n}", []) for n in range(5)))
# what each cell's ledger says the agent used (operator_support.cell_records)
CELL_TOKENS = 340


def named(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    base = {k: v for k, v in run["spec"].items() if k != "selection"}
    body = base | {"repeats": 1, "parallelism": 1, "retry": {"infraRetries": 0}} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


async def test_max_tokens_stops_starting_cells_and_skips_the_rest() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator() as op:
            await k8s.apply(runspec)
            await k8s.apply(named(run, "capped", budget={"maxTokens": 600}))
            status = await until(lambda: finished(k8s, "capped"), "the run to end")
            async with httpx.AsyncClient() as client:
                scraped = await client.get(f"http://127.0.0.1:{op.ports['metrics']}/metrics")
    # 340 tokens a cell: after the second, 680 >= 600; the third never starts
    assert len(fake.seen) == 2
    assert status["phase"] == "Succeeded", status
    counts = status["counts"]
    assert (counts["passed"], counts["skipped"], counts["total"]) == (2, 3, 5)
    spent = status["budget"]
    assert spent["exhausted"] == "maxTokens"
    assert (spent["tokens"], spent["agentTokens"], spent["judgeTokens"]) == (680, 680, 0)
    assert spent["skipped"] == 3
    assert spent["reason"] == "spec.budget.maxTokens 600 reached: 680 tokens spent"
    exhausted = condition(status, "BudgetExhausted")
    assert (exhausted["status"], exhausted["reason"]) == ("True", "MaxTokens")
    assert "680 tokens" in exhausted["message"]
    # /metrics agrees with the status: the skipped cells are counted as graded
    assert 'agent_health_cells_graded_total{namespace="default"' in scraped.text
    skipped = [
        line
        for line in scraped.text.splitlines()
        if line.startswith("agent_health_cells_graded_total") and 'status="skipped"' in line
    ]
    assert skipped
    assert skipped[0].endswith(" 3.0")


async def test_cells_running_finish_and_a_run_within_budget_says_so() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(named(run, "wide", parallelism=3, budget={"maxTokens": 1}))
            await k8s.apply(named(run, "roomy", budget={"maxTokens": 10**6}))
            capped = await until(lambda: finished(k8s, "wide"), "the capped run to end")
            roomy = await until(lambda: finished(k8s, "roomy"), "the other run to end")
    # three cells started at once: all three finish and count; the other two never start
    assert (capped["counts"]["passed"], capped["counts"]["skipped"]) == (3, 2)
    assert capped["budget"]["tokens"] == 3 * CELL_TOKENS
    assert roomy["counts"]["passed"] == 5
    assert "exhausted" not in roomy["budget"]  # unset: no limit stopped it
    within = condition(roomy, "BudgetExhausted")
    assert (within["status"], within["reason"]) == ("False", "WithinBudget")


async def test_the_judge_services_spend_counts_in_the_cost(
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
    budget = {
        "maxCostUsd": 1.0,
        # the agent: 300 in + 40 out at $1,000/Mtok = $0.34 a cell
        "prices": {"default": {"inputPerMtok": 1000, "outputPerMtok": 1000}},
        # the judge: 100 in + 20 out a call at $2,000/Mtok = $0.24 a call
        "judgePrice": {"inputPerMtok": 2000, "outputPerMtok": 2000},
    }
    try:
        async with cluster() as k8s:
            runspec, run = k8s.example(ledger=LEDGER)
            del runspec["spec"]["judge"]  # the operator's env judge answers
            fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
            cache = str(tmp_path / "judge.sqlite")
            offered = {"judge_cache": cache, "environ": environ, "judge_for_all_runs": True}
            async with kubelet(fake), k8s.operator(**offered) as op:
                await k8s.apply(runspec)
                await k8s.apply(named(run, "judged", budget=budget))
                await until(lambda: fake.held, "the first cell")
                cell = next(iter(fake.held))
                pod = k8s.emulator.read("pods", "default", cell)
                token = k8s.cell_secret(pod)[1]["controller"].decode()
                url = f"http://127.0.0.1:{op.ports['judge']}/api/judge"
                async with httpx.AsyncClient() as client:
                    for n in range(3):  # three distinct claims: three model calls
                        call = {"text": "the answer is x", "criteria": f"says x ({n})"}
                        headers = {"Authorization": f"Bearer {token}"}
                        answer = await client.post(url, json=call, headers=headers)
                        assert answer.status_code == 200, answer.text
                await fake.release(cell)
                # $0.34 + 3 x $0.24 = $1.06 >= $1: the second cell never starts
                status = await until(lambda: finished(k8s, "judged"), "the run to end")
    finally:
        await model.close()
    assert len(model.requests) == 3
    spent = status["budget"]
    assert spent["judgeTokens"] == 360
    assert spent["agentTokens"] == CELL_TOKENS
    assert spent["judgeCostUsd"] == pytest.approx(0.72)
    assert spent["agentCostUsd"] == pytest.approx(0.34)
    assert spent["exhausted"] == "maxCostUsd"
    assert (status["counts"]["passed"], status["counts"]["skipped"]) == (1, 4)
    assert condition(status, "BudgetExhausted")["reason"] == "MaxCostUsd"


def test_a_cost_budget_needs_prices_in_the_model_and_the_crd() -> None:
    with pytest.raises(ValueError, match=r"maxCostUsd needs spec\.budget\.prices"):
        runbudget.Budget.model_validate({"maxCostUsd": 5})
    from agent_health.cluster.api import crds

    definition = next(
        d for d in crds.definitions() if d["spec"]["names"]["kind"] == "EvaluationRun"
    )
    schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    budget = schema["properties"]["spec"]["properties"]["budget"]
    rules = [r["message"] for r in budget["x-kubernetes-validations"]]
    assert runbudget.BUDGET_NEEDS_PRICES[1] in rules
    assert set(budget["properties"]) >= {"maxCostUsd", "maxTokens", "maxDurationSeconds"}
