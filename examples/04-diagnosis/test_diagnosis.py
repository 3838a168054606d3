"""Metric gates: turn any derived metric or trace number into a pass/fail check."""

from agent_health import test


@test("payment RCA uses its tools cleanly", labels=["category:RCA"])
async def payment_rca(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    metrics = await result.traces.metrics()  # the same numbers as the report's "metrics"
    expect(metrics["ignored_tool_errors"]).to_equal(0)
    expect(metrics["redundant_tool_calls"]).to_equal(0)
    expect(await result.traces.total_tokens()).to_be_less_than(300)
    expect(result.output).to_contain("db-primary")


@test("auth RCA stays within its turn budget", labels=["category:RCA"])
async def auth_rca(agent, expect, traces):
    result = await agent.run("Why are logins failing on the auth service?")
    trace = await traces.load()  # load once, then read plain properties
    expect(trace.llm_calls).to_be_less_than_or_equal(3)
    expect(trace.tool_histogram).to_equal({"search_logs": 1, "service_status": 1})
    expect(result.output).to_match(r"(?i)expired .*certificate")


@test("a healthy service is cheap", labels=["category:cost"])
async def healthy_is_cheap(agent, expect):
    result = await agent.run("Is the search service healthy?")
    expect(await result.traces.cost_usd()).to_be_less_than(0.0001)
    expect(result.output).to_contain("healthy")
