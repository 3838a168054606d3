"""Each provider against its scripted server on loopback: wire shape, parsing, auth."""

from __future__ import annotations

from typing import Any

import pytest
from agent_health import judging
from agent_health.sdk.config import Config
from support.judge_servers import (
    USAGE_IN,
    USAGE_OUT,
    Answer,
    ScriptedModel,
    Status,
    judge_config,
    judge_request,
)


@pytest.mark.parametrize("shape", ["openai", "anthropic", "bedrock"])
async def test_contextual_verdict_round_trip(shape: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_KEY", "k-123")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    async with ScriptedModel.serving(
        shape,
        script=[Answer(False, 0.25, "never names the database")],
        api_key="k-123" if shape != "bedrock" else None,
        sigv4=("AKIDEXAMPLE", "secret", "us-east-1") if shape == "bedrock" else None,
    ) as server:
        config = judge_config(
            server,
            api_key_env="JUDGE_KEY" if shape != "bedrock" else None,
            region="us-east-1",
            model="anthropic.claude-3-haiku-20240307-v1:0" if shape == "bedrock" else "m",
        )
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            verdict = await backend(judge_request(criteria="names the database"))
    assert (verdict.passed, verdict.score, verdict.reasoning) == (
        False,
        0.25,
        "never names the database",
    )
    assert not verdict.errored
    assert not verdict.cached
    assert (verdict.input_tokens, verdict.output_tokens) == (USAGE_IN, USAGE_OUT)
    [seen] = server.requests
    body = seen.body
    text = str(body)
    assert "names the database" in text
    assert "db-primary" in text
    if shape == "openai":
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["Authorization"] == "Bearer k-123"
        schema = body["response_format"]["json_schema"]
        assert schema["strict"] is True
        assert schema["schema"]["required"] == [
            "passed",
            "score",
            "reasoning",
        ]
    elif shape == "anthropic":
        assert seen.path == "/v1/messages"
        assert seen.headers["x-api-key"] == "k-123"
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert body["tool_choice"] == {"type": "tool", "name": "submit_verdict"}
        assert body["max_tokens"] == 1024
    else:
        assert seen.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
        assert seen.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "submit_verdict"}}
        assert body["system"][0]["text"].startswith("You are an impartial evaluator")


async def test_bedrock_bad_signature_is_an_auth_error_naming_aws_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    async with ScriptedModel.serving(
        "bedrock", sigv4=("AKIDEXAMPLE", "secret", "eu-west-1")
    ) as server:
        config = judge_config(server, region="eu-west-1")
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            verdict = await backend(judge_request())
    assert verdict.errored
    assert verdict.passed is None
    assert "HTTP 403" in (verdict.error or "")
    assert "signature" in (verdict.error or "")
    assert "AWS_SECRET_ACCESS_KEY" in (verdict.error or "")
    assert len(server.requests) == 1  # auth errors are not retried


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
async def test_401_is_not_retried_and_names_the_env_var(
    shape: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", "wrong")
    async with ScriptedModel.serving(shape, api_key="right") as server:
        config = judge_config(server, api_key_env="MY_JUDGE_KEY")
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            verdict = await backend(judge_request())
    assert verdict.errored
    assert "HTTP 401" in (verdict.error or "")
    assert "MY_JUDGE_KEY" in (verdict.error or "")
    assert "invalid api key" in (verdict.error or "")
    assert len(server.requests) == 1


async def test_unset_key_variable_errors_each_judge_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing key does not stop the run: every judge call is an errored verdict naming
    the variable and --no-judge, and no request is sent without credentials."""
    monkeypatch.delenv("NOPE_KEY", raising=False)
    async with ScriptedModel.serving("anthropic") as server:
        config = judge_config(server, api_key_env="NOPE_KEY")
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            verdict = await backend(judge_request())
    assert verdict.errored
    assert "NOPE_KEY is not set" in (verdict.error or "")
    assert "--no-judge" in (verdict.error or "")
    assert server.requests == []


async def test_other_4xx_is_errored_with_the_providers_message() -> None:
    async with (
        ScriptedModel.serving("openai", script=[Status(400, "model 'x' not found")]) as server,
        judging.backend(judge_config(server), Config()) as backend,
    ):
        assert backend is not None
        verdict = await backend(judge_request())
    assert verdict.errored
    assert "HTTP 400: model 'x' not found" in (verdict.error or "")
    assert len(server.requests) == 1


async def test_no_judge_and_no_evaluators_gives_no_backend() -> None:
    async with judging.backend(None, Config()) as backend:
        assert backend is None


async def test_per_call_model_override_reaches_the_provider() -> None:
    async with (
        ScriptedModel.serving("openai") as server,
        judging.backend(judge_config(server), Config()) as backend,
    ):
        assert backend is not None
        verdict = await backend(judge_request(model="bigger-model"))
    assert server.requests[0].body["model"] == "bigger-model"
    assert verdict.model == "bigger-model"


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
async def test_a_key_given_directly_is_sent_and_no_variable_is_read(
    shape: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    server = await ScriptedModel.start(shape, api_key="from-secret")
    source = "the key 'api-key' of Secret ns/judge"
    try:
        config = judge_config(server)  # no api_key_env: only the given key can be sent
        async with judging.backend(
            config, Config(), api_key="from-secret", key_source=source
        ) as right:
            assert right is not None
            good = await right(judge_request())
        async with judging.backend(config, Config(), api_key="stale", key_source=source) as wrong:
            assert wrong is not None
            refused = await wrong(judge_request())
    finally:
        await server.close()
    assert good.passed is True
    assert not good.errored
    assert refused.errored
    assert "HTTP 401" in (refused.error or "")
    assert source in (refused.error or "")
    assert len(server.requests) == 2


async def test_a_shared_cache_answers_and_stays_open(tmp_path: Any) -> None:
    from agent_health.judging import cache as cache_mod

    server = await ScriptedModel.start("openai", default=Answer(True, 0.5, "shared"))
    store = await cache_mod.Cache.open(tmp_path / "shared.sqlite")
    try:
        config = judge_config(server)  # its own cache is off: the shared one is used
        for _ in range(2):
            async with judging.backend(config, Config(), cache=store) as backend:
                assert backend is not None
                verdict = await backend(judge_request())
        assert verdict.cached  # the second backend read what the first one stored
        assert store.usable  # the backends did not close the caller's cache
    finally:
        await store.close()
        await server.close()
    assert len(server.requests) == 1
