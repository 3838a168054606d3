"""A target that claims a tool call it never made: its trajectory says ``search_logs`` but it
never calls the peer that serves it. The RunSpec declares the peer's tools, the gateway
records the target's calls to it, and the grade holds the claim to the record."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from agent_health.cluster.grading import grading
from agent_health.engine.controller import cell
from agent_health.engine.outcome import claims
from agent_health.ledger import backends
from aiohttp import web
from support.cell_support import CELL, KEY, TEST_ID, cell_gateway, cell_settings
from support.gateway_support import serving
from support.hostile_support import free_port, hostile_target

SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    expect(result.output).to_contain("db-primary")
"""
TOOLS = {"logs": ("search_logs",)}


async def run_and_grade(
    tmp_path: Path, attacks: str, tools: dict[str, tuple[str, ...]]
) -> grading.CellGrade:
    port = free_port()
    upstream = f"http://127.0.0.1:{port}"
    routes = [
        {"principal": "controller", "to": "target", "listen": "127.0.0.1:0", "upstream": upstream},
        # The peer's upstream is the target's own sink: what matters is the recorded call.
        {"principal": "target", "to": "peer:logs", "listen": "127.0.0.1:0", "upstream": upstream},
    ]
    proxy = await cell_gateway(tmp_path, port, "http://127.0.0.1:9", routes=routes)
    targets = {"peer": proxy.url("target", "peer:logs")}
    try:
        async with hostile_target(port, tmp_path / "r.jsonl", targets, answer="good",
                                  attacks=attacks):  # fmt: skip
            settings = cell_settings(tmp_path, proxy, SUITE)
            code, result = await cell.run_cell(settings)
    finally:
        await proxy.stop()
    assert code == 0  # the controller saw a pass: the agent's own word
    assert result is not None
    assert result.status == "passed"
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL, peer_tools=tools)
    try:
        return await grading.grade_cell(backend, CELL, KEY, expected)
    finally:
        await backend.close()


def matcher(graded: grading.CellGrade) -> dict[str, object]:
    [found] = [s for s in graded.result.signals if s.name.startswith("to_have_called_tool")]
    return {"passed": found.passed, **(found.evidence or {})}


@pytest.mark.slow
async def test_a_claimed_tool_call_the_gateway_never_saw_fails_the_matcher(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "", TOOLS)
    assert graded.status == "failed"
    assert graded.unverified_claims == 1
    seen = matcher(graded)
    assert seen["passed"] is False
    assert (seen["source"], seen["problem"]) == ("gateway", claims.NOT_SEEN)
    assert (seen["claimed_calls_to_peer"], seen["gateway_calls_to_peer"]) == (1, 0)
    others = [s for s in graded.result.signals if not s.name.startswith("to_have_called_tool")]
    assert {(s.evidence or {}).get("source") for s in others} == {"agent"}


@pytest.mark.slow
async def test_a_claimed_call_the_gateway_recorded_passes_with_the_gateway_as_its_source(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "call-peer", TOOLS)
    assert graded.status == "passed", graded.error
    assert graded.unverified_claims == 0
    seen = matcher(graded)
    assert (seen["passed"], seen["source"], seen["gateway_calls_to_peer"]) == (True, "gateway", 1)


@pytest.mark.slow
async def test_without_declared_tools_the_claim_stands_on_the_agents_word(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "", {})  # as before peers[].tools existed
    assert graded.status == "passed"
    assert matcher(graded)["source"] == "agent"


ORDER_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tools_in_order(["search_logs", "restart_pod"])
    expect(result).to_have_called_tools_in_steps(
        [["search_logs", "lookup_runbook"], ["restart_pod"]]
    )
"""
TWO_PEERS = {"logs": ("search_logs",), "k8s": ("restart_pod", "scale")}


def claiming_agent(calls: list[str], peers: dict[str, str]) -> web.Application:
    """An agent whose trajectory claims search_logs, lookup_runbook (no peer declares it),
    then restart_pod, and which really calls the peers named in ``calls``, in that order,
    through the gateway (``peers``: peer name → its gateway URL, filled in once it listens)."""

    async def run(request: web.Request) -> web.Response:
        async with aiohttp.ClientSession() as client:
            for peer in calls:
                async with client.post(peers[peer] + "/sink", json={"peer": peer}) as answer:
                    assert answer.status == 200
        claimed = ["search_logs", "lookup_runbook", "restart_pod"]
        steps = [{"type": "tool_call", "tool_name": t, "tool_args": {}} for t in claimed]
        return web.json_response({"output": "db-primary is down; restarted", "trajectory": steps})

    async def sink(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/run", run)
    app.router.add_post("/sink", sink)
    return app


async def run_and_grade_order(tmp_path: Path, calls: list[str]) -> grading.CellGrade:
    peers: dict[str, str] = {}
    async with serving(claiming_agent(calls, peers)) as agent_url:
        routes = [
            {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
             "upstream": agent_url},
            *({"principal": "target", "to": f"peer:{name}", "listen": "127.0.0.1:0",
               "upstream": agent_url} for name in TWO_PEERS),
        ]  # fmt: skip
        port = int(agent_url.rsplit(":", 1)[1])
        proxy = await cell_gateway(tmp_path, port, "http://127.0.0.1:9", routes=routes)
        peers.update({name: proxy.url("target", f"peer:{name}") for name in TWO_PEERS})
        try:
            code, result = await cell.run_cell(cell_settings(tmp_path, proxy, ORDER_SUITE))
        finally:
            await proxy.stop()
    assert (code, result.status if result else None) == (0, "passed")  # the agent's word
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL, peer_tools=TWO_PEERS)
    try:
        return await grading.grade_cell(backend, CELL, KEY, expected)
    finally:
        await backend.close()


def ordered(graded: grading.CellGrade) -> dict[str, dict[str, object]]:
    return {
        s.name.split("(")[0]: {"passed": s.passed, **(s.evidence or {})}
        for s in graded.result.signals
        if s.name.startswith("to_have_called_tools_in_")
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("calls", "why"),
    [
        (["logs"], "no call to the peer serving restart_pod"),
        (["k8s", "logs"], "the calls came in the other order"),
        ([], "no calls at all"),
    ],
)
async def test_claimed_orders_the_gateway_did_not_see_fail_both_order_matchers(
    tmp_path: Path, calls: list[str], why: str
) -> None:
    graded = await run_and_grade_order(tmp_path, calls)
    assert graded.status == "failed", why
    seen = ordered(graded)
    in_order, in_steps = (
        seen["to_have_called_tools_in_order"],
        seen["to_have_called_tools_in_steps"],
    )
    assert (in_order["passed"], in_order["source"], in_order["problem"]) == (
        False, "gateway", claims.NOT_IN_ORDER,
    )  # fmt: skip
    assert in_order["checked_tools"] == ["search_logs", "restart_pod"]  # lookup_runbook: no peer
    assert in_order["gateway_calls"] == [f"peer:{peer}" for peer in calls]
    assert (in_steps["passed"], in_steps["problem"]) == (False, claims.NOT_IN_STEPS)
    assert in_steps["checked_tools"] == [["search_logs"], ["restart_pod"]]


@pytest.mark.slow
async def test_claimed_orders_the_gateway_saw_pass_with_the_gateway_as_their_source(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade_order(tmp_path, ["logs", "k8s"])
    assert graded.status == "passed", graded.error
    for signal in ordered(graded).values():
        assert (signal["passed"], signal["source"]) == (True, "gateway")
        assert signal["gateway_calls"] == ["peer:logs", "peer:k8s"]
