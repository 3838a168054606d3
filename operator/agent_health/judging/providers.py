"""Judge model providers behind one seam: ``complete(system, messages, model, schema)``.

Built in: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LiteLLM).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from agent_health.sdk import errors
from agent_health.sdk.config import JudgeConfig


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class ProviderError(Exception):
    """The provider could not answer (HTTP error, unreachable, bad answer)."""


class Provider(Protocol):
    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Mapping[str, Any]],
        model: str,
        schema: Mapping[str, Any],
    ) -> Completion: ...


class OpenAICompatible:
    """POST {base_url}/chat/completions with a JSON-schema response format."""

    def __init__(self, config: JudgeConfig, key: str | None, client: httpx.AsyncClient) -> None:
        self.base_url = (config.base_url or "https://api.openai.com/v1").rstrip("/")
        self.key = key
        self.client = client
        self.key_env = config.api_key_env

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[Mapping[str, Any]],
        model: str,
        schema: Mapping[str, Any],
    ) -> Completion:
        body = {
            "model": model,
            "messages": [{"role": "system", "content": system}, *messages],
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": dict(schema), "strict": True},
            },
        }
        headers = {"authorization": f"Bearer {self.key}"} if self.key else {}
        url = f"{self.base_url}/chat/completions"
        try:
            response = await self.client.post(url, json=body, headers=headers)
        except httpx.HTTPError as err:
            raise ProviderError(f"judge endpoint {url} unreachable: {err}") from err
        if response.status_code in (401, 403):
            raise ProviderError(
                f"judge endpoint {url} refused the credentials (HTTP {response.status_code}); "
                f"check {self.key_env or 'the api_key_env variable'}"
            )
        if not response.is_success:
            raise ProviderError(
                f"judge endpoint {url} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise ProviderError(
                f"judge endpoint {url} answered something that is not a chat completion: "
                f"{response.text[:200]}"
            ) from err
        usage = data.get("usage") or {}
        return Completion(
            text=text if isinstance(text, str) else json.dumps(text),
            input_tokens=int(usage.get("prompt_tokens", 0) or 0),
            output_tokens=int(usage.get("completion_tokens", 0) or 0),
        )


ProviderFactory = Callable[[JudgeConfig, "str | None", httpx.AsyncClient], Provider]
PROVIDERS: Mapping[str, ProviderFactory] = {"openai": OpenAICompatible}


def create_provider(config: JudgeConfig, key: str | None, client: httpx.AsyncClient) -> Provider:
    factory = PROVIDERS.get(config.provider)
    if factory is None:
        raise errors.ConfigError(
            f"judge provider {config.provider!r} is not available in this version; "
            f"available: {', '.join(sorted(PROVIDERS))}"
        )
    return factory(config, key, client)
