"""A local run's OTLP receiver, through the real CLI: the agents it starts are told where it
listens, their spans of their own run's trace are ``result.traces``, the rest are not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[1] / "support" / "otlp_json_agent.py"
CONFIG = """
from agent_health import define_config

config = define_config(
    agents={{"a": {{
        "connector": "rest",
        "url": "http://127.0.0.1:{{port}}/run",
        "command": ["python", {agent!r}, "{{port}}", *{extra!r}],
        "ready_url": "http://127.0.0.1:{{port}}/healthz",
        "env": {agent_env},
    }}}},
    traces={traces},
)
"""
OWN_SPANS = """
import json, sys
from agent_health import test


@test("own spans only", default_prompt="go")
async def own(agent, expect):
    result = await agent.run()
    told = json.loads(result.output)
    expect(told["endpoint"]).to_match(r"^http://127\\.0\\.0\\.1:[0-9]+$")
    # The receiver's answer: two spans of another trace or run were not taken.
    expect(told["answer"]).to_equal({"partialSuccess": {"rejectedSpans": "2", "errorMessage":
        "2 spans of a trace no run here was sent (or naming another run)"}})
    trace = await result.traces.load()
    expect(trace.source).to_equal("otel")
    expect(sorted(s.name for s in trace.spans)).to_equal(["chat m", "invoke_agent json"])
    expect(trace.total_tokens).to_equal(10)
    expect(result.token_usage.total).to_equal(10)  # the reply had none: from the spans
    # A JSON export needs no OpenTelemetry package at all.
    expect("opentelemetry" in sys.modules).to_equal(False)
"""
NO_SPANS = """
import json
from agent_health import test


@test("no spans", default_prompt="go")
async def none(agent, expect):
    result = await agent.run()
    expect(str(json.loads(result.output)["endpoint"])).to_match(r"{told}")
    expect((await result.traces.load()).source).to_equal("trajectory")
"""


def _run(
    tmp_path: Path,
    suite: str,
    *,
    extra: tuple[str, ...] = (),
    traces: str = "{}",
    env: dict[str, str] | None = None,
    agent_env: str = "{}",
) -> tuple[str, str]:
    """Run ``suite`` through the CLI (``env`` added to a shell without OTEL_ variables); the
    run's ledger file and what it printed."""
    (tmp_path / "agent-health.config.py").write_text(
        CONFIG.format(agent=str(AGENT), extra=list(extra), traces=traces, agent_env=agent_env)
    )
    (tmp_path / "test_otlp.py").write_text(textwrap.dedent(suite))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", "--reporter", f"json:{report}",
         "--ledger", f"file://{tmp_path / 'ledger'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | (env or {}),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (tmp_path / "ledger" / "run.jsonl").read_text(), proc.stdout


@pytest.mark.slow
def test_an_agent_it_starts_exports_to_it_and_only_its_own_traces_spans_join(
    tmp_path: Path,
) -> None:
    ledger, printed = _run(tmp_path, OWN_SPANS)
    # Never silent: the run says what the receiver did not keep, and why.
    assert "the OTLP receiver kept none of 2 spans of traces no test sent" in printed
    sealed = [json.loads(line)["record"] for line in ledger.splitlines() if '"spans"' in line]
    assert len(sealed) == 1
    assert sorted(s["name"] for s in sealed[0]["spans"]) == ["chat m", "invoke_agent json"]
    assert sealed[0]["rejected"] == 1  # the span in its trace that named another run


@pytest.mark.slow
def test_an_agent_that_exports_nothing_keeps_its_trajectory_as_its_trace(tmp_path: Path) -> None:
    suite = NO_SPANS.replace("{told}", "^http://127")
    ledger, printed = _run(tmp_path, suite, extra=("--quiet",))
    assert "OTLP" not in printed
    assert '"kind":"spans"' not in ledger


@pytest.mark.slow
def test_the_receiver_can_be_turned_off(tmp_path: Path) -> None:
    suite = NO_SPANS.replace("{told}", "^None$")
    ledger, _ = _run(tmp_path, suite, traces='{"otlp": {"enabled": False}}')
    assert '"kind":"spans"' not in ledger


@pytest.mark.slow
def test_a_collector_named_in_the_agents_env_wins(tmp_path: Path) -> None:
    suite = NO_SPANS.replace("{told}", "^http://127\\.0\\.0\\.1:9$")
    own = '{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}'
    ledger, _ = _run(tmp_path, suite, extra=("--quiet",), agent_env=own)
    assert '"kind":"spans"' not in ledger


@pytest.mark.slow
def test_agent_healths_own_export_endpoint_is_not_the_agents(tmp_path: Path) -> None:
    # OTEL_EXPORTER_OTLP_ENDPOINT in agent-health's environment is where agent-health exports
    # (docs/otel.md); the agent it starts inherits none of it and is told the run's receiver.
    suite = NO_SPANS.replace("{told}", "^http://127\\.0\\.0\\.1:[0-9]{3,}$")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    _run(tmp_path, suite, extra=("--quiet",), env=env)
