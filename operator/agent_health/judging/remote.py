"""A cell's judge: every judge() call goes to the judge service, which holds the credentials.

:class:`RemoteJudging` is the :class:`~agent_health.sdk.context.JudgeBackend` a cell
installs. LLM-judged calls are answered by the service (through its shared cache); custom
evaluators run here, in the cell, and their ``llm`` helper calls the service's model
through :class:`RemoteProvider`. When the run's traces come from OpenSearch, a call that
reads them (``tools=["trace_query"]``, ``context=["traces"|"logs"]``) carries the spans,
logs and metrics the cell read (:func:`tools.ship`): the service cannot reach them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from agent_health import tls
from agent_health.judging import chat, dispatch, errors, tools, wire
from agent_health.sdk.config import JudgeConfig
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.simulated import UserAsk, UserLine
from agent_health.sdk.verdict import Verdict

TIMEOUT = httpx.Timeout(600.0, connect=10.0)  # the service retries providers itself
RESTART_PATIENCE = 120.0
"""How long a call waits out an unavailable judge service (refused, or the cell gateway's
502/503/504): the service lives in the operator, and a one-replica operator that restarts
(a crash, an upgrade) is away for seconds to a minute. Other failures are not retried."""
UNAVAILABLE = frozenset({502, 503, 504})


class _Unavailable(Exception):
    """The judge service is away for now (retried within :data:`RESTART_PATIENCE`)."""


class RemoteProvider:
    """A Provider whose model calls go to the judge service's ``/api/judge/chat``."""

    name = "remote"

    def __init__(
        self, client: httpx.AsyncClient, url: str, patience: float = RESTART_PATIENCE
    ) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge/chat"
        self._patience = patience

    async def __call__(self, request: chat.ChatRequest) -> chat.Completion:
        data = await _post(self._client, self._url, wire.chat_to_json(request), self._patience)
        return wire.completion_from_json(data)


class RemoteJudging:
    """Answers judge() calls by asking the judge service."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        model: str | None = None,
        evaluators: Mapping[str, Callable[..., Any]] | None = None,
        patience: float = RESTART_PATIENCE,
    ) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge"
        self._model = model
        self._patience = patience
        self.ask = RemoteAsk(client, url, patience)
        local_judge = JudgeConfig(model=model) if model else None
        # Custom evaluators run here; their llm helper reaches the service's model.
        self._local = dispatch.Judging(
            judge=local_judge,
            provider=RemoteProvider(client, url, patience) if model else None,
            custom=evaluators,
        )

    async def __call__(self, request: JudgeRequest) -> Verdict:
        if request.evaluator is not None:
            return await self._local(request)
        if request.result is not None and _reads_traces(request):
            # The service cannot reach this run's OpenSearch traces: ship what the tools read.
            request = dataclasses.replace(request, trace=await tools.ship(request.result))
        call = wire.WireJudgeRequest.of(request)
        if call.model is None and self._model is not None:
            call = call.model_copy(update={"model": self._model})  # the RunSpec's judge model
        payload = call.model_dump(mode="json", by_alias=True)
        data = await _post(self._client, self._url, payload, self._patience)
        return Verdict.model_validate(data)

    @property
    def simulates(self) -> bool:
        """The judge service decides (it answers an errored line when it has no model)."""
        return True

    async def simulate(self, ask: UserAsk) -> UserLine:
        """What a simulated user says next, asked of the judge service's model
        (``/api/judge/user``) through its shared cache; a service that cannot answer gives an
        errored line with its message."""
        url = self._url + "/user"
        if ask.model is None and self._model is not None:
            ask = ask.model_copy(update={"model": self._model})  # the RunSpec's judge model
        try:
            data = await _post(self._client, url, ask.model_dump(mode="json"), self._patience)
            return UserLine.model_validate(data)
        except errors.UsageError:
            raise
        except (errors.JudgingError, ValueError) as err:
            return UserLine(errored=True, error=str(err))


class RemoteAsk:
    """The ``llm`` helper of a cell's insights: questions go to the judge service's model
    (``/api/judge/ask``), which answers through its shared cache."""

    def __init__(
        self, client: httpx.AsyncClient, url: str, patience: float = RESTART_PATIENCE
    ) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge/ask"
        self._patience = patience

    async def __call__(self, text: str, *, system: str = "") -> str:
        payload = {"text": text, "system": system}
        data = await _post(self._client, self._url, payload, self._patience)
        answer = data.get("text")
        if not isinstance(answer, str):
            raise errors.ProviderError(f"judge service at {self._url} answered {data!r:.200}")
        return answer


def _reads_traces(request: JudgeRequest) -> bool:
    return bool(request.tools) or bool({"traces", "logs"} & set(request.context))


async def _send(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], patience: float
) -> httpx.Response:
    """POST, waiting out an unavailable service for up to ``patience`` seconds."""

    async def once() -> httpx.Response:
        try:
            response = await client.post(url, json=payload)
        except (httpx.ConnectError, httpx.RemoteProtocolError) as err:
            raise _Unavailable(f"unreachable: {err!r}") from err
        if response.status_code in UNAVAILABLE:
            raise _Unavailable(f"HTTP {response.status_code}: {response.text[:200]}")
        return response

    retrying = AsyncRetrying(
        stop=stop_after_delay(patience),
        wait=wait_exponential(multiplier=0.5, max=10),
        retry=retry_if_exception_type(_Unavailable),
    )
    try:
        async for attempt in retrying:
            with attempt:
                return await once()
    except RetryError as err:
        last = err.last_attempt.exception()
        raise errors.ProviderError(
            f"judge service at {url} {last} (gave up after {patience:g} s)"
        ) from last
    except httpx.HTTPError as err:
        raise errors.ProviderError(f"judge service at {url} unreachable: {err!r}") from err
    raise AssertionError("unreachable")  # pragma: no cover


async def _post(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], patience: float
) -> dict[str, Any]:
    response = await _send(client, url, payload, patience)
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:300]}
    if response.status_code == 422:
        raise errors.UsageError(str(body.get("error", body)))
    if not response.is_success:
        reason = body.get("error", body) if isinstance(body, dict) else body
        raise errors.ProviderError(
            f"judge service at {url} answered HTTP {response.status_code}: {reason}"
        )
    if not isinstance(body, dict):
        raise errors.ProviderError(f"judge service at {url} answered {body!r}")
    return body


@contextlib.asynccontextmanager
async def remote_backend(
    url: str,
    token: str | None,
    *,
    model: str | None = None,
    evaluators: Mapping[str, Callable[..., Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    patience: float = RESTART_PATIENCE,
) -> AsyncIterator[RemoteJudging]:
    """The judge backend of a cell: the service at ``url``, presenting ``token``.

    ``headers`` go on every call too (a cell adds its gateway token header, so the gateway
    records the call as the controller's); ``transport`` is the connection seam (a cell's
    goes to its gateway's Unix socket). A call waits up to ``patience`` seconds for a
    service that is away (an operator restarting), then the verdict is errored.
    """
    headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    async with httpx.AsyncClient(
        timeout=TIMEOUT, headers=headers, transport=transport, verify=tls.for_url(url)
    ) as client:
        yield RemoteJudging(client, url, model=model, evaluators=evaluators, patience=patience)
