"""The AG-UI connector: POST a ``RunAgentInput``, read the agent's events from SSE.

The request is the ``ag-ui-protocol`` package's :class:`ag_ui.core.RunAgentInput`: the run
id is both ``threadId`` and ``runId``, the prompt is one user message, the context items
are AG-UI ``context`` and ``agent.run(env=...)`` travels as ``forwardedProps.env``
(``provisioned=`` and ``files=`` as ``forwardedProps.provisioned`` / ``.files``, when given).
``agent.run(tools=...)`` (a case's ``tools``) are AG-UI ``tools``, after the config's.
The events are folded into the trajectory by :mod:`agent_health.connectors.agui.fold` as
they arrive; an optional ``on_event`` callback sees each one as soon as it is read.

A run must end with ``RUN_FINISHED``. ``RUN_ERROR`` is
:class:`~errors.AgentRunFailed`; a stream that ends or is cut before ``RUN_FINISHED`` is
:class:`~errors.AgentStreamIncomplete`. Both make the test ``errored``. A run that does not
finish within its timeout is :class:`~errors.AgentTimeout` carrying the events folded so far
(:mod:`.partial`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import pydantic_core
from ag_ui import core

from agent_health.connectors import errors, sse, wire
from agent_health.connectors import partial as partial_mod
from agent_health.connectors import transport as http
from agent_health.connectors.agui import fold
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest

_SSE = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "cache-control": "no-store",
}
EventCallback = Callable[[Mapping[str, Any]], object]
"""Called with each event (its wire form) right after it is folded; may be async."""


class AguiConnector:
    """Reaches an agent that speaks AG-UI over HTTP + SSE.

    ``spec.options`` may give ``state`` (the AG-UI ``state``), ``tools`` (AG-UI tool
    definitions offered to the agent) and ``forwarded_props`` (merged with ``env``).

    A conversation keeps one ``threadId`` (the run id) and sends every message so far; each
    turn is a run of its own (``runId`` the run id, then ``<run id>-2``, ``-3``, ...).
    """

    holds_conversations = True

    def __init__(
        self,
        spec: ConnectorSpec,
        *,
        transport: http.Transport | None = None,
        on_event: EventCallback | None = None,
        observe: wire.Observer | None = None,
    ) -> None:
        self.url = wire.require_url(spec, "agui")
        self.spec = spec
        self.on_event = on_event
        self._http = wire.Http(spec, transport, observe)
        # What every RunAgentInput of this connector shares, validated by the package's
        # types once and kept in wire form (the models' serializer costs more per call than
        # the rest of the call).
        shared = json.loads(
            core.RunAgentInput(
                thread_id="-",
                run_id="-",
                state=spec.options.get("state", {}),
                messages=[],
                tools=[core.Tool.model_validate(t) for t in spec.options.get("tools", [])],
                context=[],
                forwarded_props=spec.options.get("forwarded_props", {}),
            ).model_dump_json(by_alias=True)
        )
        self._state = shared.get("state", {})
        self._tools = shared.get("tools", [])
        self._forwarded = shared.get("forwardedProps") or {}

    def run_input(self, request: AgentRequest) -> core.RunAgentInput:
        """The ``RunAgentInput`` that :meth:`run` posts for ``request``."""
        options = self.spec.options
        return core.RunAgentInput(
            thread_id=request.run_id,
            run_id=_run_id(request),
            state=options.get("state", {}),
            messages=[
                core.UserMessage(id=m["id"], content=m["content"])
                if m["role"] == "user"
                else core.AssistantMessage(id=m["id"], content=m["content"])
                for m in _messages(request)
            ],
            tools=[
                core.Tool.model_validate(t)
                for t in _tools(options.get("tools", []), request.tool_list())
            ],
            context=[
                core.Context(description=item.description, value=item.value)
                for item in request.context
            ],
            forwarded_props={
                **options.get("forwarded_props", {}),
                "env": request.env,
                **request.provisioning(),
            },
        )

    def body(self, request: AgentRequest) -> bytes:
        """:meth:`run_input` in wire form (camelCase, unset fields left out), built without
        the models' serializer for the parts that change per request."""
        payload = {
            "threadId": request.run_id,
            "runId": _run_id(request),
            "state": self._state,
            "messages": _messages(request),
            "tools": _tools(self._tools, request.tool_list()) if request.tools else self._tools,
            "context": [{"description": c.description, "value": c.value} for c in request.context],
            "forwardedProps": {**self._forwarded, "env": request.env, **request.provisioning()},
        }
        # Compact UTF-8 (json.dumps takes 5x as long); a NaN in a tool's schema or the state
        # is written null: the agent gets JSON, never the bare NaN no parser takes.
        return pydantic_core.to_json(payload, inf_nan_mode="null")

    async def run(self, request: AgentRequest) -> AgentReply:
        timeout = wire.timeout_of(request, self.spec)
        body = self.body(request)
        stream = _Stream(self.url, self.on_event)
        await self._http.call(request, self.url, body, _SSE, timeout, stream.read, stream.partial)
        return AgentReply.model_validate({**stream.fold.reply_fields(), "events": stream.events})

    async def aclose(self) -> None:
        await self._http.aclose()


class _Stream:
    """One run's events as they are read: the fold, the events and the bytes so far (what a
    call that times out had been sent, :meth:`partial`)."""

    __slots__ = ("events", "fold", "on_event", "size", "url")

    def __init__(self, url: str, on_event: EventCallback | None) -> None:
        self.url = url
        self.on_event = on_event
        self.fold = fold.Fold(url)
        self.events: list[dict[str, Any]] = []
        self.size = 0

    async def read(self, response: http.Response) -> None:
        """Fold the answer's events up to RUN_FINISHED."""
        if not 200 <= response.status < 300:
            wire.ensure_success(response.status, await response.read(), self.url)
        fold, events = self.fold, self.events
        content_type = response.headers.get("content-type") or "none"
        if "text/event-stream" not in content_type.partition(";")[0]:
            raise errors.AgentProtocolError(
                f"agent at {self.url} did not answer with an SSE event stream "
                f"(content-type {content_type!r}); an AG-UI agent answers text/event-stream"
            )
        decoder = sse.Decoder()
        try:
            async for chunk in response.iter_chunks():
                self.size += len(chunk)
                for message in decoder.feed(chunk):
                    if not message.data:
                        continue  # an empty keep-alive event
                    event = fold.feed(message.data)
                    events.append(event)
                    if self.on_event is not None:
                        outcome = self.on_event(event)
                        if inspect.isawaitable(outcome):
                            await outcome
                    if fold.finished:
                        return  # anything after RUN_FINISHED belongs to no run
        except errors.AgentUnreachable as err:
            raise errors.AgentStreamIncomplete(
                f"agent at {self.url} cut its AG-UI stream after {fold.count} events, "
                f"before RUN_FINISHED: {err.__cause__ or err}"
            ) from err
        raise errors.AgentStreamIncomplete(
            f"agent at {self.url} ended its AG-UI stream after {fold.count} events "
            "without RUN_FINISHED"
        )

    def partial(self) -> partial_mod.Partial:
        """The events folded so far (a message or tool call still open, as it stood)."""
        steps = self.fold.reply_fields()["trajectory"]  # the fold is not read after a timeout
        return partial_mod.of_events(steps, self.fold.count, self.size)


def _run_id(request: AgentRequest) -> str:
    """A turn's AG-UI run id: the run id for the first (a single run's), then numbered."""
    return request.run_id if request.turn == 1 else f"{request.run_id}-{request.turn}"


def _messages(request: AgentRequest) -> list[dict[str, str]]:
    """The conversation so far and this turn's user message, as AG-UI messages with ids
    that stay the same from turn to turn."""
    run_id = request.run_id
    earlier = [
        {"id": f"{run_id}-{i + 1}", "role": m.role, "content": m.content}
        for i, m in enumerate(request.messages)
    ]
    # The prompt's id is a single run's (a conversation's first turn is one).
    this = "prompt" if not request.messages else str(len(request.messages) + 1)
    if earlier:
        earlier[0]["id"] = f"{run_id}-prompt"
    return [*earlier, {"id": f"{run_id}-{this}", "role": "user", "content": request.prompt}]


def _tools(configured: list[Any], offered: list[dict[str, Any]]) -> list[Any]:
    """The config's tools, then the test's; a test's tool replaces a configured one of the
    same name (the case says what this run offers)."""
    names = {t["name"] for t in offered}
    kept = [t for t in configured if not (isinstance(t, dict) and t.get("name") in names)]
    return [*kept, *offered]
