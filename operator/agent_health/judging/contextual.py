"""Contextual mode: one model call whose prompt carries the criteria and the chosen evidence.

The answer must follow :data:`prompt.RESPONSE_SCHEMA`; an answer that does not is asked for
once more (with the reason), then the call fails with the raw text in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent_health.judging import errors, prompt
from agent_health.judging.chat import ChatRequest, Message, Tally

if TYPE_CHECKING:
    from agent_health.judging.providers import Provider


async def judge(
    provider: Provider,
    *,
    model: str,
    criteria: str,
    parts: Mapping[str, Any],
    max_tokens: int,
    tally: Tally,
    expected: str | None = None,
) -> prompt.JudgeAnswer:
    """Ask ``model`` whether ``criteria`` holds given ``parts`` (and the expected answer)."""
    text = prompt.user_message(criteria, parts, expected)
    messages: tuple[Message, ...] = (Message("user", text),)
    for attempt in range(2):
        completion = await provider(
            ChatRequest(
                model=model,
                system=prompt.SYSTEM,
                messages=messages,
                schema=prompt.RESPONSE_SCHEMA,
                max_tokens=max_tokens,
            )
        )
        tally.add(completion)
        try:
            return prompt.parse_completion(completion)
        except errors.UnparseableAnswer as err:
            if attempt:
                raise
            messages = (
                *messages,
                Message("assistant", completion.text or "(no text)"),
                Message(
                    "user",
                    f"That answer is not a valid verdict ({err.why}). Answer with only the "
                    "JSON object: passed, score, reasoning.",
                ),
            )
    raise AssertionError("unreachable")  # pragma: no cover
