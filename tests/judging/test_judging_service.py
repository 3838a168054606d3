"""The judge service and a cell's remote judge, over real loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_health import judging
from agent_health.judging import errors, remote, service
from agent_health.sdk.config import define_config
from aiohttp import web
from support.judge_servers import Answer, ScriptedModel, judge_config, judge_request

TOKEN = "controller-token-of-cell-7"


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    server = await ScriptedModel.start("openai", default=Answer(True, 0.8, "service says yes"))
    yield server
    await server.close()


@pytest.fixture
async def judge_service(model: ScriptedModel, tmp_path: Path) -> AsyncIterator[str]:
    config = judge_config(model, cache_dir=tmp_path)
    async with judging.backend(config, define_config()) as backend:
        assert backend is not None
        runner = web.AppRunner(service.app(backend, lambda token: token == TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        await runner.cleanup()


async def test_verdicts_come_from_the_service_and_its_shared_cache(
    judge_service: str, model: ScriptedModel
) -> None:
    async with remote.remote_backend(judge_service, TOKEN) as cell_one:
        first = await cell_one(judge_request())
    async with remote.remote_backend(judge_service, TOKEN) as cell_two:
        second = await cell_two(judge_request())
    assert (first.passed, first.score, first.reasoning, first.cached) == (
        True,
        0.8,
        "service says yes",
        False,
    )
    assert second.cached is True  # another cell, same call: the operator's cache answered
    assert len(model.requests) == 1
    assert "authorization" not in {k.lower() for k in model.requests[0].headers} or (
        TOKEN not in str(model.requests[0].headers)
    )


async def test_a_wrong_token_is_refused(judge_service: str, model: ScriptedModel) -> None:
    for token in (None, "target-guess"):
        async with remote.remote_backend(judge_service, token) as cell:
            with pytest.raises(errors.ProviderError, match="401: the judge service accepts only"):
                await cell(judge_request())
    assert model.requests == []


async def test_usage_errors_reach_the_test(judge_service: str) -> None:
    async with remote.remote_backend(judge_service, TOKEN) as cell:
        with pytest.raises(errors.UsageError, match="tool pack"):
            await cell(judge_request(tools=("shell",)))


async def test_custom_evaluators_run_in_the_cell_with_the_service_model(
    judge_service: str, model: ScriptedModel
) -> None:
    seen: list[str] = []

    async def asks(result: Any, criteria: str, llm: Any) -> Any:
        seen.append(criteria)
        return await llm.judge(criteria, {"output": result.output})

    async with remote.remote_backend(
        judge_service, TOKEN, model="judge-model", evaluators={"asks": asks}
    ) as cell:
        verdict = await cell(judge_request(evaluator="asks"))
    assert seen == ["identifies the database outage"]
    assert verdict.passed is True
    assert len(model.requests) == 1  # the evaluator's llm call went through the service


async def test_service_down_is_a_provider_error() -> None:
    async with remote.remote_backend("http://127.0.0.1:9", TOKEN, patience=0.5) as cell:
        with pytest.raises(errors.ProviderError, match=r"unreachable.*gave up after 0.5 s"):
            await cell(judge_request())


async def test_a_call_waits_out_a_judge_service_that_is_restarting(
    judge_service: str, model: ScriptedModel
) -> None:
    """The cell's gateway answers 502 while the operator (and its judge service) is down;
    the call goes on once it is back, instead of erroring the cell."""
    answers = [502, 503]

    async def front(request: web.Request) -> web.StreamResponse:
        if answers:
            return web.Response(status=answers.pop(0), text="bad gateway")
        async with httpx.AsyncClient() as client:
            upstream = await client.post(
                judge_service + request.path, content=await request.read(),
                headers={"Authorization": request.headers["Authorization"]},
            )  # fmt: skip
        return web.Response(status=upstream.status_code, body=upstream.content,
                            content_type="application/json")  # fmt: skip

    app = web.Application()
    app.router.add_post("/{path:.*}", front)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with remote.remote_backend(url, TOKEN, patience=60) as cell:
            verdict = await cell(judge_request())
    finally:
        await runner.cleanup()
    assert answers == []
    assert verdict.passed is True
    assert len(model.requests) == 1


async def test_other_failures_are_not_waited_for(judge_service: str) -> None:
    async with remote.remote_backend(judge_service, "not-a-live-cell", patience=60) as cell:
        with pytest.raises(errors.ProviderError, match="HTTP 40") as refused:
            await cell(judge_request())
    assert "gave up" not in str(refused.value)
