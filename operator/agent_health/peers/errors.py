"""Errors raised by the MCP peers agent-health runs (the bridge, the mock server).

::

    PeerError                  a peer cannot start or serve
     └── PeerConfigError       its command, tools or address are wrong

What a client sends a running peer is never an exception: it is answered with a JSON-RPC
error (and a tool call the mock does not know fails the test that owns it).
"""


class PeerError(Exception):
    """A peer cannot start or serve."""


class PeerConfigError(PeerError):
    """A peer's command, tools or listen address are wrong."""
