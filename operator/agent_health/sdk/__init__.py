"""What test files import. Nothing here imports the engine, the cluster or kopf."""

from agent_health.connectors.protocol import Step
from agent_health.sdk.config import Config, JudgeConfig, define_config
from agent_health.sdk.declare import TestAPI, test
from agent_health.sdk.errors import (
    AgentHealthError,
    AgentRunError,
    ConfigError,
    DefinitionError,
    ExpectationFailed,
    JudgeError,
    JudgeFailed,
    MatcherUsageError,
)
from agent_health.sdk.judges import judge
from agent_health.sdk.matchers import expect
from agent_health.sdk.mcpmock import MockMCP, mock_mcp
from agent_health.sdk.results import RunResult, Signal, TestResult, Trajectory, Verdict
from agent_health.sdk.simulated import SimulatedUser, simulated_user
from agent_health.sdk.turns import Conversation, ConversationEnd, Stop, Turn

__all__ = [
    "AgentHealthError",
    "AgentRunError",
    "Config",
    "ConfigError",
    "Conversation",
    "ConversationEnd",
    "DefinitionError",
    "ExpectationFailed",
    "JudgeConfig",
    "JudgeError",
    "JudgeFailed",
    "MatcherUsageError",
    "MockMCP",
    "RunResult",
    "Signal",
    "SimulatedUser",
    "Step",
    "Stop",
    "TestAPI",
    "TestResult",
    "Trajectory",
    "Turn",
    "Verdict",
    "define_config",
    "expect",
    "judge",
    "mock_mcp",
    "simulated_user",
    "test",
]
