"""The REST agent protocol v1 (docs/agent-protocol.md): POST JSON, read one JSON answer."""

from __future__ import annotations

import pydantic

from agent_health.connectors import errors, wire
from agent_health.connectors import transport as http
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest
from agent_health.ledger import strictjson

RUN_ID_HEADER = wire.RUN_ID_HEADER
_JSON = {"content-type": "application/json"}


class RestConnector:
    """POSTs the request as JSON and reads one JSON answer; a conversation's later turns
    carry the conversation so far (``messages``, ``turn``)."""

    holds_conversations = True

    def __init__(
        self,
        spec: ConnectorSpec,
        *,
        transport: http.Transport | None = None,
        observe: wire.Observer | None = None,
    ) -> None:
        self.url = wire.require_url(spec, "rest")
        self.spec = spec
        self._http = wire.Http(spec, transport, observe)

    async def run(self, request: AgentRequest) -> AgentReply:
        body = request.wire_bytes()
        timeout = wire.timeout_of(request, self.spec)
        received = http.Received()  # what came, should the agent stop halfway
        status, data = await self._http.call(
            request, self.url, body, _JSON, timeout, received.read, received.partial
        )
        wire.ensure_success(status, data, self.url)
        if not strictjson.needs_care(data):  # pydantic's parser would take NaN in any field
            try:
                return AgentReply.model_validate_json(data)  # parsed and validated in one pass
            except pydantic.ValidationError:
                pass  # read again the long way, for the message that says what is wrong
        body = wire.json_body(data, self.url)
        wire.require_output(body, f"agent at {self.url}")
        try:
            return AgentReply.model_validate(body)
        except pydantic.ValidationError as err:
            raise errors.AgentProtocolError(
                f"agent at {self.url} answered JSON that is not REST protocol v1: "
                f"{wire.validation_reason(err)}"
            ) from err

    async def aclose(self) -> None:
        await self._http.aclose()
