"""The same tests hold whichever connector reaches the agent: the trajectory, output and
token usage have one shape for REST, AG-UI, OpenAI-compatible and subprocess agents."""

from agent_health import test

INCIDENT_LOG = {"description": "Error log", "value": "Connection refused to db-primary:5432"}


@test("payment RCA through any connector", labels=["category:RCA"])
async def payment_rca(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.", context=[INCIDENT_LOG])
    expect(result).to_have_called_tool("search_logs", {"service": "payment"})
    expect(result).to_have_called_tools_in_order(["search_logs", "service_status"])
    expect(result).to_have_no_tool_errors()
    expect(result.output).to_match(r"(?i)payment[- ]service")
    expect(result.output).to_contain("db-primary")
    expect(result.token_usage.total).to_be_greater_than(0)


@test("tool results come back with the calls", labels=["category:trajectory"])
async def tool_results(agent, expect):
    result = await agent.run("Why are logins failing on the auth service?")
    results = result.trajectory.steps_of_type("tool_result")
    expect(len(results)).to_equal(len(result.tool_calls()))
    expect(results[0].tool_output["service"]).to_equal("auth")
    expect(result.output).to_match(r"(?i)expired .*certificate")


@test("an unknown service makes no tool calls", labels=["category:cost"])
async def unknown_service(agent, expect):
    result = await agent.run("Something is broken, help!")
    expect(result).not_to_have_called_tool("search_logs")
    expect(result.output).to_contain("could not tell")
