"""The Anthropic Messages API: ``POST {base_url}/v1/messages``.

A structured answer is a forced tool call (``tool_choice`` of the verdict tool), whose
``input`` is the object; tool results go back as ``tool_result`` blocks of a user turn.
"""

from __future__ import annotations

import json
from typing import Any

from agent_health.judging import errors
from agent_health.judging.chat import (
    VERDICT_TOOL_NAME,
    ChatRequest,
    Completion,
    Message,
    ToolCall,
    tool_completion,
)
from agent_health.judging.providers import http
from agent_health.judging.providers.http import Endpoint
from agent_health.sdk.config import JudgeConfig

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class AnthropicMessages:
    """The ``anthropic`` provider."""

    name = "anthropic"

    def __init__(self, config: JudgeConfig, endpoint: Endpoint) -> None:
        key = http.api_key(config, endpoint.api_key)
        self.url = f"{(config.base_url or DEFAULT_BASE_URL).rstrip('/')}/v1/messages"
        self.endpoint = endpoint
        self.headers = {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}
        self.options = dict(config.options)

    async def __call__(self, request: ChatRequest) -> Completion:
        body: dict[str, Any] = {
            **self.options,
            "model": request.model,
            "system": request.system,
            "max_tokens": request.max_tokens,
            "temperature": 0,
            "messages": to_turns(request.messages),
        }
        tools = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in request.tools
        ]
        if request.schema is not None:
            tools.append(
                {
                    "name": VERDICT_TOOL_NAME,
                    "description": "Submit the verdict.",
                    "input_schema": dict(request.schema),
                }
            )
            body["tool_choice"] = {"type": "tool", "name": VERDICT_TOOL_NAME}
        if tools:
            body["tools"] = tools
        data = await self.endpoint.post_json(self.url, body, self.headers)
        return self._completion(data, structured=request.schema is not None)

    def _completion(self, data: Any, *, structured: bool) -> Completion:
        try:
            blocks = data["content"]
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = tuple(
                ToolCall(id=str(b["id"]), name=str(b["name"]), arguments=dict(b.get("input") or {}))
                for b in blocks
                if b.get("type") == "tool_use"
            )
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise errors.ProviderError(
                f"judge endpoint {self.url} answered something that is not a Messages "
                f"response: {json.dumps(data)[:300]}"
            ) from err
        usage = data.get("usage") or {}
        return tool_completion(
            text,
            calls,
            structured=structured,
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        )


def to_turns(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral messages as Anthropic turns; consecutive tool results share one user turn."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            if turns and turns[-1]["role"] == "user" and isinstance(turns[-1]["content"], list):
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif m.role == "assistant" and m.tool_calls:
            content: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else []
            )
            content += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in m.tool_calls
            ]
            turns.append({"role": "assistant", "content": content})
        else:
            turns.append({"role": m.role, "content": m.content})
    return turns
