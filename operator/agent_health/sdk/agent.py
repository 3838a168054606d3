"""The ``agent`` fixture: ``await agent.run(prompt)`` is the only way an agent runs."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence

from agent_health.connectors.protocol import AgentRequest, ContextItem
from agent_health.sdk import context as ctx_mod
from agent_health.sdk import errors
from agent_health.sdk.results import RunResult


def traceparent() -> str:
    """A new W3C ``traceparent`` (version 00, sampled)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def _context_items(
    value: Sequence[Mapping[str, str] | ContextItem] | None, test: str
) -> tuple[ContextItem, ...]:
    items = []
    for i, item in enumerate(value or ()):
        if isinstance(item, ContextItem):
            items.append(item)
            continue
        if not isinstance(item, Mapping) or "value" not in item:
            raise errors.AgentRunError(
                f"test {test!r}: context[{i}] must be {{'description': ..., 'value': ...}}, "
                f"got {item!r}"
            )
        items.append(
            ContextItem(description=str(item.get("description", "")), value=str(item["value"]))
        )
    return tuple(items)


class Agent:
    """Runs the agent under test, once per test."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ctx_mod.TestContext) -> None:
        self._ctx = ctx

    async def run(
        self,
        prompt: str | None = None,
        *,
        context: Sequence[Mapping[str, str] | ContextItem] | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Send ``prompt`` (or the test's ``default_prompt``) and return what the agent did.

        A second call in the same test raises: one test is one run of the agent.
        """
        ctx = self._ctx
        case = ctx.case
        if ctx.prompt_sent is not None:
            raise errors.AgentRunError(
                f"test {case.title!r} called agent.run() a second time; a test runs the "
                "agent once (split it into two tests, or use --repeat)"
            )
        text = prompt if prompt is not None else case.default_prompt
        if text is None:
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run() got no prompt and the test has no default_prompt"
            )
        if not isinstance(text, str):
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run() prompt must be a string, got "
                f"{type(text).__name__}"
            )
        if ctx.agent_caller is None:
            raise errors.AgentRunError(
                "no agent to run: pass --agent NAME|URL or set default_agent in "
                "agent-health.config.py"
            )
        ctx.prompt_sent = text
        items = _context_items(context if context is not None else case.context, case.title)
        request = AgentRequest(
            prompt=text,
            context=items,
            run_id=ctx.info.run_id,
            env=dict(env or {}),
            traceparent=traceparent(),
            timeout_s=timeout,
        )
        started = time.perf_counter()
        try:
            with ctx.waiting("agent"):
                reply = await ctx.agent_caller(request)
        except Exception as err:
            ctx.agent_error = str(err) or type(err).__name__
            raise
        duration_ms = (time.perf_counter() - started) * 1000
        result = RunResult(
            run_id=request.run_id,
            prompt=text,
            context=items,
            output=reply.output,
            trajectory=reply.trajectory,
            token_usage=reply.token_usage,
            duration_ms=duration_ms,
            raw=reply.model_extra or {},
            traceparent=request.traceparent,
            unreported=reply.unreported,
        )
        ctx.result = result
        return result
