"""The REST agent protocol v1 over httpx (DESIGN.md §9)."""

from __future__ import annotations

import json

import httpx
import pydantic

from agent_health.connectors import errors
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest

RUN_ID_HEADER = "X-Agent-Health-Run-Id"


class RestConnector:
    """POSTs the request as JSON and reads one JSON answer."""

    def __init__(self, spec: ConnectorSpec, *, transport: httpx.AsyncBaseTransport | None = None):
        if not spec.url:
            raise errors.ConnectorConfigError("the rest connector needs a url")
        self.url = spec.url
        self.spec = spec
        self._client = httpx.AsyncClient(
            headers=spec.headers,
            timeout=httpx.Timeout(spec.timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
            transport=transport,
        )

    async def run(self, request: AgentRequest) -> AgentReply:
        headers = {RUN_ID_HEADER: request.run_id}
        if request.traceparent:
            headers["traceparent"] = request.traceparent
        timeout = request.timeout_s or self.spec.timeout
        try:
            response = await self._client.post(
                self.url,
                content=request.model_dump_json(),
                headers={**headers, "content-type": "application/json"},
                timeout=timeout,
            )
        except httpx.TimeoutException as err:
            raise errors.AgentTimeout(
                f"agent at {self.url} did not answer within {timeout:g} s"
            ) from err
        except httpx.ConnectError as err:
            raise errors.AgentUnreachable(
                f"cannot connect to agent at {self.url}: {_reason(err)} (is it running?)"
            ) from err
        except httpx.HTTPError as err:
            raise errors.AgentUnreachable(
                f"request to agent at {self.url} failed: {_reason(err)}"
            ) from err
        if not response.is_success:
            raise errors.AgentHTTPError(
                f"agent at {self.url} answered HTTP {response.status_code}: "
                f"{_snippet(response.text)}",
                status=response.status_code,
            )
        try:
            body = json.loads(response.content)
        except ValueError as err:
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered malformed JSON: {_snippet(response.text)}"
            ) from err
        try:
            return AgentReply.model_validate(body)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered JSON that is not REST protocol v1: "
                f"{where}: {first['msg']}"
            ) from err

    async def aclose(self) -> None:
        await self._client.aclose()


def _reason(err: Exception) -> str:
    return str(err) or type(err).__name__


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
