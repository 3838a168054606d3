# Diagnosis: derived metrics, a price table, insights after each test, and two agents to
# compare (the second one's log tool always fails).
from agent_health import define_config


def _agent(*extra):
    return {
        "connector": "rest",
        "url": "http://127.0.0.1:{port}/run",
        "command": ["python", "../agents/triage_agent.py", "--port", "{port}", *extra],
        "ready_url": "http://127.0.0.1:{port}/healthz",
    }


async def explain(result, traces, llm):
    """Runs once after each test: what happened, why it failed, what to change."""
    m = result.metrics
    failed = [s.name for s in result.signals if s.role == "gate" and s.passed is False]
    tips = []
    if m.get("ignored_tool_errors"):
        tips.append("handle tool errors: retry the tool or tell the user it failed")
    if m.get("redundant_tool_calls"):
        tips.append("drop repeated tool calls with the same arguments")
    if traces is not None and m.get("tool_calls"):
        errors = await traces.error_spans()
        failing = sorted({s.tool_name for s in errors if s.tool_name})
        tips.extend(f"check why {name} failed" for name in failing)
    why = f"failed gates: {', '.join(failed)}" if failed else result.error
    if llm is not None and failed:  # with a judge model configured, let it explain
        why = await llm(f"In one sentence, why did an agent fail these checks: {failed}?")
    return {
        "summary": f"{result.status}: {m.get('tool_calls', 0)} tool calls, "
        f"{m.get('total_tokens', 0)} tokens, {m.get('llm_calls', 0)} model turns",
        "why": why,
        "recommendations": tips,
    }


config = define_config(
    agents={"triage": _agent(), "triage-faulty": _agent("--fault", "tool_error")},
    default_agent="triage",
    prices={"default": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}},
    insights=explain,
)
