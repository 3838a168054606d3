"""Amazon Bedrock's Converse API: ``POST {base_url}/model/{modelId}/converse``, signed SigV4.

botocore (``pip install 'agent-health[bedrock]'``) only signs; the request itself goes
through the shared httpx endpoint, so retries and limits are the same as for every
provider. Credentials come from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_SESSION_TOKEN``; with ``judge.api_key_env`` set, that variable holds a Bedrock API
key sent as a bearer token instead. The region is ``judge.region``, else ``AWS_REGION``
or ``AWS_DEFAULT_REGION``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from agent_health import sdk
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
from agent_health.judging.providers.http import Endpoint, HeaderSource
from agent_health.sdk.config import JudgeConfig

SERVICE = "bedrock"


class BedrockConverse:
    """The ``bedrock`` provider."""

    name = "bedrock"

    def __init__(self, config: JudgeConfig, endpoint: Endpoint) -> None:
        region = (
            config.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        )
        if not region:
            raise sdk.ConfigError(
                "judge.provider 'bedrock' needs a region: set judge.region or AWS_REGION"
            )
        base = config.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        self.base_url = base.rstrip("/")
        self.endpoint = endpoint
        self.options = dict(config.options)
        key = (
            http.api_key(config, endpoint.api_key)
            if config.api_key_env or endpoint.api_key
            else None
        )
        self.headers: HeaderSource = {"authorization": f"Bearer {key}"} if key else _signer(region)

    async def __call__(self, request: ChatRequest) -> Completion:
        url = f"{self.base_url}/model/{quote(request.model, safe='')}/converse"
        body: dict[str, Any] = {
            **self.options,
            "system": [{"text": request.system}],
            "messages": to_turns(request.messages),
            "inferenceConfig": {"maxTokens": request.max_tokens, "temperature": 0},
        }
        tools = [_tool(t.name, t.description, t.parameters) for t in request.tools]
        if request.schema is not None:
            tools.append(_tool(VERDICT_TOOL_NAME, "Submit the verdict.", request.schema))
        if tools:
            choice = {"tool": {"name": VERDICT_TOOL_NAME}} if request.schema else {"auto": {}}
            body["toolConfig"] = {"tools": tools, "toolChoice": choice}
        data = await self.endpoint.post_json(url, body, self.headers)
        return self._completion(url, data, structured=request.schema is not None)

    def _completion(self, url: str, data: Any, *, structured: bool) -> Completion:
        try:
            blocks = data["output"]["message"]["content"]
            text = "".join(b["text"] for b in blocks if "text" in b)
            calls = tuple(
                ToolCall(
                    id=str(b["toolUse"]["toolUseId"]),
                    name=str(b["toolUse"]["name"]),
                    arguments=dict(b["toolUse"].get("input") or {}),
                )
                for b in blocks
                if "toolUse" in b
            )
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise errors.ProviderError(
                f"judge endpoint {url} answered something that is not a Converse response: "
                f"{json.dumps(data)[:300]}"
            ) from err
        usage = data.get("usage") or {}
        return tool_completion(
            text,
            calls,
            structured=structured,
            input_tokens=int(usage.get("inputTokens") or 0),
            output_tokens=int(usage.get("outputTokens") or 0),
        )


def _tool(name: str, description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "toolSpec": {
            "name": name,
            "description": description,
            "inputSchema": {"json": dict(schema)},
        }
    }


def to_turns(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral messages as Converse turns; consecutive tool results share one user turn."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            block = {"toolResult": {"toolUseId": m.tool_call_id, "content": [{"text": m.content}]}}
            if turns and turns[-1]["role"] == "user" and "toolResult" in turns[-1]["content"][0]:
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
            continue
        content: list[dict[str, Any]] = [{"text": m.content}] if m.content else []
        content += [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": dict(c.arguments)}}
            for c in m.tool_calls
        ]
        turns.append({"role": m.role, "content": content or [{"text": " "}]})
    return turns


def _signer(region: str) -> HeaderSource:
    """Headers signed with SigV4 for each attempt (the signature covers the time and the body)."""
    try:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
    except ImportError as err:
        raise sdk.ConfigError(
            "judge.provider 'bedrock' needs botocore to sign requests: "
            "pip install 'agent-health[bedrock]'"
        ) from err
    access = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise sdk.ConfigError(
            "judge.provider 'bedrock' signs with AWS credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or set "
            "judge.api_key_env to the variable holding a Bedrock API key"
        )
    credentials = Credentials(access, secret, os.environ.get("AWS_SESSION_TOKEN") or None)
    auth = SigV4Auth(credentials, SERVICE, region)

    def sign(url: str, payload: bytes) -> Mapping[str, str]:
        request = AWSRequest(
            method="POST", url=url, data=payload, headers={"content-type": "application/json"}
        )
        auth.add_auth(request)
        return dict(request.headers.items())

    return sign
