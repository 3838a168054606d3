"""An agent whose OTLP spans are hostile (a start time of 400 digits, a token count of
``Infinity``, a negative one), through the real CLI and its OTLP receiver: the spans are
left out and counted at ingest, the agent's other spans still fill in its trajectory, and a
test the agent fails stays failed — never an errored (test) result out of the pass rate."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from agent_health.engine.controller import cell
from support.cell_support import cell_gateway, cell_settings, grade
from support.hostile_support import free_port

AGENT = Path(__file__).resolve().parents[1] / "support" / "otlp_json_agent.py"
CONFIG = """
from agent_health import define_config

config = define_config(
    agents={{"a": {{
        "connector": "rest",
        "url": "http://127.0.0.1:{{port}}/run",
        "command": ["python", {agent!r}, "{{port}}", "--hostile", {kind!r}],
        "ready_url": "http://127.0.0.1:{{port}}/healthz",
    }}}},
)
"""
SUITE = """
from agent_health import test


@test("searches the logs", default_prompt="go")
async def searches(agent, expect):
    result = await agent.run()
    expect(result).to_have_called_tool("search_logs")


@test("restarts the pod", default_prompt="go")
async def restarts(agent, expect):
    result = await agent.run()
    expect(result).to_have_called_tool("restart_pod")
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["start", "infinity", "negative"])
def test_hostile_spans_never_lift_a_failed_test_out_of_the_pass_rate(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "agent-health.config.py").write_text(CONFIG.format(agent=str(AGENT), kind=kind))
    (tmp_path / "test_spans.py").write_text(textwrap.dedent(SUITE))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", "--reporter", f"json:{report}",
         "--ledger", f"file://{tmp_path / 'ledger'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
    )  # fmt: skip
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 1, printed  # a failed test, no errored one
    summary = json.loads(report.read_text())["summary"]
    assert (summary["passed"], summary["failed"], summary["errored"]) == (1, 1, 0), printed
    assert summary["pass_rate"] == 0.5
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    # The agent's other spans filled its trajectory: the tool it called, from its spans.
    steps = tests["searches the logs"]["trajectory"]
    assert [s.get("tool_name") for s in steps if s["type"] == "tool_call"] == ["search_logs"]
    assert {s.get("source") for s in steps} == {"otel"}
    assert tests["restarts the pod"]["status"] == "failed"
    # Never silent: the run says what the receiver left out, and why.
    assert "the OTLP receiver left out 2 invalid spans" in printed
    ledger = (tmp_path / "ledger" / "run.jsonl").read_text()
    sealed = [json.loads(line)["record"] for line in ledger.splitlines() if '"spans"' in line]
    assert sorted(len(r["spans"]) for r in sealed) == [3, 3]
    assert "chat hostile" not in ledger


CELL_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    expect(result).to_have_called_tool("restart_pod")
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["start", "infinity", "negative"])
async def test_in_a_cell_hostile_spans_leave_a_failed_test_failed(
    tmp_path: Path, kind: str
) -> None:
    """The same agent as the cell's target: its spans go to the cell's gateway, the
    controller fills its reply from what the gateway kept, and the operator's grade is
    failed — the spans filled in the tool it did call, and it did not call the other."""
    port = free_port()
    proxy = await cell_gateway(tmp_path, port, "http://127.0.0.1:9", otlp_listen="127.0.0.1:0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = str(proxy.otlp_url)
    agent = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENT), str(port), "--hostile", kind, env=env
    )
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"http://127.0.0.1:{port}/healthz")).is_success:
                        break
                await asyncio.sleep(0.05)
        code, result = await cell.run_cell(cell_settings(tmp_path, proxy, CELL_SUITE))
        health = proxy.spans.summary()["otlp"] if proxy.spans is not None else {}
    finally:
        agent.terminate()
        await agent.wait()
        await proxy.stop()
    assert (code, result.status if result else None) == (1, "failed")
    assert health["spans_invalid"] == 1
    graded = await grade(tmp_path)
    assert (graded.status, graded.cause) == ("failed", None), graded.error
    passed = {s.name: s.passed for s in graded.result.signals if s.kind == "deterministic"}
    assert passed == {"to_have_called_tool('search_logs')": True,
                      "to_have_called_tool('restart_pod')": False}  # fmt: skip
