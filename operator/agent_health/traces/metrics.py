"""Metrics derived from a RunResult, computed for every test that ran the agent."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agent_health.sdk.results import RunResult


def derive(result: RunResult | None) -> dict[str, Any]:
    """Tokens, latency and tool use of one run (empty when the agent never ran)."""
    if result is None:
        return {}
    steps = result.trajectory_steps
    calls = [s.tool_name or "?" for s in steps if s.type == "tool_call"]
    usage = result.token_usage
    return {
        "total_tokens": usage.total,
        "input_tokens": usage.prompt,
        "output_tokens": usage.completion,
        "latency_ms": round(result.duration_ms, 3),
        "tool_calls": len(calls),
        "tool_histogram": dict(Counter(calls)),
        "tool_errors": sum(1 for s in steps if s.status == "error"),
        "steps": len(steps),
    }
