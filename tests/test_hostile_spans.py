"""An agent whose OTLP spans are hostile (a start time of 400 digits, a token count of
``Infinity``, a negative one), through the real CLI and its OTLP receiver: the spans are
left out and counted at ingest, the agent's other spans still fill in its trajectory, and a
test the agent fails stays failed — never an errored (test) result out of the pass rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parent / "otlp_json_agent.py"
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
