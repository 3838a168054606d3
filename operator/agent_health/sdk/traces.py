"""The ``traces`` fixture: this test's traces, resolved from its run once the agent ran."""

from __future__ import annotations

from typing import Any

from agent_health.sdk import context as ctx_mod
from agent_health.sdk import errors


class TracesFixture:
    """Forwards to ``result.traces`` of this test's run; a clear error before the run."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ctx_mod.TestContext) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        result = self._ctx.result
        if result is None:
            raise errors.AgentHealthError(
                f"traces.{name}: this test's traces exist only after agent.run()"
            )
        return getattr(result.traces, name)
