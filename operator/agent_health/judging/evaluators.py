"""Custom evaluators: ``define_config(evaluators={"name": fn})``, ``judge(..., evaluator="name")``.

An evaluator is called with the parameters it names, from: ``result`` (the RunResult, or
the string being judged), ``criteria``, ``tools`` (this run's read-only
:class:`~agent_health.judging.tools.TracePack`, ``None`` without a run), ``llm`` (an
:class:`LLM` helper), ``context`` and ``options`` (what ``judge()`` was given) and
``expected`` (the expected answer, ``judge(expected=...)``; ``None`` without). It returns a
``Verdict``, a mapping with ``passed`` (and optionally ``score``, ``reasoning``), or a bool::

    async def cites_ticket(result, criteria, llm):
        if "INC-" not in result.output:
            return {"passed": False, "score": 0.0, "reasoning": "no ticket id"}
        return await llm.judge(criteria, {"output": result.output})

Evaluators work with no judge model configured; then ``llm`` raises a clear error if used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_health.judging import contextual, errors, prompt
from agent_health.judging.chat import ChatRequest, Message, Tally
from agent_health.sdk.verdict import Verdict

if TYPE_CHECKING:
    from agent_health.judging.providers import Provider

PARAMETERS = ("result", "criteria", "tools", "llm", "context", "options", "expected")


class LLM:
    """The judge model, for a custom evaluator: ``await llm("prompt")`` or ``llm.judge(...)``."""

    def __init__(
        self,
        provider: Provider | None,
        *,
        evaluator: str,
        model: str | None,
        max_tokens: int,
        tally: Tally,
    ) -> None:
        self._provider = provider
        self._evaluator = evaluator
        self.model = model
        self._max_tokens = max_tokens
        self._tally = tally

    async def __call__(self, text: str, *, system: str = "", model: str | None = None) -> str:
        """One free-form completion; returns the text."""
        provider, chosen = self._ready(model)
        completion = await provider(
            ChatRequest(
                model=chosen,
                system=system,
                messages=(Message("user", text),),
                max_tokens=self._max_tokens,
            )
        )
        self._tally.add(completion)
        return completion.text

    async def judge(
        self, criteria: str, evidence: Mapping[str, Any] | str, *, model: str | None = None
    ) -> prompt.JudgeAnswer:
        """A structured verdict (passed, score, reasoning) on ``criteria`` given ``evidence``."""
        provider, chosen = self._ready(model)
        parts = {"output": evidence} if isinstance(evidence, str) else dict(evidence)
        return await contextual.judge(
            provider,
            model=chosen,
            criteria=criteria,
            parts=parts,
            max_tokens=self._max_tokens,
            tally=self._tally,
        )

    def _ready(self, model: str | None) -> tuple[Provider, str]:
        if self._provider is None or not (model or self.model):
            raise errors.NoJudgeModel(
                f"evaluator {self._evaluator!r} used llm, but no judge model is configured; "
                "set judge={...} in agent-health.config.py or AGENT_HEALTH_JUDGE_MODEL"
            )
        return self._provider, model or self.model or ""


async def evaluate(
    name: str, fn: Callable[..., Any], available: Mapping[str, Any], criteria: str
) -> prompt.JudgeAnswer:
    """Call evaluator ``fn`` with the parameters it names; its answer as a JudgeAnswer."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if signature is None or any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        kwargs = dict(available)
    else:
        unknown = [p for p in signature.parameters if p not in available]
        if unknown:
            raise errors.EvaluatorFailed(
                f"evaluator {name!r} asks for {unknown}; it may take {list(PARAMETERS)}"
            )
        kwargs = {p: available[p] for p in signature.parameters}
    try:
        value = fn(**kwargs)
        if inspect.isawaitable(value):
            value = await value
    except errors.JudgingError:
        raise
    except Exception as err:
        raise errors.EvaluatorFailed(
            f"evaluator {name!r} raised {type(err).__name__}: {err}"
        ) from err
    return answer(name, value, criteria)


def answer(name: str, value: Any, criteria: str) -> prompt.JudgeAnswer:
    """Normalise what an evaluator returned."""
    if isinstance(value, prompt.JudgeAnswer):
        return value
    if isinstance(value, Verdict):
        if value.errored or value.passed is None:
            raise errors.EvaluatorFailed(
                f"evaluator {name!r} returned an undecided verdict: {value.error or 'no result'}"
            )
        value = {"passed": value.passed, "score": value.score, "reasoning": value.reasoning}
    if isinstance(value, bool):
        value = {"passed": value}
    if isinstance(value, Mapping) and isinstance(value.get("passed"), bool):
        data = dict(value)
        if data.get("score") is None:
            data["score"] = 1.0 if data["passed"] else 0.0
        try:
            return prompt.JudgeAnswer.model_validate(data)
        except ValueError as err:
            raise errors.EvaluatorFailed(f"evaluator {name!r} returned {value!r}: {err}") from err
    raise errors.EvaluatorFailed(
        f"evaluator {name!r} returned {type(value).__name__}; return a Verdict, a dict with "
        f"'passed' (bool) and optionally 'score' (0-1) and 'reasoning', or a bool "
        f"(criteria: {criteria!r})"
    )
