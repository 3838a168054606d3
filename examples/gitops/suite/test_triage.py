"""Quickstart: drive the incident-triage agent and check what it did."""

from agent_health import test

INCIDENT_LOG = {"description": "Error log", "value": "Connection refused to db-primary:5432"}


async def incident():
    # A fixture: setup before `yield`, teardown after (always, even when the test fails).
    ticket = {"id": "INC-1042", "service": "payment", "notes": []}
    yield ticket
    ticket["notes"].append("closed by the test run")


test = test.extend(incident=incident)


@test("payment RCA names the DB outage", labels=["category:RCA", "difficulty:hard"])
async def payment_rca(agent, expect, judge, incident):
    result = await agent.run(
        f"Diagnose why the {incident['service']} service is failing.",
        context=[INCIDENT_LOG],
    )
    expect(result).to_have_called_tool("search_logs", {"service": "payment"})
    expect(result).to_have_called_tools_in_order(["search_logs", "service_status"])
    expect(result.output).to_match(r"(?i)payment[- ]service")
    expect(result.output).to_contain("db-primary")
    expect(result).to_complete_within(seconds=30)
    await judge(result, "identifies that the payment service cannot reach its database")


@test(
    "auth outage is an expired certificate",
    labels=["category:RCA", "difficulty:easy"],
    default_prompt="Why are logins failing on the auth service?",
)
async def auth_rca(agent, expect):
    result = await agent.run()  # sends the default_prompt
    expect(result).to_have_called_tool("search_logs", times=1)
    expect(result).not_to_have_called_tool("service_status", {"name": "db-primary"})
    expect(result.output).to_match(r"(?i)expired .*certificate")
    expect(result).to_have_no_tool_errors()


with test.describe("budgets"):

    @test("a healthy service costs few tokens", labels=["category:cost"])
    async def healthy_is_cheap(agent, expect):
        result = await agent.run("Is the search service healthy?")
        expect(result).to_use_at_most_tokens(200)
        expect(len(result.tool_calls())).to_be_less_than(3)
        expect(result.output).to_satisfy(lambda text: "healthy" in text, "says healthy")

    @test("an unknown service gets a clarifying answer", labels=["category:cost"])
    async def unknown_service(agent, expect, judge):
        result = await agent.run("Something is broken, help!")
        expect(result).not_to_have_called_tool("search_logs")
        expect(result.output).to_contain("could not tell")
        await judge.observe(result, "asks the user which service they mean")
