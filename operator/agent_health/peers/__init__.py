"""MCP servers agent-health runs for a test: a stdio server behind HTTP, and a mock.

* :mod:`~agent_health.peers.bridge` — a stdio MCP server's command served over MCP's
  Streamable HTTP transport, one process per session, so a gateway in front of it records
  its calls as for any HTTP MCP server;
* :mod:`~agent_health.peers.mock` — a mock MCP server: declared tools with canned answers,
  functions, errors, delays and decoys, every call on record;
* :mod:`~agent_health.peers.streamable` — the server side of that transport both speak.

This package imports only :mod:`agent_health.ledger` (its strict JSON), so a peer's image
needs no more than the gateway's.
"""

from agent_health.peers.bridge import Bridge
from agent_health.peers.errors import PeerConfigError, PeerError
from agent_health.peers.mock import Call, MockServer, Running, Tool

__all__ = ["Bridge", "Call", "MockServer", "PeerConfigError", "PeerError", "Running", "Tool"]
