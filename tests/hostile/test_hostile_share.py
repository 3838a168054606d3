"""A target that fills its cell's share of the ledger — its calls to a peer and its span
exports, through the cell's real gateway on loopback — to have its failed test graded an
infrastructure error, out of the pass rate. The gateway marks the gap as the target's doing,
and the grade holds it against the agent: a failed test stays failed, a passed one is not
passed. A share too small for the controller's own records is still the infrastructure's."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from pathlib import Path

import aiohttp
import pytest
from agent_health.cluster.grading import grading
from agent_health.engine.controller import cell
from agent_health.ledger import backends, records
from aiohttp import web
from support.cell_support import CELL, KEY, TEST_ID, cell_gateway, cell_settings, ledger_lines
from support.gateway_support import serving

SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_contain("db-primary")
"""
CALLS, SPANS = 40, 6


def flooding_agent(answer: str, where: dict[str, str]) -> web.Application:
    """An agent that exports large spans of its run's trace and calls its peer ``CALLS``
    times through the gateway (``where``: the gateway's URLs, filled in once it listens),
    then answers ``answer``."""

    async def run(request: web.Request) -> web.Response:
        trace_id = request.headers["traceparent"].split("-")[1]
        async with aiohttp.ClientSession() as client:
            for _ in range(SPANS):
                span = {
                    "traceId": trace_id,
                    "spanId": secrets.token_hex(8),
                    "name": "chat x",
                    "attributes": [{"key": "note", "value": {"stringValue": "x" * 1500}}],
                }
                body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
                async with client.post(where["otlp"] + "/v1/traces", json=body) as answered:
                    assert answered.status == 200
            for n in range(CALLS):
                async with client.get(f"{where['peer']}/sink/{n}{'x' * 512}") as answered:
                    assert answered.status == 200
        return web.json_response({"output": answer})

    async def sink(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/run", run)
    app.router.add_get("/sink/{rest}", sink)
    return app


async def run_and_grade(tmp_path: Path, answer: str, **caps: int) -> grading.CellGrade:
    where: dict[str, str] = {}
    async with serving(flooding_agent(answer, where)) as agent_url:
        routes = [
            {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
             "upstream": agent_url},
            {"principal": "target", "to": "peer:logs", "listen": "127.0.0.1:0",
             "upstream": agent_url},
        ]  # fmt: skip
        port = int(agent_url.rsplit(":", 1)[1])
        proxy = await cell_gateway(
            tmp_path, port, "http://127.0.0.1:9", routes=routes, otlp_listen="127.0.0.1:0",
            **caps,
        )  # fmt: skip
        assert proxy.otlp_url is not None
        where |= {"peer": proxy.url("target", "peer:logs"), "otlp": proxy.otlp_url}
        try:
            await cell.run_cell(cell_settings(tmp_path, proxy, SUITE))
        finally:
            await proxy.stop()
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL)
    try:
        return await grading.grade_cell(backend, CELL, KEY, expected)
    finally:
        await backend.close()


def mark(tmp_path: Path) -> records.CellMeta:
    marks = [json.loads(line) for line in ledger_lines(tmp_path) if '"dropped"' in line]
    assert marks, "the gateway dropped nothing"
    found = records.parse_object(marks[-1], 1)
    assert isinstance(found, records.CellMeta)
    return found


@pytest.mark.slow
async def test_a_flood_keeps_a_failed_test_failed(tmp_path: Path) -> None:
    graded = await run_and_grade(
        tmp_path, "all is well", max_cell_exchanges=20, max_cell_bytes=16_000
    )
    assert (graded.status, graded.cause, graded.infra) == ("failed", None, False), graded.error
    assert "the gateway had to drop" in (graded.error or "")
    assert (mark(tmp_path).dropped_cause, graded.result.status) == ("agent", "failed")
    # `agent-health grade` grades the ledger the same way, outside the cluster.
    report = tmp_path / "graded.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.cli", "grade", f"file://{tmp_path / 'ledger'}",
        "--key-file", str(tmp_path / "key"), "--reporter", f"json:{report}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    printed, _ = await proc.communicate()
    assert proc.returncode == 1, printed.decode()  # failed, not errored
    summary = json.loads(report.read_text())["summary"]
    assert (summary["failed"], summary["errored"], summary["pass_rate"]) == (1, 0, 0.0)


@pytest.mark.slow
async def test_a_flood_never_passes_and_blames_the_agent(tmp_path: Path) -> None:
    graded = await run_and_grade(tmp_path, "db-primary is down", max_cell_exchanges=20)
    assert (graded.status, graded.cause, graded.infra) == ("errored", "agent", False)
    assert (graded.error or "").startswith("not passed: the gateway had to drop")
    assert "the target's own traffic filled it" in (graded.error or "")
