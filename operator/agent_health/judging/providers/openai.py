"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LiteLLM proxies).

``POST {base_url}/chat/completions``; a structured answer is asked for with a strict
``json_schema`` response format, tools are ``function`` tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_health.judging import errors
from agent_health.judging.chat import ChatRequest, Completion, Message, ToolCall
from agent_health.judging.providers import http
from agent_health.judging.providers.http import Endpoint
from agent_health.sdk.config import JudgeConfig

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAICompatible:
    """The ``openai`` provider."""

    name = "openai"

    def __init__(self, config: JudgeConfig, endpoint: Endpoint) -> None:
        key = http.api_key(config, endpoint.api_key)
        self.url = f"{(config.base_url or DEFAULT_BASE_URL).rstrip('/')}/chat/completions"
        self.endpoint = endpoint
        self.headers = {"authorization": f"Bearer {key}"} if key else {}
        self.options = dict(config.options)

    async def __call__(self, request: ChatRequest) -> Completion:
        body: dict[str, Any] = {
            **self.options,
            "model": request.model,
            "messages": [
                {"role": "system", "content": request.system},
                *(_message(m) for m in request.messages),
            ],
            "temperature": 0,
            "max_tokens": request.max_tokens,
        }
        if request.schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": dict(request.schema), "strict": True},
            }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        data = await self.endpoint.post_json(self.url, body, self.headers)
        return self._completion(data, structured=request.schema is not None)

    def _completion(self, data: Any, *, structured: bool) -> Completion:
        try:
            message = data["choices"][0]["message"]
            text = message.get("content") or ""
            calls = tuple(
                ToolCall(
                    id=str(c.get("id") or f"call_{i}"),
                    name=c["function"]["name"],
                    arguments=_arguments(c["function"].get("arguments")),
                )
                for i, c in enumerate(message.get("tool_calls") or ())
            )
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            raise errors.ProviderError(
                f"judge endpoint {self.url} answered something that is not a chat completion: "
                f"{json.dumps(data)[:300]}"
            ) from err
        usage = data.get("usage") or {}
        text = text if isinstance(text, str) else json.dumps(text)
        return Completion(
            text=text,
            structured=_object(text) if structured else None,
            tool_calls=calls,
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
            }
            for c in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


def _arguments(raw: Any) -> Mapping[str, Any]:
    """Tool arguments arrive as a JSON string; a broken one is kept for the tool to refuse."""
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"__unparseable__": str(raw)}
    return value if isinstance(value, dict) else {"__unparseable__": str(raw)}


def _object(text: str) -> Mapping[str, Any] | None:
    """The JSON object of a schema-constrained answer; ``None`` lets the caller parse the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
