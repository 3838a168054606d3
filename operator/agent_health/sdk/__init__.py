"""What test files import: ``test``, ``expect``, ``judge``, ``define_config``, the result
models, a conversation's turns, the simulated user, the mock MCP server. Nothing here imports
the engine, the cluster or kopf.

Each name loads from its module when first read (:mod:`agent_health.faces`): a test file that
imports ``test`` loads the declarations and nothing else, so ``agent-health list`` never
builds a result model (``tests/test_cli_imports.py`` holds it so).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
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
    from agent_health.sdk.results import RunResult, Signal, Step, TestResult, Trajectory
    from agent_health.sdk.simulated import SimulatedUser, simulated_user
    from agent_health.sdk.turns import Conversation, ConversationEnd, Stop, Turn
    from agent_health.sdk.verdict import Verdict
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "Config": "config",
            "JudgeConfig": "config",
            "define_config": "config",
            "TestAPI": "declare",
            "test": "declare",
            "AgentHealthError": "errors",
            "AgentRunError": "errors",
            "ConfigError": "errors",
            "DefinitionError": "errors",
            "ExpectationFailed": "errors",
            "JudgeError": "errors",
            "JudgeFailed": "errors",
            "MatcherUsageError": "errors",
            "judge": "judges",
            "expect": "matchers",
            "MockMCP": "mcpmock",
            "mock_mcp": "mcpmock",
            "RunResult": "results",
            "Signal": "results",
            "Step": "results",
            "TestResult": "results",
            "Trajectory": "results",
            "Verdict": "verdict",
            "SimulatedUser": "simulated",
            "simulated_user": "simulated",
            "Conversation": "turns",
            "ConversationEnd": "turns",
            "Stop": "turns",
            "Turn": "turns",
        },
    )

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
