"""The OpenAI-compatible connector against real chat-completions servers on loopback."""

from __future__ import annotations

import re
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import errors, openai_chat
from aiohttp import web
from support.loopback import request, serving

CHAT = "/v1/chat/completions"


def connector(url: str, **spec: Any) -> openai_chat.OpenAIChatConnector:
    return openai_chat.OpenAIChatConnector(
        connectors.ConnectorSpec(connector="openai", url=url, **spec)
    )


async def run(url: str, **spec: Any) -> connectors.AgentReply:
    conn = connector(url, **spec)
    try:
        return await conn.run(request())
    finally:
        await conn.aclose()


def answering(body: Any, seen: dict[str, Any] | None = None, status: int = 200) -> Any:
    async def handler(req: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen["headers"] = dict(req.headers)
            seen["body"] = await req.json()
        return web.json_response(body, status=status)

    return handler


async def test_example_agent_over_chat_completions(triage_url: str) -> None:
    reply = await run(triage_url.removesuffix("/run") + "/v1", options={"model": "triage-1"})
    assert "db-primary" in reply.output
    assert [(s.type, s.tool_name) for s in reply.trajectory] == [
        ("tool_call", "search_logs"),
        ("tool_result", "search_logs"),
        ("tool_call", "service_status"),
        ("tool_result", "service_status"),
        ("assistant", None),
    ]
    assert reply.trajectory[0].tool_args == {"service": "payment", "level": "error"}
    assert reply.trajectory[3].tool_output == {"name": "db-primary", "status": "down"}
    assert reply.token_usage.total > 0


async def test_request_shape_model_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_KEY_FOR_TEST", "sk-test")
    seen: dict[str, Any] = {}
    answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    async with serving(answering(answer, seen), path=CHAT) as url:
        conn = connector(
            url.removesuffix("/chat/completions"),
            options={
                "model": "my-agent",
                "api_key_env": "AGENT_KEY_FOR_TEST",
                "extra_body": {"temperature": 0},
            },
        )
        reply = await conn.run(
            request(context=[{"description": "Error log", "value": "refused"}], env={"A": "1"})
        )
        await conn.aclose()
    assert reply.output == "ok"
    assert seen["headers"]["Authorization"] == "Bearer sk-test"
    assert seen["headers"]["X-Agent-Health-Run-Id"] == "run-1"
    assert seen["headers"]["traceparent"].startswith("00-aaaa")
    assert seen["body"] == {
        "model": "my-agent",
        "messages": [
            {"role": "system", "content": "Context:\n- Error log: refused"},
            {"role": "user", "content": "Diagnose the payment service"},
        ],
        "metadata": {"A": "1"},
        "temperature": 0,
    }


async def test_tool_calls_transcript_reasoning_and_usage() -> None:
    answer = {
        "messages": [
            {
                "role": "assistant",
                "content": "Checking logs.",
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "search_logs", "arguments": '{"service": "auth"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": '{"lines": []}'},
            {"role": "tool", "tool_call_id": "b", "content": "not found", "is_error": True},
        ],
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Need the status too.",
                    "tool_calls": [
                        {"id": "a", "function": {"name": "search_logs", "arguments": "{}"}},
                        {"id": "b", "function": {"name": "service_status", "arguments": "{}"}},
                        {"id": "c", "function": {"name": "restart", "arguments": "not json"}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
        "model": "served-model-2025",
    }
    async with serving(answering(answer), path=CHAT) as url:
        reply = await run(url)
    steps = [s.model_dump(exclude_none=True) for s in reply.trajectory]
    assert steps == [
        {
            "type": "tool_call",
            "tool_name": "search_logs",
            "tool_args": {"service": "auth"},
            "tool_call_id": "a",
        },
        {"type": "assistant", "content": "Checking logs."},
        {
            "type": "tool_result",
            "tool_name": "search_logs",
            "tool_output": {"lines": []},
            "status": "ok",
            "tool_call_id": "a",
        },
        # named only by the final message: placed before its result
        {"type": "tool_call", "tool_name": "service_status", "tool_args": {}, "tool_call_id": "b"},
        {
            "type": "tool_result",
            "tool_name": "service_status",
            "tool_output": "not found",
            "status": "error",
            "tool_call_id": "b",
        },
        {"type": "thinking", "content": "Need the status too."},
        {
            "type": "tool_call",
            "tool_name": "restart",
            "tool_args": {"_raw": "not json"},
            "tool_call_id": "c",
        },
    ]
    assert reply.output == ""
    assert reply.token_usage.model_dump() == {"prompt": 12, "completion": 8, "total": 20}
    assert (reply.model_extra or {})["response"] == answer  # kept whole, as RunResult.raw
    # The model that answered prices the tokens (not the "agent" the request asked for).
    assert (reply.model_extra or {})["model"] == "served-model-2025"


async def test_error_body_is_agent_run_failed() -> None:
    async with serving(answering({"error": {"message": "model overloaded"}}), path=CHAT) as url:
        with pytest.raises(errors.AgentRunFailed, match="answered an error: model overloaded"):
            await run(url)


async def test_answer_without_choices() -> None:
    async with serving(answering({"id": "x", "choices": []}), path=CHAT) as url:
        with pytest.raises(errors.AgentProtocolError, match=r"without choices\[0\]\.message"):
            await run(url)


async def test_tool_call_without_function() -> None:
    answer = {"choices": [{"message": {"content": "", "tool_calls": [{"id": "x"}]}}]}
    async with serving(answering(answer), path=CHAT) as url:
        with pytest.raises(errors.AgentProtocolError, match="tool call without a function"):
            await run(url)


async def test_http_errors_map_like_rest() -> None:
    async with serving(answering({"error": "rate limited"}, status=429), path=CHAT) as url:
        with pytest.raises(errors.AgentHTTPError, match="HTTP 429") as info:
            await run(url)
    assert info.value.status == 429

    async def not_json(req: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>proxy error</html>")

    async with serving(not_json, path=CHAT) as url:
        with pytest.raises(errors.AgentProtocolError, match="malformed JSON: <html>proxy"):
            await run(url)

    with pytest.raises(errors.AgentUnreachable, match="cannot connect"):
        await run("http://127.0.0.1:9/v1")


def test_missing_api_key_env_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_FOR_TEST", raising=False)
    with pytest.raises(errors.ConnectorConfigError, match=re.escape("$NO_SUCH_KEY_FOR_TEST")):
        connector("http://127.0.0.1:9/v1", options={"api_key_env": "NO_SUCH_KEY_FOR_TEST"})
