"""Free-form questions to the judge model (``Judging.ask``), answered through the judge cache.

Insights functions (``llm``) and the run-level rollup ask in words rather than for a
verdict. Their answers are cached like verdicts, keyed by who answers (the judge's
endpoint, model and partition) and the exact question, so the same question in another run
(the same insights prompt of an unchanged test) is answered with no model call. A
question that holds run ids or timings is a new question every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.judging import cache as cache_mod
from agent_health.judging import chat
from agent_health.judging.providers import Provider
from agent_health.sdk.config import JudgeConfig

EVALUATOR = "ask"
"""The cache's evaluator name for free-form questions."""


async def ask(
    provider: Provider,
    judge: JudgeConfig,
    cache: cache_mod.Cache | None,
    who: Mapping[str, Any],
    text: str,
    system: str = "",
) -> str:
    """The model's answer to ``text`` (``system`` as its system prompt), cached."""
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
            return str(stored["text"])
    completion = await provider(
        chat.ChatRequest(
            model=judge.model,
            system=system,
            messages=(chat.Message("user", text),),
            max_tokens=judge.max_output_tokens,
        )
    )
    if cache is not None:
        await cache.put(address, {"text": completion.text})
    return completion.text
