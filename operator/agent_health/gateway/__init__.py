"""The gateway sidecar: one recording proxy every exchange of a cell passes through.

One listener per route (``controller → target``, ``target → peer:NAME``,
``controller → judge``; see :mod:`~agent_health.gateway.config`) streams each call to its
upstream (:mod:`~agent_health.gateway.proxy`) and records it as a ledger ``exchange``
(:mod:`~agent_health.gateway.recorder`): who called (proven by a per-principal token, else
the target), when, status, sizes, body hashes and token usage, chained with the HMAC key
only the gateway holds. :mod:`~agent_health.gateway.server` starts and stops the listeners;
:mod:`~agent_health.gateway.admin` serves ``/healthz`` and the controller's record appends.
The target shares localhost with every listener: :mod:`~agent_health.gateway.guard` holds
each to its limits (request heads, header timeout, connections, calls without a token, admin
body size) and records every refused call in the ledger as an exchange to ``gateway``.

``agent-health run`` records its peers through the same proxy in-process
(:class:`~agent_health.gateway.server.RouteListener`), so a local run's ledger has the shape
of a cell's. This package imports only :mod:`agent_health.ledger`, so the sidecar
image stays small.
"""

from agent_health.gateway.config import (
    RUN_ID_HEADER,
    TOKEN_HEADER,
    VIA_HEADER,
    Route,
    Settings,
    Tokens,
    parse_route,
    token_id,
)
from agent_health.gateway.errors import GatewayConfigError, GatewayError, RecordingError
from agent_health.gateway.recorder import Open, Recorder, Sink
from agent_health.gateway.server import Gateway, RouteListener, serve

__all__ = [
    "RUN_ID_HEADER",
    "TOKEN_HEADER",
    "VIA_HEADER",
    "Gateway",
    "GatewayConfigError",
    "GatewayError",
    "Open",
    "Recorder",
    "RecordingError",
    "Route",
    "RouteListener",
    "Settings",
    "Sink",
    "Tokens",
    "parse_route",
    "serve",
    "token_id",
]
