"""Failures of the judge model: retries with backoff, Retry-After, timeouts, bad answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_health import judging
from agent_health.sdk.config import Config
from support.judge_servers import (
    Answer,
    Raw,
    ScriptedModel,
    Slow,
    Status,
    Text,
    judge_config,
    judge_request,
)


async def _judge(server: ScriptedModel, **fields: Any) -> Any:
    try:
        async with judging.backend(judge_config(server, **fields), Config()) as backend:
            assert backend is not None
            return await backend(judge_request())
    finally:
        await server.close()


async def test_429_retry_after_is_honoured() -> None:
    server = await ScriptedModel.start(
        "openai", script=[Status(429, "slow down", retry_after="0.3"), Answer(True, 0.9)]
    )
    verdict = await _judge(server)
    assert verdict.passed is True
    assert verdict.score == 0.9
    first, second = server.requests
    # max_wait is 10 ms, so only Retry-After can explain the gap.
    assert second.at - first.at >= 0.3


async def test_retry_after_beyond_the_time_budget_gives_up_at_once() -> None:
    server = await ScriptedModel.start(
        "openai", script=[Status(429, "come back tomorrow", retry_after="86400")]
    )
    verdict = await _judge(server)
    assert verdict.errored
    assert "HTTP 429: come back tomorrow" in (verdict.error or "")
    assert "gave up after 1 attempt" in (verdict.error or "")
    assert len(server.requests) == 1


@pytest.mark.parametrize("shape", ["openai", "anthropic", "bedrock"])
async def test_5xx_then_success(shape: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    server = await ScriptedModel.start(
        shape, script=[Status(500), Status(503, "overloaded"), Answer(True, 0.8, "fine")]
    )
    verdict = await _judge(server, region="us-east-1")
    assert (verdict.passed, verdict.score, verdict.reasoning) == (True, 0.8, "fine")
    assert len(server.requests) == 3


async def test_5xx_forever_is_errored_after_max_attempts() -> None:
    server = await ScriptedModel.start("openai", default=Status(500, "upstream exploded"))
    verdict = await _judge(server)
    assert verdict.errored
    assert verdict.passed is None
    assert "HTTP 500: upstream exploded" in (verdict.error or "")
    assert "gave up after 3 attempts" in (verdict.error or "")
    assert len(server.requests) == 3


async def test_slow_answer_times_out_and_is_retried() -> None:
    server = await ScriptedModel.start(
        "openai", script=[Slow(5.0, Answer(False))], default=Answer(True, 1.0, "quick")
    )
    verdict = await _judge(server, timeout=0.2)
    assert verdict.passed is True
    assert len(server.requests) == 2


async def test_unreachable_endpoint_is_errored() -> None:
    server = await ScriptedModel.start("openai")
    url = server.url
    await server.close()
    config = judge_config(server, base_url=url)
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        verdict = await backend(judge_request())
    assert verdict.errored
    assert "unreachable" in (verdict.error or "")


async def test_malformed_http_body_is_errored_with_the_body() -> None:
    server = await ScriptedModel.start("openai", script=[Raw('{"choices": [')])
    verdict = await _judge(server)
    assert verdict.errored
    assert "not JSON" in (verdict.error or "")
    assert '{"choices": [' in (verdict.error or "")


async def test_unparseable_answer_is_asked_again_once() -> None:
    server = await ScriptedModel.start(
        "openai", script=[Text("I think it passes."), Answer(True, 0.7, "second try")]
    )
    verdict = await _judge(server)
    assert (verdict.passed, verdict.reasoning) == (True, "second try")
    assert len(server.requests) == 2
    retry = server.requests[1].body["messages"]
    assert retry[-2] == {"role": "assistant", "content": "I think it passes."}
    assert "not a valid verdict" in retry[-1]["content"]
    assert verdict.input_tokens == 200  # both calls are accounted


async def test_twice_unparseable_is_errored_with_the_raw_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    server = await ScriptedModel.start("anthropic", default=Text("looks good to me!"))
    verdict = await _judge(server)
    assert verdict.errored
    assert "looks good to me!" in (verdict.error or "")
    assert len(server.requests) == 2


async def test_out_of_range_score_is_unparseable() -> None:
    server = await ScriptedModel.start(
        "openai", default=Text('{"passed": true, "score": 7, "reasoning": "x"}')
    )
    verdict = await _judge(server)
    assert verdict.errored
    assert "score" in (verdict.error or "")


async def test_in_flight_calls_are_limited_per_provider() -> None:
    async with ScriptedModel.serving("openai", default=Slow(0.05, Answer(True))) as server:
        config = judge_config(server, max_concurrency=2)
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            verdicts = await asyncio.gather(
                *(backend(judge_request(criteria=f"claim {i}")) for i in range(8))
            )
    assert all(v.passed for v in verdicts)
    assert len(server.requests) == 8
    assert server.max_in_flight == 2
