"""The judge backend the engine installs: every ``judge()`` call goes through here.

It picks the mode (a custom evaluator, agentic with ``tools=["trace_query"]``, else
contextual), looks the call up in the cache, asks the provider, and turns any failure into
an ``errored`` verdict carrying the provider's message (usage errors, such as an unknown
evaluator, are raised into the test instead). Errored verdicts are never cached; what the
cache keys a call by is :mod:`.question`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from agent_health.judging import (
    agentic,
    asking,
    contextual,
    errors,
    evaluators,
    prompt,
    question,
    simulating,
    tools,
)
from agent_health.judging import cache as cache_mod
from agent_health.judging import providers as providers_mod
from agent_health.judging.chat import Tally
from agent_health.judging.providers import http
from agent_health.sdk import judges
from agent_health.sdk.config import Config, JudgeConfig
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import RunResult
from agent_health.sdk.simulated import UserAsk, UserLine
from agent_health.sdk.verdict import Verdict

NO_JUDGE_HINT = judges.NO_JUDGE_HINT


class Judging:
    """Answers ``judge()`` calls (the :class:`~agent_health.sdk.context.JudgeBackend`)."""

    def __init__(
        self,
        *,
        judge: JudgeConfig | None,
        provider: providers_mod.Provider | None,
        custom: Mapping[str, Callable[..., Any]] | None = None,
        cache: cache_mod.Cache | None = None,
        sources: tools.SourceFactory = tools.source_for,
        partition: str | None = None,
    ) -> None:
        self.judge = judge
        self.provider = provider
        self.custom = dict(custom or {})
        self.cache = cache
        self.sources = sources
        self.partition = partition
        """Whose verdicts these are (the operator: the RunSpec's namespace); part of the key."""
        self.asked = asking.Asked()
        """What :meth:`ask` cost (shared by :meth:`partitioned` copies)."""

    def partitioned(self, partition: str) -> Judging:
        """This backend answering for ``partition`` (same provider and cache, its own keys)."""
        if partition == self.partition:
            return self
        other = copy.copy(self)
        other.partition = partition
        return other

    async def __call__(self, request: JudgeRequest) -> Verdict:
        custom = self._evaluator(request.evaluator)
        use_tools = _tool_packs(request.tools)
        if custom is None and self.provider is None:
            return Verdict(
                criteria=request.criteria,
                passed=None,
                role="neutral",
                skipped=True,
                reasoning=NO_JUDGE_HINT,
            )
        result = request.result
        pack = tools.TracePack(self._source(request, result), result.run_id) if result else None
        if use_tools and pack is None and custom is None:
            raise errors.UsageError(
                f"judge(tools={list(request.tools)}) queries a run's traces: pass the "
                "RunResult of agent.run(), not a string"
            )
        model = request.model or (self.judge.model if self.judge else None)
        parts = await _parts(request, pack, everything=custom is not None)
        address = question.address(
            request,
            custom=custom,
            judge=self.judge,
            model=model,
            partition=self.partition,
            parts=parts,
        )
        if self.cache is not None:
            stored = await self.cache.get(address)
            if stored is not None:
                return _verdict(request, stored, cached=True)
        tally = Tally()
        try:
            if custom is not None:
                answer = await self._custom(request, custom, pack, parts, model, tally)
            elif use_tools and pack is not None:
                answer = await self._agentic(request, pack, parts, model or "", tally)
            else:
                answer = await self._contextual(request, parts, model or "", tally)
        except errors.UsageError:
            raise
        except errors.JudgingError as err:
            return Verdict(
                criteria=request.criteria,
                passed=None,
                role=request.role,
                errored=True,
                error=str(err),
                model=model if tally.calls else None,
                input_tokens=tally.input_tokens,
                output_tokens=tally.output_tokens,
            )
        fields = {
            "passed": answer.passed,
            "score": answer.score,
            "reasoning": answer.reasoning,
            "model": model if (custom is None or tally.calls) else None,
            "input_tokens": tally.input_tokens,
            "output_tokens": tally.output_tokens,
        }
        if self.cache is not None:
            await self.cache.put(address, fields)
        return _verdict(request, fields, cached=False)

    async def ask(self, text: str, *, system: str = "") -> str:
        """One free-form completion from the judge model (the ``llm`` helper of insights,
        and the run-level rollup), through the judge cache (:mod:`.asking`)."""
        if self.provider is None or self.judge is None:
            raise errors.NoJudgeModel("asked the judge model, but no judge model is configured")
        who = {"judge": question.endpoint(self.judge), "partition": self.partition}
        return await asking.ask(
            self.provider, self.judge, self.cache, who, text, system, asked=self.asked
        )

    @property
    def simulates(self) -> bool:
        """Whether a model is there to play a simulated user."""
        return self.provider is not None and self.judge is not None

    async def simulate(self, ask: UserAsk) -> UserLine:
        """What a simulated user says next, asked of the judge's provider (``ask.model``
        or the judge's model) through the judge cache (:mod:`.simulating`)."""
        if self.provider is None or self.judge is None:
            return UserLine(errored=True, error=NO_JUDGE_HINT)
        who = {"judge": question.endpoint(self.judge), "partition": self.partition}
        return await simulating.simulate(self.provider, self.judge, self.cache, who, ask)

    def _source(self, request: JudgeRequest, result: RunResult) -> tools.TraceSource:
        """The trace tools' source: the telemetry a cell shipped with the call, else ours."""
        if request.trace is not None:
            return tools.ShippedSource(request.trace)
        return self.sources(result)

    def _evaluator(self, name: str | None) -> Callable[..., Any] | None:
        if name is None:
            return None
        fn = self.custom.get(name)
        if fn is None:
            known = ", ".join(sorted(self.custom)) or "none are defined"
            raise errors.UnknownEvaluator(
                f"unknown evaluator {name!r} in judge(evaluator=...); known: {known}; define "
                "it in agent-health.config.py as define_config(evaluators={...})"
            )
        return fn

    def _max(self, request: JudgeRequest, option: str) -> int:
        value = request.options.get(option)
        if value is None:
            value = getattr(self.judge, option) if self.judge else 1024
        if not isinstance(value, int) or value < 1:
            raise errors.UsageError(f"judge({option}=...) must be a positive int, got {value!r}")
        return value

    async def _contextual(
        self, request: JudgeRequest, parts: Mapping[str, Any], model: str, tally: Tally
    ) -> prompt.JudgeAnswer:
        assert self.provider is not None
        return await contextual.judge(
            self.provider,
            model=model,
            criteria=request.criteria,
            parts=parts,
            max_tokens=self._max(request, "max_output_tokens"),
            tally=tally,
            expected=request.expected,
        )

    async def _agentic(
        self,
        request: JudgeRequest,
        pack: tools.TracePack,
        parts: Mapping[str, Any],
        model: str,
        tally: Tally,
    ) -> prompt.JudgeAnswer:
        assert self.provider is not None
        return await agentic.judge(
            self.provider,
            model=model,
            criteria=request.criteria,
            parts=parts,
            pack=pack,
            max_steps=self._max(request, "max_steps"),
            max_tokens=self._max(request, "max_tokens"),
            max_output_tokens=self._max(request, "max_output_tokens"),
            tally=tally,
            expected=request.expected,
        )

    async def _custom(
        self,
        request: JudgeRequest,
        fn: Callable[..., Any],
        pack: tools.TracePack | None,
        parts: Mapping[str, Any],
        model: str | None,
        tally: Tally,
    ) -> prompt.JudgeAnswer:
        name = request.evaluator or ""
        llm = evaluators.LLM(
            self.provider,
            evaluator=name,
            model=model,
            max_tokens=self._max(request, "max_output_tokens"),
            tally=tally,
        )
        available = {
            "result": request.result if request.result is not None else request.text,
            "criteria": request.criteria,
            "tools": pack,
            "llm": llm,
            "context": request.context,
            "options": dict(request.options),
            "expected": request.expected,
        }
        return await evaluators.evaluate(name, fn, available, request.criteria)


async def _parts(
    request: JudgeRequest, pack: tools.TracePack | None, *, everything: bool
) -> dict[str, Any]:
    spans = logs = None
    if pack is not None and "traces" in request.context:
        spans = await pack.get_spans(limit=tools.MAX_LIMIT)
    if pack is not None and "logs" in request.context:
        logs = await pack.get_logs(limit=tools.MAX_LIMIT)
    return prompt.evidence(request, everything=everything, spans=spans, logs=logs)


def _tool_packs(names: tuple[str, ...]) -> bool:
    unknown = sorted(set(names) - {tools.PACK_NAME})
    if unknown:
        raise errors.UnknownTools(
            f"judge(tools=...) got {unknown}; the only tool pack is {tools.PACK_NAME!r}"
        )
    return bool(names)


def _verdict(request: JudgeRequest, fields: Mapping[str, Any], *, cached: bool) -> Verdict:
    return Verdict(
        criteria=request.criteria,
        passed=bool(fields["passed"]),
        score=fields.get("score"),
        reasoning=str(fields.get("reasoning") or ""),
        role=request.role,
        cached=cached,
        model=fields.get("model"),
        input_tokens=int(fields.get("input_tokens") or 0),
        output_tokens=int(fields.get("output_tokens") or 0),
    )


@contextlib.asynccontextmanager
async def backend(
    judge: JudgeConfig | None,
    config: Config,
    *,
    use_cache: bool = True,
    providers: Mapping[str, providers_mod.ProviderFactory] = providers_mod.PROVIDERS,
    sources: tools.SourceFactory = tools.source_for,
    api_key: str | None = None,
    key_source: str | None = None,
    cache: cache_mod.Cache | None = None,
) -> AsyncIterator[Judging | None]:
    """The backend for one run: ``None`` when there is neither a judge nor an evaluator.

    ``use_cache=False`` (``--no-cache``) neither reads nor writes the cache. ``api_key``
    is the provider's key given directly (no environment variable is read), and
    ``key_source`` says where it came from for a refused-credentials message (e.g. "the
    Secret ns/name key api-key"). ``cache`` shares an open cache (the caller closes it)
    instead of opening ``judge.cache_path``.
    """
    if judge is None and not config.evaluators:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        provider = None
        if judge is not None:
            client = await stack.enter_async_context(httpx.AsyncClient(timeout=judge.timeout))
            endpoint = http.Endpoint(
                client,
                retry=judge.retry,
                max_concurrency=judge.max_concurrency,
                auth_hint=key_source if api_key else http.auth_hint(judge),
                api_key=api_key,
            )
            provider = providers_mod.create_or_unusable(judge, endpoint, providers)
        store = cache
        if store is None and use_cache and (judge is None or judge.cache):
            store = await cache_mod.Cache.open(
                cache_mod.default_path(judge.cache_path if judge else None)
            )
            stack.push_async_callback(store.close)
        yield Judging(
            judge=judge,
            provider=provider,
            custom=config.evaluators,
            cache=store if store is not None and store.usable and use_cache else None,
            sources=sources,
        )
