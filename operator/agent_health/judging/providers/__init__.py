"""Judge model providers behind one seam: an async ``__call__(ChatRequest) -> Completion``.

Built in (the immutable :data:`PROVIDERS` table, keyed by ``judge={"provider": ...}``):

* ``openai`` — any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LiteLLM)
* ``anthropic`` — the Anthropic Messages API
* ``bedrock`` — the Amazon Bedrock Converse API, signed with SigV4 (``agent-health[bedrock]``)

A custom provider is a factory ``(JudgeConfig, Endpoint) -> Provider``; pass your own
table to :func:`create` (or to ``judging.backend(providers=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Protocol

from agent_health.judging import errors as judging_errors
from agent_health.judging.chat import ChatRequest, Completion
from agent_health.judging.providers import anthropic, bedrock, openai
from agent_health.judging.providers.http import Endpoint
from agent_health.sdk import errors
from agent_health.sdk.config import JudgeConfig


class Provider(Protocol):
    """One model provider: sends a chat request, returns the completion or raises ProviderError."""

    name: str

    async def __call__(self, request: ChatRequest) -> Completion: ...


ProviderFactory = Callable[[JudgeConfig, Endpoint], Provider]

PROVIDERS: Mapping[str, ProviderFactory] = MappingProxyType(
    {
        "openai": openai.OpenAICompatible,
        "anthropic": anthropic.AnthropicMessages,
        "bedrock": bedrock.BedrockConverse,
    }
)


def create(
    config: JudgeConfig, endpoint: Endpoint, table: Mapping[str, ProviderFactory] = PROVIDERS
) -> Provider:
    """The provider named by ``config.provider`` (a clear config error when there is none)."""
    factory = table.get(config.provider)
    if factory is None:
        raise errors.ConfigError(
            f"judge.provider {config.provider!r} is not available; "
            f"choose one of: {', '.join(sorted(table))}"
        )
    return factory(config, endpoint)


class Unusable:
    """A provider that cannot be used this run (its key is missing): every call errors with
    the reason, so the judge calls error (cause ``judge``) and everything else still runs."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    async def __call__(self, request: ChatRequest) -> Completion:
        raise judging_errors.AuthError(self.reason)


def create_or_unusable(
    config: JudgeConfig, endpoint: Endpoint, table: Mapping[str, ProviderFactory] = PROVIDERS
) -> Provider:
    """:func:`create`, except that a missing key gives an :class:`Unusable` provider: it
    must not stop the tests that need no judge; each judge call errors with the reason
    (cause ``judge``) and the run goes on."""
    try:
        return create(config, endpoint, table)
    except judging_errors.MissingKey as err:
        return Unusable(config.provider, f"{err} (or pass --no-judge to skip judging)")


__all__ = [
    "PROVIDERS",
    "Endpoint",
    "Provider",
    "ProviderFactory",
    "Unusable",
    "create",
    "create_or_unusable",
]
