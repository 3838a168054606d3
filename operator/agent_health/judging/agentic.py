"""Agentic mode: a bounded tool-calling loop over the run-scoped ``trace_query`` tools.

The judge sees the criteria and the chosen evidence, may call ``get_spans``, ``get_logs``,
``query`` and ``metrics`` (all bound to this run, see :mod:`agent_health.judging.tools`),
and ends by calling ``submit_verdict``. The loop stops with :class:`errors.LoopExhausted`
after ``max_steps`` model calls or once ``max_tokens`` (input + output, all calls) are spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent_health.judging import errors, prompt
from agent_health.judging.chat import VERDICT_TOOL_NAME, ChatRequest, Message, Tally
from agent_health.judging.tools import TracePack

if TYPE_CHECKING:
    from agent_health.judging.providers import Provider


async def judge(
    provider: Provider,
    *,
    model: str,
    criteria: str,
    parts: Mapping[str, Any],
    pack: TracePack,
    max_steps: int,
    max_tokens: int,
    max_output_tokens: int,
    tally: Tally,
    expected: str | None = None,
) -> prompt.JudgeAnswer:
    """Let ``model`` query this run's traces, then return its submitted verdict."""
    messages: list[Message] = [Message("user", prompt.agentic_message(criteria, parts, expected))]
    tools = (*pack.specs, prompt.VERDICT_TOOL)
    nudged = False
    for _ in range(max_steps):
        completion = await provider(
            ChatRequest(
                model=model,
                system=prompt.AGENTIC_SYSTEM,
                messages=tuple(messages),
                tools=tools,
                max_tokens=max_output_tokens,
            )
        )
        tally.add(completion)
        submitted = next((c for c in completion.tool_calls if c.name == VERDICT_TOOL_NAME), None)
        if submitted is not None:
            return prompt.validate(submitted.arguments, str(dict(submitted.arguments)))
        if not completion.tool_calls:
            try:
                return prompt.parse(completion.text)
            except errors.UnparseableAnswer:
                if nudged:
                    raise
            nudged = True
            messages += [
                Message("assistant", completion.text or "(no text)"),
                Message("user", "Give your verdict by calling submit_verdict."),
            ]
        else:
            messages.append(Message("assistant", completion.text, completion.tool_calls))
            for call in completion.tool_calls:
                answer = await pack.call(call.name, call.arguments)
                messages.append(Message("tool", answer, tool_call_id=call.id))
        if tally.total >= max_tokens:
            raise errors.LoopExhausted(
                f"agentic judge spent {tally.total} tokens (max_tokens={max_tokens}) "
                "without submitting a verdict"
            )
    raise errors.LoopExhausted(
        f"agentic judge made {max_steps} model calls (max_steps={max_steps}) "
        "without submitting a verdict"
    )
