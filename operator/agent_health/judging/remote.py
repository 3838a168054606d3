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

from agent_health.judging import chat, dispatch, errors, tools, wire
from agent_health.sdk.config import JudgeConfig
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import Verdict

TIMEOUT = httpx.Timeout(600.0, connect=10.0)  # the service retries providers itself


class RemoteProvider:
    """A Provider whose model calls go to the judge service's ``/api/judge/chat``."""

    name = "remote"

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge/chat"

    async def __call__(self, request: chat.ChatRequest) -> chat.Completion:
        data = await _post(self._client, self._url, wire.chat_to_json(request))
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
    ) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge"
        self._model = model
        self.ask = RemoteAsk(client, url)
        local_judge = JudgeConfig(model=model) if model else None
        # Custom evaluators run here; their llm helper reaches the service's model.
        self._local = dispatch.Judging(
            judge=local_judge,
            provider=RemoteProvider(client, url) if model else None,
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
        data = await _post(self._client, self._url, payload)
        return Verdict.model_validate(data)


class RemoteAsk:
    """The ``llm`` helper of a cell's insights: questions go to the judge service's model
    (``/api/judge/ask``), which answers through its shared cache."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self._client = client
        self._url = url.rstrip("/") + "/api/judge/ask"

    async def __call__(self, text: str, *, system: str = "") -> str:
        data = await _post(self._client, self._url, {"text": text, "system": system})
        answer = data.get("text")
        if not isinstance(answer, str):
            raise errors.ProviderError(f"judge service at {self._url} answered {data!r:.200}")
        return answer


def _reads_traces(request: JudgeRequest) -> bool:
    return bool(request.tools) or bool({"traces", "logs"} & set(request.context))


async def _post(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        response = await client.post(url, json=payload)
    except httpx.HTTPError as err:
        raise errors.ProviderError(f"judge service at {url} unreachable: {err}") from err
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
) -> AsyncIterator[RemoteJudging]:
    """The judge backend of a cell: the service at ``url``, presenting ``token``.

    ``headers`` go on every call too (a cell adds its gateway token header, so the gateway
    records the call as the controller's); ``transport`` is the connection seam (a cell's
    goes to its gateway's Unix socket).
    """
    headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    async with httpx.AsyncClient(timeout=TIMEOUT, headers=headers, transport=transport) as client:
        yield RemoteJudging(client, url, model=model, evaluators=evaluators)
