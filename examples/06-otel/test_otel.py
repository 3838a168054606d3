"""The agent answers with its output alone; what it did is in the spans it exported."""

from agent_health import test


@test("the payment outage, read from the agent's spans", default_prompt="Why is payment failing?")
async def payment_from_spans(agent, expect):
    result = await agent.run()
    expect(result.output).to_match(r"db-primary")
    trace = await result.traces.load()  # the spans that reached agent-health's receiver
    expect(trace.source).to_equal("otel")
    expect(trace.tool_histogram).to_equal({"search_logs": 1, "service_status": 1})
    expect(trace.llm_calls).to_equal(3)
    # Its reply had no trajectory and no token usage: the spans fill them in, so the
    # trajectory matchers and the derived metrics work on what it exported.
    expect(result).to_have_called_tools_in_order(["search_logs", "service_status"])
    expect(result).to_have_called_tool("service_status", {"name": "db-primary"})
    expect(result.token_usage.total).to_equal(trace.total_tokens)
    expect(trace.total_tokens).to_be_less_than(100)
    expect(trace.cost_usd).to_be_less_than(0.001)
    root = next(s for s in trace.spans if s.operation == "invoke_agent")
    expect(root.attributes["agent_health.run_id"]).to_equal(result.run_id)


@test("a healthy service: one tool call, no tool errors", default_prompt="Is search healthy?")
async def search_from_spans(agent, expect):
    result = await agent.run()
    expect(result.output).to_contain("no errors")
    expect(await result.traces.tool_calls()).to_equal(1)
    expect(await result.traces.error_spans()).to_equal([])
    expect(result).to_have_no_tool_errors()
