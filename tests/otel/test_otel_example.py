"""The example agent instrumented with the OpenTelemetry SDK (examples/agents/otel_agent.py):
its spans come back through a cell's gateway, and through a local run's receiver, into
``result.traces``, fill in the trajectory and tokens it did not report, and are sealed
into the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from agent_health.engine.controller import cell
from agent_health.ledger import records
from support import cell_support, examples_support
from support.cell_support import CELL

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "agents" / "otel_agent.py"
EXAMPLE = ROOT / "examples" / "06-otel"
SUITE = """
from agent_health import test


@test("diagnoses the payment outage", default_prompt="Why is payment failing?")
async def payment(agent, expect):
    result = await agent.run()
    expect(result.output).to_match(r"db-primary")
    trace = await result.traces.load()
    expect(trace.source).to_equal("otel")
    expect(trace.tool_histogram).to_equal({"search_logs": 1, "service_status": 1})
    expect(trace.total_tokens).to_be_less_than(100)
    expect(result).to_have_called_tools_in_order(["search_logs", "service_status"])
"""


@contextlib.asynccontextmanager
async def otel_agent(port: int, endpoint: str | None) -> AsyncIterator[str]:
    """The example agent as its own process on ``port``, exporting to ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENT), "--port", str(port),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            while True:
                if process.returncode is not None:
                    assert process.stderr is not None
                    raise AssertionError((await process.stderr.read()).decode())
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(url + "/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield url
    finally:
        process.terminate()
        await process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _cell(tmp_path: Path, otlp: bool) -> tuple[int, object, list[str]]:
    port = _free_port()
    fields = {"otlp_listen": "127.0.0.1:0"} if otlp else {}
    proxy = await cell_support.cell_gateway(tmp_path, port, "http://127.0.0.1:9", **fields)
    try:
        async with otel_agent(port, proxy.otlp_url):
            settings = cell_support.cell_settings(tmp_path, proxy, SUITE)
            code, result = await cell.run_cell(settings)
    finally:
        await proxy.stop()
    return code, result, cell_support.ledger_lines(tmp_path)


async def test_in_a_cell_the_agents_spans_come_back_through_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell_support.private_judge_cache(monkeypatch, tmp_path)
    code, result, lines = await _cell(tmp_path, otlp=True)
    assert result is not None
    assert result.status == "passed", result  # type: ignore[attr-defined]
    assert code == 0
    parsed = records.parse_lines(lines)
    spans = [r for r in parsed if isinstance(r, records.SpansRecord)]
    assert spans
    assert all(r.run_id == CELL and r.principal == "target" for r in spans)
    names = sorted(s["name"] for r in spans for s in r.spans)
    assert names == [
        "chat triage-rules-1", "chat triage-rules-1", "chat triage-rules-1",
        "execute_tool search_logs", "execute_tool service_status", "invoke_agent otel-triage",
    ]  # fmt: skip
    # The spans are the cell's own trace: the one the controller's call carried.
    [run] = [r for r in parsed if isinstance(r, records.RunResultRecord)]
    assert {s["trace_id"] for r in spans for s in r.spans} == {spans[0].trace_id}
    assert [s["tool_name"] for s in run.trajectory if s["type"] == "tool_call"] == [
        "search_logs",
        "service_status",
    ]
    assert all(s["source"] == "otel" for s in run.trajectory)
    assert run.token_usage["total"] > 0
    # The grader reads a ledger with spans records as it reads any other.
    grade = await cell_support.grade(tmp_path)
    assert grade.status == "passed", grade
    # ... and its derived metrics come from the steps the spans filled in.
    assert grade.metrics["tool_histogram"] == {"search_logs": 1, "service_status": 1}
    assert grade.metrics["llm_calls"] == 3


async def test_in_a_cell_without_the_receiver_the_spans_are_nowhere_and_the_test_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same test fails without the receiver: what it reads comes only through it."""
    cell_support.private_judge_cache(monkeypatch, tmp_path)
    _, result, lines = await _cell(tmp_path, otlp=False)
    assert result is not None
    assert result.status != "passed"  # type: ignore[attr-defined]
    assert not any('"kind":"spans"' in line for line in lines)


@pytest.mark.slow
def test_the_otel_example_passes_through_the_cli_and_seals_its_spans(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    ledger = tmp_path / "ledger"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run",
         "--reporter", f"json:{report}", "--ledger", f"file://{ledger}"],
        cwd=examples_support.copy(tmp_path, EXAMPLE.name),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["summary"]["passed"] == 2
    payment = next(t for t in data["tests"] if "payment" in t["name"])
    # Derived metrics of an agent that reported only spans: read from them.
    assert payment["metrics"]["tool_histogram"] == {"search_logs": 1, "service_status": 1}
    assert payment["metrics"]["llm_calls"] == 3
    assert payment["metrics"]["total_tokens"] == 45
    lines = (ledger / "run.jsonl").read_text().splitlines()
    sealed = [json.loads(line) for line in lines if '"kind":"spans"' in line]
    assert {s["record"]["run_id"] for s in sealed} == {t["run_id"] for t in data["tests"]}
    verify = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "ledger", "verify", f"file://{ledger}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr


CONVERSATION = """
from agent_health import test


@test("two turns, each its own spans", default_prompt="Why is payment failing?")
async def two_turns(agent, expect):
    result = await agent.run(turns=["And is search healthy?"])
    first, second = result.conversation
    # Each turn's trajectory is filled from the spans that came with that turn alone.
    expect([s.tool_name for s in first.trajectory if s.type == "tool_call"]).to_equal(
        ["search_logs", "service_status"]
    )
    expect([s.tool_name for s in second.trajectory if s.type == "tool_call"]).to_equal(
        ["search_logs"]
    )
    expect((await result.traces.load()).tool_histogram).to_equal(
        {"search_logs": 2, "service_status": 1}
    )
"""


@pytest.mark.slow
def test_a_conversation_with_the_otel_agent_fills_each_turn_from_its_own_spans(
    tmp_path: Path,
) -> None:
    config = (EXAMPLE / "agent-health.config.py").read_text()
    (tmp_path / "agent-health.config.py").write_text(
        config.replace('"../agents/otel_agent.py"', repr(str(AGENT)))
    )
    (tmp_path / "test_talk.py").write_text(CONVERSATION)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", "--no-ledger"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
