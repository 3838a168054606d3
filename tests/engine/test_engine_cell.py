"""A whole cell on loopback: controller (``agent-health cell``) → gateway → agent and judge
service, then the operator's grader reads the ledger the gateway wrote."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from agent_health import gateway
from agent_health.engine.controller import cell
from agent_health.gateway import config as gateway_config
from agent_health.ledger import records
from aiohttp import web
from support import cell_support, opensearch_support
from support.cell_support import CELL, TEST_ID, TOKEN
from support.judge_servers import (
    VERDICT_TOOL,
    Action,
    Answer,
    Calls,
    ScriptedModel,
    Text,
    prompt_text,
)
from support.opensearch_support import TRACE

SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, "names the database as the cause")
"""


@pytest.fixture(autouse=True)
def _private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cell_support.private_judge_cache(monkeypatch, tmp_path)


@pytest.fixture
async def judge_service(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedModel]]:
    async with cell_support.judge_service(tmp_path, Answer(True, 0.9, "names db-primary")) as s:
        yield s


async def _cell_gateway(tmp_path: Path, triage_url: str, judge_url: str) -> gateway.Gateway:
    port = urlsplit(triage_url).port
    assert port is not None
    return await cell_support.cell_gateway(tmp_path, port, judge_url)


async def test_a_cell_records_through_its_gateway_and_grades_passed(
    tmp_path: Path, triage_url: str, judge_service: tuple[str, ScriptedModel]
) -> None:
    judge_url, model = judge_service
    proxy = await _cell_gateway(tmp_path, triage_url, judge_url)
    try:
        code, result = await cell.run_cell(cell_support.cell_settings(tmp_path, proxy, SUITE))
    finally:
        await proxy.stop()
    assert code == 0
    assert result is not None
    assert result.status == "passed", result
    assert result.run_id == CELL
    assert len(model.requests) == 1  # the judge service asked the model once
    graded = await cell_support.grade(tmp_path)
    assert graded.status == "passed", graded.error
    assert graded.score == pytest.approx(0.95)
    lines = cell_support.ledger_lines(tmp_path)
    kinds = [records.parse_line(line).kind for line in lines]
    assert kinds[0] == "cell-meta"
    assert kinds[-1] == "cell-end"
    exchanges = [records.parse_line(x) for x in lines]
    principals = {(e.principal, e.upstream) for e in exchanges if isinstance(e, records.Exchange)}
    assert principals == {("controller", "target"), ("controller", "judge")}
    assert TOKEN not in "".join(lines)


async def test_an_unknown_test_is_recorded_as_the_reason(
    tmp_path: Path, triage_url: str, judge_service: tuple[str, ScriptedModel]
) -> None:
    judge_url, _ = judge_service
    proxy = await _cell_gateway(tmp_path, triage_url, judge_url)
    try:
        with pytest.raises(cell.CellError, match=r"no test 'test_cell\.py::nope'"):
            await cell.run_cell(
                cell_support.cell_settings(tmp_path, proxy, SUITE, test_id="test_cell.py::nope")
            )
    finally:
        await proxy.stop()
    graded = await cell_support.grade(tmp_path)
    assert graded.status == "errored"
    assert "no test 'test_cell.py::nope'" in (graded.error or "")


def test_settings_come_from_the_pod_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    settings = cell.CellSettings.from_env(
        suite=tmp_path,
        test_id=TEST_ID,
        repeat=2,
        environ={
            "AGENT_HEALTH_AGENT_URL": "rest+http://127.0.0.1:15001/run",
            "AGENT_HEALTH_RUN_ID": CELL,
            "AGENT_HEALTH_TOKEN_FILE": str(tmp_path / "token"),
            "AGENT_HEALTH_GATEWAY_ADMIN": "http://127.0.0.1:15000",
            "AGENT_HEALTH_TIMEOUT": "300",
            "AGENT_HEALTH_SKIP_JUDGE": "1",
        },
    )
    assert settings.token == TOKEN
    assert settings.skip_judge
    assert settings.timeout == 300
    assert settings.token_headers == {gateway_config.TOKEN_HEADER: TOKEN}
    with pytest.raises(cell.CellError, match="AGENT_HEALTH_AGENT_URL"):
        cell.CellSettings.from_env(suite=tmp_path, test_id=TEST_ID, repeat=0, environ={})


def test_the_cell_names_the_gateway_token_header() -> None:
    assert cell.TOKEN_HEADER == gateway_config.TOKEN_HEADER


INSIGHTS_CONFIG = """
from agent_health import define_config

async def explain(result, llm):
    return {"summary": result.status, "why": await llm(f"why did {result.title} pass?")}

config = define_config(insights=explain)
"""


def _explains(body: Mapping[str, Any]) -> Action:
    if "why did" in prompt_text(body):
        return Text("the judge service's model says it named db-primary")
    return Answer(True, 0.9, "names db-primary")


async def test_a_cell_explains_with_the_judge_service_and_records_the_insights(
    tmp_path: Path, triage_url: str
) -> None:
    async with cell_support.judge_service(tmp_path, _explains) as (judge_url, model):
        proxy = await _cell_gateway(tmp_path, triage_url, judge_url)
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, SUITE)
            (settings.suite / "agent-health.config.py").write_text(INSIGHTS_CONFIG)
            code, result = await cell.run_cell(settings)
        finally:
            await proxy.stop()
        asked = [prompt_text(r.body) for r in model.requests]
    assert code == 0
    assert result is not None
    why = "the judge service's model says it named db-primary"
    assert result.insights == {"summary": "passed", "why": why, "recommendations": []}
    assert any("why did diagnoses the payment outage pass?" in text for text in asked)
    # The ledger carries them, so the operator's grade (and `agent-health grade`) keeps them.
    graded = await cell_support.grade(tmp_path)
    assert graded.status == "passed", graded.error
    assert graded.result.insights == result.insights
    [end] = [r for r in map(records.parse_line, cell_support.ledger_lines(tmp_path))
             if isinstance(r, records.CellEnd)]  # fmt: skip
    assert end.insights == result.insights


TRACED_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    await judge(result, "the log search failed", tools=["trace_query"])
"""


def _queries_traces(body: Mapping[str, Any]) -> Action:
    """An agentic judge: reads the spans, then the metrics, then submits."""
    answered = [m for m in body.get("messages", []) if m.get("role") == "tool"]
    if len(answered) == 0:
        return Calls((("get_spans", {}),))
    if len(answered) == 1:
        return Calls((("metrics", {}),))
    return Calls(((VERDICT_TOOL, {"passed": True, "score": 1.0, "reasoning": "t1 failed"}),))


async def test_a_cells_judge_reads_its_opensearch_traces_through_the_service(
    tmp_path: Path, triage_url: str
) -> None:
    async with (
        opensearch_support.serving(lambda body: opensearch_support.queried(body, TRACE)) as fake,
        cell_support.judge_service(tmp_path, _queries_traces) as (judge_url, model),
    ):
        proxy = await _cell_gateway(tmp_path, triage_url, judge_url)
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, TRACED_SUITE)
            (settings.suite / "agent-health.config.py").write_text(
                "from agent_health import define_config\n"
                "config = define_config(traces={'opensearch': {'hosts': "
                f"[{fake.url!r}], 'wait_seconds': 5, 'poll_seconds': 0.05}}}})\n"
            )
            code, result = await cell.run_cell(settings)
        finally:
            await proxy.stop()
        answers = [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]
    assert code == 0, result
    spans, metrics = (json.loads(a) for a in answers)
    # The service answered from the spans the cell read in OpenSearch, not step-N spans.
    assert [s["span_id"] for s in spans] == ["a1", "c1", "t1", "c2"]
    assert metrics["trace"] == {
        "source": "opensearch",
        "spans": 4,
        "llm_calls": 2,
        "tool_calls": 1,
        "tool_histogram": {"search_logs": 1},
        "total_tokens": 400,
        "error_spans": 1,
    }


MCP_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def pages(agent, expect):
    result = await agent.run("Page the on-call engineer.")
    expect(result).to_have_called_tool("page_oncall")
    expect(result).to_have_no_tool_errors()
"""

SEEN_ERRORS_CONFIG = """
from agent_health import define_config

async def explain(result, metrics, run):
    failed = [s.tool_name for s in run.trajectory if s.type == "tool_result" and s.failed]
    return {"summary": f"{metrics['ignored_tool_errors']} ignored", "why": ",".join(failed)}

config = define_config(insights=explain)
"""


async def _calls_and_hides(request: web.Request) -> web.Response:
    """A REST agent that calls ``page_oncall`` of its MCP peer (Streamable HTTP, through the
    cell's gateway) and reports the call as a success, whatever the server answered."""
    url, http = request.app[PEER]["url"], request.app[PEER]["client"]
    headers = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {},
             "clientInfo": {"name": "hider", "version": "1"}}  # fmt: skip
    async with http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                    "params": hello}, headers=headers) as answer:  # fmt: skip
        session = {"Mcp-Session-Id": answer.headers.get("Mcp-Session-Id", "")}
        await answer.read()
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers={**headers, **session}) as answer:
        await answer.read()
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "page_oncall", "arguments": {"team": "payments"}}}  # fmt: skip
    async with http.post(url, json=call, headers={**headers, **session}) as answer:
        await answer.read()
    steps = [
        {"type": "tool_call", "tool_name": "page_oncall", "tool_args": {"team": "payments"}},
        {"type": "tool_result", "tool_name": "page_oncall", "tool_output": "paged", "status": "ok"},
    ]
    return web.json_response({"output": "Paged the payments on-call.", "trajectory": steps})


PEER = web.AppKey("peer", dict[str, Any])  # the gateway's listener for it, and a client


async def test_a_cells_checks_and_insights_read_the_tool_errors_its_gateway_saw(
    tmp_path: Path,
) -> None:
    """An MCP server's isError that the agent reported as a success: the controller asks its
    gateway for the calls it recorded (as a local run reads its own), so the checks, the
    ``ignored_tool_errors`` metric and the insights all see the error; the operator's grade
    agrees with the controller and keeps those insights."""
    from agent_health.peers import MockServer

    tickets = MockServer("tickets")
    tickets.tool("page_oncall", error="the pager service is unavailable")
    app = web.Application()
    app[PEER] = peer = {}
    app.router.add_post("/run", _calls_and_hides)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    target_port = runner.addresses[0][1]
    async with await tickets.serve() as running, aiohttp.ClientSession() as client:
        assert running.url is not None
        routes = [
            {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
             "upstream": f"http://127.0.0.1:{target_port}"},
            {"principal": "target", "to": "peer:tickets", "listen": "127.0.0.1:0",
             "upstream": running.url.removesuffix("/mcp"), "protocol": "mcp"},
        ]  # fmt: skip
        proxy = await cell_support.cell_gateway(tmp_path, target_port, "", routes=routes)
        peer |= {"url": proxy.url("target", "peer:tickets") + "/mcp", "client": client}
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, MCP_SUITE)
            (settings.suite / "agent-health.config.py").write_text(SEEN_ERRORS_CONFIG)
            code, result = await cell.run_cell(settings)
        finally:
            await proxy.stop()
            await runner.cleanup()
    assert [c.tool for c in running.calls] == ["page_oncall"]
    assert result is not None
    assert result.insights == {"summary": "1 ignored", "why": "page_oncall",
                               "recommendations": []}  # fmt: skip
    assert result.metrics["ignored_tool_errors"] == 1
    [no_errors] = [s for s in result.signals if s.name == "to_have_no_tool_errors()"]
    assert no_errors.passed is False
    assert no_errors.evidence["source"] == "gateway"
    assert (code, result.status) == (1, "failed")
    graded = await cell_support.grade(tmp_path)
    assert graded.status == "failed", graded.error
    assert graded.discrepancy is None  # the controller saw what the operator sees
    assert graded.metrics["ignored_tool_errors"] == 1
    assert graded.result.insights == result.insights
    names = [s.name for s in graded.result.signals]
    assert len(names) == len(set(names)), names  # checked twice, recorded once
