"""Eight tests of the triage agent, run three times: most pass, one fails in one repeat, one
in every repeat, one errors in its last (the results a CI log shows at 80 columns)."""

from agent_health import test

LOG = {"description": "Error log", "value": "Connection refused to db-primary:5432"}


@test("payment RCA names the DB outage from the error log", labels=["category:RCA"])
async def payment(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.", context=[LOG])
    expect(result).to_have_called_tool("search_logs", {"service": "payment"})
    expect(result.output).to_contain("db-primary")


@test("auth outage is an expired certificate, found in one search", labels=["category:RCA"])
async def auth(agent, expect):
    result = await agent.run("Why are logins failing on the auth service?")
    expect(result).to_have_called_tool("search_logs", times=1)
    expect(result.output).to_match(r"(?i)expired .*certificate")


@test("a healthy search service costs few tokens", labels=["category:cost"])
async def healthy(agent, expect):
    result = await agent.run("Is the search service healthy?")
    expect(result).to_use_at_most_tokens(200)


@test("an unknown service gets a clarifying answer, not a guess", labels=["category:cost"])
async def unknown(agent, expect):
    result = await agent.run("Something is broken, help!")
    expect(result).not_to_have_called_tool("search_logs")
    expect(result.output).to_contain("could not tell")


@test("the payment answer names the database in every repeat", labels=["category:RCA"])
async def every_repeat(agent, expect, test_info):
    result = await agent.run("Diagnose why the payment service is failing.", context=[LOG])
    # the second repeat asks for a word the answer never has: one repeat in three fails
    expect(result.output).to_contain("db-primary" if test_info.repeat != 1 else "db-replica")


@test("the agent rolls back the last deploy of the payment service", labels=["category:fix"])
async def rollback(agent, expect):
    result = await agent.run("Roll back the last deploy of the payment service.")
    expect(result).to_have_called_tool("deploy_rollback")


@test("the ticket is filed after the diagnosis", labels=["category:fix"])
async def ticket(agent, expect, test_info):
    result = await agent.run("Diagnose why the payment service is failing.", context=[LOG])
    expect(result.output).to_contain("db-primary")
    if test_info.repeat == 2:
        raise RuntimeError("the ticket system answered 503")


@test(
    "a very long title that names the service, the symptom, the log line, the root cause "
    "and the first fix the on-call engineer should apply",
    labels=["category:RCA"],
)
async def long_title(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.", context=[LOG])
    expect(result).to_complete_within(seconds=60)
