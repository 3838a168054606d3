"""A local run's OTLP receiver: the spans of agents it starts, joined to their runs.

When a run starts its agent (``command`` in the agent's config), it listens for OTLP/HTTP on
a free port of 127.0.0.1 and tells the agent in ``OTEL_EXPORTER_OTLP_ENDPOINT``; with
``traces={"otlp": {"listen": "HOST:PORT"}}`` it listens there for any agent. It is the
gateway's receiver (:mod:`agent_health.gateway.otlp`: the same bounds, answers and counts),
and, as a cell's gateway learns a run's trace from the controller's call, the engine tells
it each run's trace id just before it calls the agent (:meth:`LocalReceiver.expecting`).
The spans it keeps are ``result.traces`` of their run (source ``otel``), fill in what the
agent's reply left unreported (its trajectory, its token usage: :class:`Joined`) and are
sealed into the run's ledger cell with its exchanges.

Nothing of this is imported by a run that does not turn it on: the server side of aiohttp
and the gateway package load here, and the protobuf decoder only when a protobuf body comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from agent_health import connectors
from agent_health.connectors.protocol import AgentReply, AgentRequest
from agent_health.sdk import context, errors, tracesconfig
from agent_health.traces import errors as traces_errors
from agent_health.traces import traceparent as traceparent_mod

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OWN_ENDPOINTS = (ENDPOINT_ENV, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Variables by which the user's environment already tells an agent where spans go."""

if TYPE_CHECKING:
    from aiohttp import web

    from agent_health.gateway import otlp
    from agent_health.ledger.records import SpansRecord


class LocalReceiver:
    """The OTLP/HTTP listener of one local run (an async context manager).

    Its socket listens at once (the agent is told its address and may connect at once: the
    connection waits in the socket's backlog); the server side — aiohttp's and the gateway's
    modules, about a tenth of a second of imports — loads in a thread while the agent starts,
    and the first call of the agent waits for it (:meth:`ready`).
    """

    def __init__(
        self,
        cfg: tracesconfig.OtlpSettings,
        on_kept: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.on_kept = on_kept
        self.url: str | None = None
        self.collector: otlp.Collector | None = None
        self._socket: socket.socket | None = None
        self._serving: asyncio.Future[web.ServerRunner] | None = None

    async def __aenter__(self) -> LocalReceiver:
        host, _, port = (self.cfg.listen or "127.0.0.1:0").rpartition(":")
        try:
            self._socket = socket.create_server((host, int(port)))
        except OSError as err:
            raise errors.ConfigError(
                f"traces.otlp: cannot listen on {host}:{port}: {err.strerror or err}"
            ) from err
        self.url = f"http://{host}:{self._socket.getsockname()[1]}"
        self._serving = asyncio.ensure_future(self._serve(self._socket))
        return self

    async def _serve(self, listening: socket.socket) -> web.ServerRunner:
        await asyncio.to_thread(_load)  # off the loop, beside the agent's own start
        from aiohttp import web

        from agent_health.gateway import otlp
        from agent_health.ledger import records

        observe = self.on_kept

        def kept(spans: SpansRecord) -> None:
            if observe is not None:  # the local ledger seals JSON objects
                observe(spans.run_id, records.to_object(spans, with_mac=False))

        self.collector = otlp.Collector(
            otlp.Limits(max_body_bytes=self.cfg.max_body_bytes, max_spans=self.cfg.max_spans),
            on_kept=kept,
        )
        server = web.Server(otlp.Receiver(self.collector), **otlp.SERVER_OPTIONS)
        runner = web.ServerRunner(server, shutdown_timeout=1)
        await runner.setup()
        await web.SockSite(runner, listening).start()
        return runner

    async def ready(self) -> None:
        """Wait until the receiver serves (its first caller waits for the imports)."""
        if self._serving is not None:
            await asyncio.shield(self._serving)

    async def __aexit__(self, *exc: object) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            if not serving.done():
                serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(serving, return_exceptions=True)
            if serving.done() and not serving.cancelled() and serving.exception() is None:
                await serving.result().cleanup()
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def env(self, given: Collection[str]) -> dict[str, str]:
        """What the agent is told: where to export (its SDK appends ``/v1/traces``) — unless
        the variables its config's ``env`` gives it (``given``) already say where (the
        user's own collector wins)."""
        if not self.url or any(name in given for name in OWN_ENDPOINTS):
            return {}
        return {ENDPOINT_ENV: self.url}

    def expecting(self, call: context.AgentCaller) -> context.AgentCaller:
        """``call``, telling the receiver each run's trace id before the agent is sent it,
        and filling what the reply left unreported from the spans (:class:`Joined`)."""

        async def expect(request: AgentRequest) -> None:
            await self.ready()
            if self.collector is not None:
                self.collector.expect(
                    request.run_id, traceparent_mod.trace_id_of(request.traceparent)
                )

        return Joined(call, self.read, expect)

    async def read(self, run_id: str) -> Mapping[str, Any] | None:
        """The receiver's report of ``run_id`` (a ``traces.received.SpansReader``)."""
        await self.ready()
        return self.collector.report(run_id) if self.collector is not None else None

    def summary(self) -> dict[str, Any]:
        return self.collector.summary()["otlp"] if self.collector is not None else {}


class Joined:
    """An agent caller whose replies get what they left unreported (trajectory, token usage)
    from the spans of their run that ``read`` has when the agent answered
    (:mod:`agent_health.traces.fromspans`); ``before`` runs before each call.

    It holds conversations when the connector behind ``call`` does (the SDK asks, see
    ``connectors.base.conversations_of``), and a turn is filled only from the spans that came
    since the turn before: each turn's reply is its own.
    """

    def __init__(
        self,
        call: context.AgentCaller,
        read: Callable[[str], Awaitable[Mapping[str, Any] | None]],
        before: Callable[[AgentRequest], Awaitable[None]] | None = None,
    ) -> None:
        self._call = call
        self._read = read
        self._before = before
        self._used: OrderedDict[str, int] = OrderedDict()  # run id → spans already read
        owner = getattr(call, "__self__", call)
        self.holds_conversations = getattr(owner, "holds_conversations", False) is True
        end = getattr(owner, "end_conversation", None)
        self.end_conversation = end if callable(end) else None

    async def __call__(self, request: AgentRequest) -> AgentReply:
        if self._before is not None:
            await self._before(request)
        reply = await self._call(request)
        if not reply.unreported:
            return reply
        try:
            report = await self._read(request.run_id)
        except traces_errors.TracesError:
            return reply  # the reply stands as the agent sent it; traces say why on reading
        found = list((report or {}).get("spans") or ())
        used = self._used.pop(request.run_id, 0)
        self._used[request.run_id] = len(found)
        while len(self._used) > MAX_RUNS_READ:
            self._used.popitem(last=False)
        if len(found) <= used:
            return reply
        from agent_health.traces import fromspans, received

        try:
            return fromspans.fill(reply, [received.to_span(s) for s in found[used:]])
        except Exception as err:
            # The receiver checked every span; should one still trip the filling, it is the
            # agent's account that could not be read: its error, never the test's.
            raise connectors.AgentProtocolError(
                f"the agent's OTel spans could not fill in what its reply left out: {err}"
            ) from err


async def gateway_spans(
    client: Any, records_url: str, headers: Mapping[str, str], run_id: str
) -> Mapping[str, Any] | None:
    """What a cell gateway's OTLP receiver kept for ``run_id``, asked on its admin listener
    (``GET /otlp/spans`` beside ``/ledger/records``) with the controller's token; ``None``
    when the gateway receives none (409: no ``--otlp-listen``)."""
    import httpx  # the cell's admin client is one

    url = records_url.removesuffix("/ledger/records") + "/otlp/spans"
    try:
        response = await client.get(url, params={"run_id": run_id}, headers=dict(headers))
    except httpx.HTTPError as err:
        raise traces_errors.TracesBackendError(
            f"cannot reach the gateway's OTLP receiver at {url}: {err}"
        ) from err
    if response.status_code == 409:
        return None
    if not response.is_success:
        raise traces_errors.TracesBackendError(
            f"the gateway answered {response.status_code} for the spans of run {run_id}: "
            f"{response.text[:300]}"
        )
    report: Mapping[str, Any] = response.json()
    return report


MAX_RUNS_READ = 1024
"""Runs whose count of spans read is remembered (a conversation's turns)."""


def _load() -> None:
    """Import what serving needs (the modules stay loaded for :meth:`LocalReceiver._serve`)."""
    for name in ("aiohttp.web", "agent_health.gateway.otlp", "agent_health.ledger.records"):
        importlib.import_module(name)
