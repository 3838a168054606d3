"""The judge backend the engine installs: provider + prompt + parsing + a concurrency limit."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import httpx

from agent_health.judging import prompt
from agent_health.judging.providers import Completion, Provider, create_provider
from agent_health.sdk import errors
from agent_health.sdk.config import Config, JudgeConfig
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import Verdict

NO_JUDGE_HINT = (
    "no judge configured, so judge() calls were skipped; set judge={...} in "
    "agent-health.config.py or AGENT_HEALTH_JUDGE_PROVIDER/MODEL/BASE_URL"
)


class LLMJudge:
    """Answers ``judge()`` calls with one model call each (contextual mode)."""

    def __init__(self, provider: Provider, config: JudgeConfig) -> None:
        self.provider = provider
        self.config = config
        self._limit = asyncio.Semaphore(config.max_concurrency)

    async def __call__(self, request: JudgeRequest) -> Verdict:
        if request.evaluator is not None:
            raise errors.JudgeError(
                f"unknown evaluator {request.evaluator!r}: define it in "
                "define_config(evaluators={...})"
            )
        model = request.model or self.config.model
        messages = [{"role": "user", "content": prompt.user_message(request)}]
        raw = ""
        used_in = used_out = 0
        for attempt in range(2):  # an unparseable answer is asked once more
            async with self._limit:
                completion: Completion = await self.provider.complete(
                    system=prompt.SYSTEM,
                    messages=messages,
                    model=model,
                    schema=prompt.RESPONSE_SCHEMA,
                )
            used_in += completion.input_tokens
            used_out += completion.output_tokens
            raw = completion.text
            try:
                answer = prompt.parse(raw)
            except prompt.UnparseableAnswer as err:
                if attempt == 0:
                    continue
                return Verdict(
                    criteria=request.criteria,
                    passed=None,
                    role=request.role,
                    errored=True,
                    error=str(err),
                    model=model,
                    input_tokens=used_in,
                    output_tokens=used_out,
                )
            return Verdict(
                criteria=request.criteria,
                passed=answer.passed,
                score=answer.score,
                reasoning=answer.reasoning,
                role=request.role,
                model=model,
                input_tokens=used_in,
                output_tokens=used_out,
            )
        raise AssertionError("unreachable")  # pragma: no cover


@contextlib.asynccontextmanager
async def backend(judge: JudgeConfig | None, config: Config) -> AsyncIterator[LLMJudge | None]:
    """The backend for a run (``None`` when no judge is configured)."""
    if judge is None:
        yield None
        return
    key = None
    if judge.api_key_env:
        key = os.environ.get(judge.api_key_env)
        if not key:
            raise errors.ConfigError(
                f"judge: environment variable {judge.api_key_env} (judge.api_key_env) is not set"
            )
    async with httpx.AsyncClient(timeout=judge.timeout) as client:
        yield LLMJudge(create_provider(judge, key, client), judge)
