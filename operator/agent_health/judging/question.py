"""What a ``judge()`` call asks, as the judge cache keys it (:func:`address`).

The key names who would answer — provider, base URL, region, model and the judge's
options, not the model name alone, so an endpoint that answers "pass" to everything under a
real model's name fills only its own entries — and, in the operator, the tenant
(``partition``: the RunSpec's namespace), so one namespace's verdicts are never served to
another. The evidence is keyed without this run's identifiers (run id, trace and span ids):
the same work by another run is the same question.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from agent_health.judging import cache, prompt
from agent_health.sdk.config import JudgeConfig
from agent_health.sdk.context import JudgeRequest

LLM_EVALUATOR = "llm"


def address(
    request: JudgeRequest,
    *,
    custom: Callable[..., Any] | None,
    judge: JudgeConfig | None,
    model: str | None,
    partition: str | None,
    parts: Mapping[str, Any],
) -> str:
    """The cache key of ``request``, asked of ``judge`` (or the custom evaluator) with the
    evidence ``parts``, for ``partition``."""
    result = request.result
    asked = {"expected": request.expected} if request.expected is not None else {}
    return cache.key(
        {
            **asked,  # only when given: the keys of calls without one stay as they were
            "evaluator": identity(request.evaluator, custom),
            "judge": endpoint(judge),
            "model": model,
            "partition": partition,
            "criteria": request.criteria,
            "context": sorted(set(request.context)),
            "tools": sorted(set(request.tools)),
            "evidence": prompt.without_run_ids(parts, result.run_id if result else None),
            "options": dict(request.options),
            "repeat": request.repeat,
            "prompt": prompt.PROMPT_VERSION,
        }
    )


def endpoint(judge: JudgeConfig | None) -> dict[str, Any] | None:
    """Who answers: the same model name behind another endpoint is another judge."""
    if judge is None:
        return None
    return {
        "provider": judge.provider,
        "base_url": judge.base_url,
        "region": judge.region,
        "options": judge.options,
    }


def identity(name: str | None, fn: Callable[..., Any] | None) -> str:
    """Which evaluator answered: the built-in LLM judge, or a custom one and its code."""
    if fn is None:
        return LLM_EVALUATOR
    try:
        code = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__qualname__", repr(type(fn)))
    return f"custom:{name}:{hashlib.sha256(code.encode()).hexdigest()[:16]}"
