"""How ``agent.run()`` reaches an agent.

A connector turns an :class:`~agent_health.connectors.protocol.AgentRequest` into an
:class:`~agent_health.connectors.protocol.AgentReply`. Connectors are a leaf layer: they
know the wire protocols and nothing of tests, judges or the cluster.
"""

from agent_health.connectors.base import Connector, ConnectorSpec, create, known, register
from agent_health.connectors.errors import AgentProtocolError, AgentTimeout, ConnectorError
from agent_health.connectors.protocol import AgentReply, AgentRequest, Step, TokenUsage

__all__ = [
    "AgentProtocolError",
    "AgentReply",
    "AgentRequest",
    "AgentTimeout",
    "Connector",
    "ConnectorError",
    "ConnectorSpec",
    "Step",
    "TokenUsage",
    "create",
    "known",
    "register",
]
