"""POSTing JSON to a model provider: retries, Retry-After, the concurrency limit, and errors.

Every provider sends through one :class:`Endpoint`, so all of them retry the same way:
429, 5xx, timeouts and refused connections are retried with exponential backoff and full
jitter (tenacity), a ``Retry-After`` is honoured when it fits in the time budget, and
attempts and total time are bounded (``judge.retry``). 401/403 are never retried and name
where the key comes from (an environment variable, or the Secret an operator read it
from). The limit on in-flight calls (``max_concurrency``) is held only while a request is
on the wire, never while waiting to retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from agent_health.judging import errors
from agent_health.sdk.config import JudgeConfig, RetryConfig

# The key variable a provider reads when judge.api_key_env is not given.
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

# Given the exact body bytes, the headers to send (a signer computes them per attempt).
HeaderSource = Mapping[str, str] | Callable[[str, bytes], Mapping[str, str]]


class Endpoint:
    """One provider's HTTP seam: ``await endpoint.post_json(url, body, headers)``."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        retry: RetryConfig,
        max_concurrency: int,
        auth_hint: str | None,
        api_key: str | None = None,
    ) -> None:
        self.client = client
        self.retry = retry
        self.auth_hint = auth_hint
        self.api_key = api_key
        """A key given directly (e.g. read from a Secret); providers prefer it to the env."""
        self.limit = asyncio.Semaphore(max_concurrency)

    async def post_json(self, url: str, body: Mapping[str, Any], headers: HeaderSource) -> Any:
        """POST ``body`` as JSON and return the decoded JSON answer (retrying what may heal)."""
        payload = json.dumps(body, ensure_ascii=False).encode()
        policy = self.retry
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts) | stop_before_delay(policy.max_time),
            wait=_Wait(policy),
            retry=retry_if_exception_type(errors.RetryableError),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(url, payload, headers)
        except errors.RetryableError as err:
            tries = retrying.statistics.get("attempt_number", 1)
            raise errors.RetryableError(
                f"{err} (gave up after {tries} attempt{'s' if tries != 1 else ''})",
                err.retry_after,
            ) from err
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, url: str, payload: bytes, headers: HeaderSource) -> Any:
        sent = headers(url, payload) if callable(headers) else headers
        send = httpx.Headers({"content-type": "application/json"})
        send.update(sent)
        try:
            async with self.limit:
                response = await self.client.post(url, content=payload, headers=send)
        except httpx.TimeoutException as err:
            raise errors.RetryableError(f"judge endpoint {url} timed out ({_name(err)})") from err
        except httpx.TransportError as err:
            raise errors.RetryableError(f"judge endpoint {url} unreachable: {_name(err)}") from err
        status = response.status_code
        if status in (401, 403):
            check = self.auth_hint or "the environment variable named by judge.api_key_env"
            raise errors.AuthError(
                f"judge endpoint {url} refused the credentials (HTTP {status}: "
                f"{provider_message(response)}); check {check}"
            )
        if status == 429 or status >= 500:
            raise errors.RetryableError(
                f"judge endpoint {url} answered HTTP {status}: {provider_message(response)}",
                retry_after(response.headers),
            )
        if not response.is_success:
            raise errors.ProviderError(
                f"judge endpoint {url} answered HTTP {status}: {provider_message(response)}"
            )
        try:
            return response.json()
        except ValueError as err:
            raise errors.ProviderError(
                f"judge endpoint {url} answered HTTP {status} with a body that is not JSON: "
                f"{response.text[:300]!r}"
            ) from err


class _Wait:
    """Retry-After when the provider sent one, else exponential backoff with full jitter."""

    def __init__(self, policy: RetryConfig) -> None:
        self.backoff = wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait)

    def __call__(self, state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        if isinstance(failure, errors.RetryableError) and failure.retry_after is not None:
            return failure.retry_after
        return float(self.backoff(state))


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def provider_message(response: httpx.Response) -> str:
    """The provider's own error message (OpenAI, Anthropic and AWS shapes), else the body."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "Message", "detail"):
            if data.get(key):
                return str(data[key])
    return json.dumps(data)[:300]


def key_env(config: JudgeConfig) -> str | None:
    """The environment variable that holds the key (``None``: this endpoint needs none)."""
    if config.api_key_env:
        return config.api_key_env
    if config.provider == "openai" and config.base_url:
        return None  # a local OpenAI-compatible server (vLLM, Ollama) usually takes no key
    return DEFAULT_KEY_ENV.get(config.provider)


def auth_hint(config: JudgeConfig) -> str | None:
    """What to check when the provider refuses the credentials (the environment variables)."""
    if config.provider == "bedrock" and not config.api_key_env:
        return (
            "the environment variables AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
            "AWS_SESSION_TOKEN"
        )
    name = key_env(config)
    return f"the environment variable {name}" if name else None


def api_key(config: JudgeConfig, given: str | None = None) -> str | None:
    """The key: ``given`` when set (:attr:`Endpoint.api_key`), else from the environment.

    A clear config error names the variable when it is unset.
    """
    if given:
        return given
    name = key_env(config)
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise errors.MissingKey(
            f"judge: environment variable {name} is not set; export the {config.provider} "
            "key there, or point judge.api_key_env (AGENT_HEALTH_JUDGE_API_KEY_ENV) at the "
            "variable that holds it"
        )
    return value


def _name(err: Exception) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
