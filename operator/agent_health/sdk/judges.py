"""``judge(result, "claim")`` — ask an LLM (or a custom evaluator) whether a claim holds.

The SDK side only shapes the request and records the verdict; the answer comes from the
:class:`~agent_health.sdk.context.JudgeBackend` the engine installed (``agent_health.judging``).
Judging never fails silently: a backend error gives an ``errored`` verdict and makes the
test ``errored`` — unless the call only observes (``judge.observe``, ``gate=False``): an
observation never changes the gate, so its errored verdict is recorded with the message and
the status stays what the gates say. Skip mode and "no judge configured" give ``skipped``
verdicts whose signals are neutral; the verdict keeps the role it was asked with.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agent_health.sdk import context as ctx_mod
from agent_health.sdk import errors, judgerequest
from agent_health.sdk.results import Role, RunResult, Signal
from agent_health.sdk.verdict import Verdict

DEFAULT_CONTEXT = ("trajectory", "output")
CONTEXT_PARTS = frozenset({"trajectory", "output", "traces", "logs"})
NO_JUDGE_HINT = ctx_mod.NO_JUDGE_HINT  # the context's: a run sets it without loading judge()


async def ask(
    ctx: ctx_mod.TestContext,
    subject: RunResult | str | None,
    criteria: str | None,
    *,
    role: Role,
    context: Sequence[str] = DEFAULT_CONTEXT,
    tools: Sequence[str] = (),
    evaluator: str | None = None,
    model: str | None = None,
    weight: float = 1.0,
    options: dict[str, Any] | None = None,
    expected: str | None = None,
) -> Verdict:
    if not isinstance(criteria, str) or not criteria.strip():
        raise errors.JudgeError("judge() needs the criteria: judge(result, 'what must be true')")
    if subject is not None and not isinstance(subject, (RunResult, str)):
        raise errors.JudgeError(
            f"judge() judges a RunResult or a string, got {type(subject).__name__}"
        )
    if expected is not None and not isinstance(expected, str):
        raise errors.JudgeError(
            f"judge(expected=...) is the expected answer, a string; got {type(expected).__name__}"
        )
    unknown = set(context) - CONTEXT_PARTS
    if unknown:
        raise errors.JudgeError(
            f"judge(context=...) got {sorted(unknown)}; choose from {sorted(CONTEXT_PARTS)}"
        )
    location = ctx_mod.caller_location()
    asked_at: float | None = None  # when the backend was asked (not for a skipped verdict)
    if ctx.skip_judge or ctx.case.skip_judge or ctx.judge_backend is None:
        reason = (
            "judge skipped"
            if ctx.judge_backend is not None or ctx.skip_judge or ctx.case.skip_judge
            else (ctx.judge_hint or NO_JUDGE_HINT)
        )
        verdict = Verdict(criteria=criteria, passed=None, role=role, skipped=True, reasoning=reason)
    else:
        request = judgerequest.JudgeRequest(
            result=subject if isinstance(subject, RunResult) else None,
            text=subject if isinstance(subject, str) else None,
            criteria=criteria,
            role=role,
            context=tuple(context),
            tools=tuple(tools),
            evaluator=evaluator,
            model=model,
            repeat=ctx.info.repeat,
            test_id=ctx.info.id,
            options=options or {},
            expected=expected,
        )
        asked_at = time.time()
        try:
            with ctx.waiting("judge"):
                verdict = await ctx.judge_backend(request)
        except errors.JudgeError:
            raise
        except Exception as err:  # the backend's failure is data, not a crash
            verdict = Verdict(
                criteria=criteria,
                passed=None,
                role=role,
                errored=True,
                error=f"{type(err).__name__}: {err}",
            )
    if verdict.role != role:
        # A skipped or errored verdict keeps the role it was asked with.
        verdict = verdict.model_copy(update={"role": role})
    if verdict.errored and role == "gate":
        # An observation never changes the gate: an errored observe verdict is recorded
        # (errored, with its message) and the test's status stays what its gates say.
        ctx.record_error(f"judge errored on {criteria!r}: {verdict.error}", cause="judge")
    signal = ctx.record(
        Signal(
            kind="judge",
            role="neutral" if verdict.skipped else verdict.role,
            name=criteria,
            passed=verdict.passed,
            score=None if verdict.skipped or verdict.errored else verdict.score,
            weight=weight,
            reasoning=verdict.reasoning or None,
            error=verdict.error,
            location=location,
            # Judge usage (tokens, cache hits) is summed from here, apart from the agent's.
            evidence={
                "cached": verdict.cached,
                "model": verdict.model,
                "skipped": verdict.skipped,
                "errored": verdict.errored,
                "input_tokens": verdict.input_tokens,
                "output_tokens": verdict.output_tokens,
                # A skipped signal is neutral: what it would have gated decides whether the
                # test checked anything (engine.outcome.grading.unchecked).
                **({"asked_role": role} if verdict.skipped else {}),
                # A verdict on result.turn(n) names its turn: reports show it beside turn n.
                **({"turn": turn} if (turn := _turn_of(subject)) is not None else {}),
            },
        )
    )
    ctx.judged.append((verdict, signal))
    if asked_at is not None:
        ctx.judge_windows.append((signal, asked_at, time.time()))
    return verdict


def _turn_of(subject: Any) -> int | None:
    return subject.turn_number if isinstance(subject, RunResult) else None


class BoundJudge:
    """The ``judge`` fixture: bound to one test's context."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ctx_mod.TestContext) -> None:
        self._ctx = ctx

    async def __call__(
        self,
        result: RunResult | str | None,
        criteria: str | None = None,
        *,
        context: Sequence[str] = DEFAULT_CONTEXT,
        tools: Sequence[str] = (),
        evaluator: str | None = None,
        model: str | None = None,
        gate: bool = True,
        weight: float = 1.0,
        expected: str | None = None,
        **options: Any,
    ) -> Verdict:
        """Judge ``result`` against ``criteria``; a gate unless ``gate=False``.

        ``expected`` is the expected answer (a reference the judge compares the work with).
        """
        return await ask(
            self._ctx,
            result,
            criteria,
            role="gate" if gate else "observe",
            context=context,
            tools=tools,
            evaluator=evaluator,
            model=model,
            weight=weight,
            options=options,
            expected=expected,
        )

    async def observe(
        self,
        result: RunResult | str | None,
        criteria: str | None = None,
        *,
        context: Sequence[str] = DEFAULT_CONTEXT,
        tools: Sequence[str] = (),
        evaluator: str | None = None,
        model: str | None = None,
        weight: float = 1.0,
        expected: str | None = None,
        **options: Any,
    ) -> Verdict:
        """Judge for the record only: the verdict is scored but never gates."""
        return await ask(
            self._ctx,
            result,
            criteria,
            role="observe",
            context=context,
            tools=tools,
            evaluator=evaluator,
            model=model,
            weight=weight,
            options=options,
            expected=expected,
        )


class Judge:
    """The module-level ``judge``: finds the running test's context on each call."""

    __slots__ = ()

    async def __call__(
        self, result: RunResult | str | None, criteria: str | None = None, **kwargs: Any
    ) -> Verdict:
        return await BoundJudge(ctx_mod.current("judge()"))(result, criteria, **kwargs)

    async def observe(
        self, result: RunResult | str | None, criteria: str | None = None, **kwargs: Any
    ) -> Verdict:
        return await BoundJudge(ctx_mod.current("judge.observe()")).observe(
            result, criteria, **kwargs
        )


judge = Judge()
