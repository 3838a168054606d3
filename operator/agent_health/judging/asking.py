"""Free-form questions to the judge model (``Judging.ask``), answered through the judge cache.

Insights functions (``llm``) and the run-level rollup ask in words rather than for a
verdict. Their answers are cached like verdicts, keyed by who answers (the judge's
endpoint, model and partition) and the exact question, so the same question in another run
(the same insights prompt of an unchanged test) is answered with no model call. A
question that holds run ids or timings is a new question every run.

What the questions cost is kept in an :class:`Asked` tally (one per judge backend), so the
run's judge usage counts them beside the ``judge()`` calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.judging import cache as cache_mod
from agent_health.judging import chat
from agent_health.judging.providers import Provider
from agent_health.sdk.config import JudgeConfig

EVALUATOR = "ask"
"""The cache's evaluator name for free-form questions."""


@dataclasses.dataclass
class Asked:
    """What free-form questions cost one backend (mutable; owned by it): questions asked,
    those the cache answered, and the tokens of those the model answered."""

    calls: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


async def ask(
    provider: Provider,
    judge: JudgeConfig,
    cache: cache_mod.Cache | None,
    who: Mapping[str, Any],
    text: str,
    system: str = "",
    asked: Asked | None = None,
) -> str:
    """The model's answer to ``text`` (``system`` as its system prompt), cached; what it
    cost is added to ``asked``."""
    asked = asked if asked is not None else Asked()
    address = cache_mod.key(
        {
            "evaluator": EVALUATOR,
            **who,
            "model": judge.model,
            "system": system,
            "text": text,
            "max_tokens": judge.max_output_tokens,
        }
    )
    if cache is not None:
        stored = await cache.get(address)
        if stored is not None and isinstance(stored.get("text"), str):
            asked.calls += 1
            asked.cached += 1
            return str(stored["text"])
    completion = await provider(
        chat.ChatRequest(
            model=judge.model,
            system=system,
            messages=(chat.Message("user", text),),
            max_tokens=judge.max_output_tokens,
        )
    )
    asked.calls += 1
    asked.input_tokens += completion.input_tokens
    asked.output_tokens += completion.output_tokens
    if cache is not None:
        await cache.put(address, {"text": completion.text})
    return completion.text
