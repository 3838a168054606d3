"""The judge service judges only for judged runs, and only within their RunSpec's limits.

Each attack of issue 16 is replayed against the real operator on the API emulator. The
tenant's test body holds its cell's controller token; with it, it calls the judge service
directly: from a RunSpec that names no judge (to spend the operator's own key), from a run
that skips judging, and from a judged RunSpec asking for a model it was not given or more
tokens than its ``spec.judge.maxTokens`` (capped by ``--judge-max-tokens``). Each is refused
before a provider is called; the model servers count the requests that reached them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from support.judge_servers import Answer, ScriptedModel
from support.operator_support import Kubelet, cluster, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))


def environ(model: ScriptedModel) -> dict[str, str]:
    """The operator's own judge (the chart's judge.*), its key in the operator's env."""
    return {
        "AGENT_HEALTH_JUDGE_PROVIDER": "openai",
        "AGENT_HEALTH_JUDGE_MODEL": "operators-model",
        "AGENT_HEALTH_JUDGE_BASE_URL": model.url,
        "AGENT_HEALTH_JUDGE_API_KEY_ENV": "OPERATOR_KEY",
        "OPERATOR_KEY": "sk-operator",
    }


def controller_token(k8s: Any) -> str:
    _, items = k8s.cell_secret(k8s.pods()[0])
    return str(items["controller"].decode())


def controller_env(k8s: Any) -> dict[str, Any]:
    controller = k8s.pods()[0]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in controller["env"]}


async def call(port: int, token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(
            f"http://127.0.0.1:{port}{path}",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )


JUDGE = {"text": "the answer is x", "criteria": "says x"}
CHAT = {"model": "operators-model", "messages": [{"role": "user", "content": "hi"}]}


async def test_a_cell_of_a_runspec_without_a_judge_cannot_spend_the_operators_key() -> None:
    async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "ok")) as model:
        async with cluster() as k8s:
            runspec, run = k8s.example(ledger=LEDGER)
            del runspec["spec"]["judge"]
            run["spec"] |= {"repeats": 1}
            fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
            async with kubelet(fake), k8s.operator(environ=environ(model)) as op:
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: op.runs.tokens, "a live cell")
                token, port = controller_token(k8s), op.ports["judge"]
                judged = await call(port, token, "/api/judge", JUDGE)
                chatted = await call(port, token, "/api/judge/chat", CHAT)
                asked = await call(port, token, "/api/judge/ask", {"text": "hi"})
                env = controller_env(k8s)
        assert (judged.status_code, chatted.status_code, asked.status_code) == (403, 403, 403)
        assert judged.json()["error"] == (
            "RunSpec default/triage names no spec.judge, and the operator's own judge is not "
            "offered to all runs (--judge-for-all-runs): give the RunSpec a judge"
        )
        assert model.requests == []  # nothing spent
        assert "AGENT_HEALTH_JUDGE_URL" not in env  # and the cell was given no judge route


async def test_a_run_that_skips_judging_gets_no_judge() -> None:
    async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "ok")) as model:
        async with cluster() as k8s:
            runspec, run = k8s.example(ledger=LEDGER)
            runspec["spec"]["judge"]["baseUrl"] = model.url
            run["spec"] |= {"repeats": 1, "skipJudge": True}
            fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
            async with kubelet(fake), k8s.operator() as op:
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: op.runs.tokens, "a live cell")
                judged = await call(op.ports["judge"], controller_token(k8s), "/api/judge", JUDGE)
        assert judged.status_code == 403
        assert "sets skipJudge" in judged.json()["error"]
        assert model.requests == []


async def test_a_judged_cell_gets_only_its_models_and_its_token_ceiling() -> None:
    async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "ok")) as model:
        async with cluster() as k8s:
            runspec, run = k8s.example(ledger=LEDGER)
            runspec["spec"]["judge"] |= {
                "baseUrl": model.url, "model": "judge-model", "models": ["small-model"],
                "maxTokens": 512,
            }  # fmt: skip
            run["spec"] |= {"repeats": 1}
            fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
            async with kubelet(fake), k8s.operator(judge_max_tokens=300) as op:
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: op.runs.tokens, "a live cell")
                token, port = controller_token(k8s), op.ports["judge"]
                big = await call(port, token, "/api/judge/chat", CHAT | {"model": "gpt-big"})
                long = await call(
                    port,
                    token,
                    "/api/judge/chat",
                    CHAT | {"model": "small-model", "max_tokens": 301},
                )
                verbose = await call(
                    port, token, "/api/judge", JUDGE | {"options": {"max_output_tokens": 4000}}
                )
                steps = await call(
                    port, token, "/api/judge", JUDGE | {"options": {"max_steps": 99}}
                )
                refused = len(model.requests)
                fine = await call(
                    port,
                    token,
                    "/api/judge/chat",
                    CHAT | {"model": "small-model", "max_tokens": 300},
                )
                judged = await call(port, token, "/api/judge", JUDGE | {"model": "small-model"})
        assert [r.status_code for r in (big, long, verbose, steps)] == [422] * 4
        assert big.json()["error"] == (
            "the chat call's model 'gpt-big' is not a model RunSpec default/triage offers its "
            "cells (judge-model, small-model); add it to spec.judge.models"
        )
        assert long.json()["error"] == (
            "max_tokens asks for 301 tokens; RunSpec default/triage allows 300 "
            "(spec.judge.maxTokens, capped by the operator's --judge-max-tokens)"
        )
        assert "judge(max_output_tokens=...) asks for 4000 tokens" in verbose.json()["error"]
        assert "judge(max_steps=99)" in steps.json()["error"]
        assert refused == 0  # nothing refused reached the provider
        assert (fine.status_code, judged.status_code) == (200, 200), (fine.text, judged.text)
        assert [r.body["model"] for r in model.requests] == ["small-model", "small-model"]
        assert model.requests[1].body["max_tokens"] <= 300  # the backend's own default, capped


async def test_only_a_judged_runs_cells_may_reach_the_judge_service() -> None:
    """Fenced (--network-policy), a run whose cells are not judged gets no egress to the
    judge service at all: its target cannot even knock on the operator's judge port."""
    async with cluster() as k8s:
        judged, judged_run = k8s.example(ledger=LEDGER)
        plain, plain_run = k8s.example(ledger=LEDGER)
        del plain["spec"]["judge"]
        plain["metadata"]["name"] = "plain"
        plain_run["metadata"]["name"] = "plain-nightly"
        plain_run["spec"]["runSpecRef"] = {"name": "plain"}
        for body in (judged_run, plain_run):
            body["spec"] |= {"repeats": 1}
        fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator(network_policy=True):
            for body in (judged, judged_run, plain, plain_run):
                await k8s.apply(body)
            await until(lambda: len(fake.held) == 2, "a cell of each run")
        operator_namespace = k8s.options().operator_namespace
        kind = k8s.emulator.store.kinds[("networking.k8s.io", "networkpolicies")]
        policies = {
            p["metadata"]["name"]: p
            for p in k8s.emulator.store.list(kind, "default", lambda _l: True)
        }

    def to_judge(policy: dict[str, Any]) -> list[Any]:
        """Egress rules to pods in the operator's namespace: its judge pods."""
        return [
            rule
            for rule in policy["spec"]["egress"]
            for peer in rule.get("to", [])
            if operator_namespace
            in peer.get("namespaceSelector", {}).get("matchLabels", {}).values()
        ]

    judged_policy = next(p for n, p in policies.items() if n.startswith("triage-nightly"))
    plain_policy = next(p for n, p in policies.items() if n.startswith("plain-nightly"))
    assert len(to_judge(judged_policy)) == 1
    assert to_judge(plain_policy) == []
