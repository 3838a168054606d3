"""The ``traces`` fixture: this test's traces, resolved from its run once the agent ran.

It is ``result.traces`` without holding the result, so reading is async the same way::

    async def body(agent, expect, traces):
        await agent.run("...")
        expect(await traces.total_tokens()).to_be_less_than(2_000)
        trace = await traces.load()          # or load once, then plain properties
        expect(trace.tool_histogram.get("search_logs", 0)).to_be_less_than(3)
"""

from __future__ import annotations

from typing import Any

from agent_health.sdk import context, errors


class TracesFixture:
    """Forwards to ``result.traces`` of this test's run (a ``TracesView``); a clear error
    before the run, and "traces not enabled for agent X" when they are switched off."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: context.TestContext) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        result = self._ctx.result
        if result is None:
            raise errors.AgentHealthError(
                f"traces.{name}: this test's traces exist only after agent.run()"
            )
        return getattr(result.traces, name)
