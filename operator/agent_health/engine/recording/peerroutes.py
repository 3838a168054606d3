"""A local run's peers, each behind the proxy a cell's gateway runs, recorded in its test's cell.

In a cell every call the target makes to a peer passes the gateway sidecar. Locally the run
does the same in-process: for each peer of the config (``peers={...}``,
:class:`~agent_health.sdk.config.PeerSpec`) it starts a listener on loopback
(:class:`~agent_health.gateway.RouteListener`) forwarding to the peer — an HTTP server's
``url``, or a stdio MCP server's ``command`` run behind the bridge
(:class:`~agent_health.peers.Bridge`) — and tells the agents it starts where, in
``AGENT_HEALTH_PEER_<NAME>_URL``. The listener records each exchange, and each MCP call of a
``protocol: mcp`` peer, into the cell of the test that made it (:meth:`.LocalLedger.peer_sink`).

A test's own MCP server (the ``mock_mcp`` fixture's) gets a listener of its own
(:meth:`Peers.route`), bound to that test's cell whatever run id its calls carry.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent_health.sdk import config, errors

if TYPE_CHECKING:
    from agent_health import gateway, peers
    from agent_health.engine.recording import recording


LISTEN = "127.0.0.1:0"
"""Where a peer's listener binds unless its config says (a free loopback port)."""


class Route:
    """A listener in front of one peer; :attr:`url` is what the agent calls."""

    def __init__(self, listener: gateway.RouteListener, url: str) -> None:
        self.listener = listener
        self.url = url

    async def close(self) -> None:
        await self.listener.stop()


async def open_route(
    name: str,
    url: str,
    *,
    protocol: str,
    sink: gateway.Sink | None,
    listen: str = "127.0.0.1:0",
) -> Route:
    """A started listener from the target to ``peer:NAME`` at ``url``: the URL to call it by
    is the listener's with ``url``'s path (``/mcp``), forwarded to ``url`` unchanged."""
    from agent_health import gateway

    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    route = gateway.parse_route(
        f"principal=target,to=peer:{name},listen={listen},upstream={origin},protocol={protocol}"
    )
    listener = gateway.RouteListener(route, sink)
    base = await listener.start()
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return Route(listener, base + path)


class Peers:
    """The config's peers for one run (an async context manager): bridges started, each
    behind its listener; :meth:`env` names them for the agents the run starts."""

    def __init__(
        self,
        specs: Mapping[str, config.PeerSpec],
        ledger: recording.LocalLedger | None,
    ) -> None:
        self.specs = dict(specs)
        self.ledger = ledger
        self.urls: dict[str, str] = {}
        self._bridges: list[peers.Bridge] = []
        self._routes: list[Route] = []

    async def __aenter__(self) -> Peers:
        if not self.specs:
            return self  # nothing to start: a run without peers loads neither package
        from agent_health import gateway, peers

        try:
            for name, spec in self.specs.items():
                try:
                    url = spec.url or await self._bridge(spec)
                    sink = self.ledger.peer_sink() if self.ledger is not None else None
                    listen = spec.listen or LISTEN
                    route = await open_route(
                        name, url, protocol=spec.protocol, sink=sink, listen=listen
                    )
                except (gateway.GatewayError, peers.PeerError) as err:
                    raise errors.ConfigError(f"peers.{name}: {err}") from err
                self._routes.append(route)
                self.urls[name] = route.url
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _bridge(self, spec: config.PeerSpec) -> str:
        from agent_health.connectors import environment
        from agent_health.peers import Bridge

        assert spec.command is not None
        # As an agent the run starts: the allow-listed variables and the peer's own env,
        # never agent-health's (its judge key, ledger key, OTLP headers).
        env = environment.started(spec.env, os.environ)
        command = list(spec.command)
        if command[0] in ("python", "python3"):
            command[0] = sys.executable  # the interpreter agent-health runs in, as for agents
        bridge = Bridge(command, env=env, cwd=spec.cwd)
        self._bridges.append(bridge)
        return await bridge.start()

    async def __aexit__(self, *exc: object) -> None:
        for route in self._routes:
            with contextlib.suppress(Exception):
                await route.close()
        for bridge in self._bridges:
            await bridge.stop()
        self._routes, self._bridges = [], []

    def env(self) -> dict[str, str]:
        """``AGENT_HEALTH_PEER_<NAME>_URL`` of each peer, for the agents the run starts."""
        return {config.peer_url_env(name): url for name, url in self.urls.items()}

    async def route(self, name: str, url: str, *, run_id: str, protocol: str = "mcp") -> Route:
        """A listener of its own in front of a test's server at ``url``, recording into the
        test's cell (``run_id``)."""
        sink = self.ledger.peer_sink(run_id) if self.ledger is not None else None
        return await open_route(name, url, protocol=protocol, sink=sink)
