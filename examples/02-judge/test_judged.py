"""LLM judges on the triage agent: contextual, observing, agentic, and a custom evaluator."""

from agent_health import test

PROMPT = "Diagnose why the payment service is failing."


@test("the RCA is judged correct", labels=["judge:contextual"])
async def rca_is_correct(agent, judge):
    result = await agent.run(PROMPT)
    # One model call; the prompt carries the criteria plus the trajectory and the output.
    verdict = await judge(result, 'says "db-primary" is the database that cannot be reached')
    verdict.or_throw()  # stop here when it did not pass


@test("tone is recorded, never gates", labels=["judge:observe"])
async def tone(agent, judge):
    result = await agent.run(PROMPT)
    await judge.observe(result, "is written for an on-call engineer", context=["output"])


@test("the judge checks the traces itself", labels=["judge:agentic"])
async def agentic(agent, judge):
    result = await agent.run(PROMPT)
    # A bounded tool loop over this run's spans, logs and metrics (read-only, run-scoped).
    await judge(
        result,
        'says "db-primary" and the logs back it up',
        tools=["trace_query"],
        max_steps=4,
    )


@test("a custom evaluator from the config", labels=["judge:custom"])
async def custom(agent, judge):
    result = await agent.run(PROMPT)
    await judge(result, "names the failing host", evaluator="names_the_host")
