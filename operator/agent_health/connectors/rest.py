"""The REST agent protocol v1 over httpx (docs/agent-protocol.md)."""

from __future__ import annotations

import httpx
import pydantic

from agent_health.connectors import errors, wire
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest

RUN_ID_HEADER = wire.RUN_ID_HEADER


class RestConnector:
    """POSTs the request as JSON and reads one JSON answer."""

    def __init__(self, spec: ConnectorSpec, *, transport: httpx.AsyncBaseTransport | None = None):
        self.url = wire.require_url(spec, "rest")
        self.spec = spec
        self._clients = wire.Clients(spec, transport)

    async def run(self, request: AgentRequest) -> AgentReply:
        timeout = wire.timeout_of(request, self.spec)
        async with wire.translating(self.url, timeout), self._clients.lease() as client:
            response = await client.post(
                self.url,
                content=request.model_dump_json(),
                headers={**wire.run_headers(request), "content-type": "application/json"},
                timeout=timeout,
            )
        wire.ensure_success(response, self.url)
        body = wire.json_body(response, self.url)
        wire.require_output(body, f"agent at {self.url}")
        try:
            return AgentReply.model_validate(body)
        except pydantic.ValidationError as err:
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered JSON that is not REST protocol v1: "
                f"{wire.validation_reason(err)}"
            ) from err

    async def aclose(self) -> None:
        await self._clients.aclose()
