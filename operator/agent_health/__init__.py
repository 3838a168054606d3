"""agent-health: Playwright-style tests for AI agents, run locally or on Kubernetes.

    from agent_health import test, expect, judge, define_config

The package's public surface is the SDK's (:mod:`agent_health.sdk`), each name loaded when
first read: importing the package costs nothing until then.
"""

from typing import TYPE_CHECKING

from agent_health import faces

# The one place the version is written: pyproject.toml reads it (setuptools' `attr:`), and
# a run's provenance reports it (the code that ran, also from a tree on PYTHONPATH).
__version__ = "0.1.0"

if TYPE_CHECKING:
    from agent_health.sdk import (
        AgentHealthError,
        AgentRunError,
        Config,
        ConfigError,
        Conversation,
        ConversationEnd,
        DefinitionError,
        ExpectationFailed,
        JudgeConfig,
        JudgeError,
        JudgeFailed,
        MatcherUsageError,
        MockMCP,
        RunResult,
        Signal,
        SimulatedUser,
        Step,
        Stop,
        TestAPI,
        TestResult,
        Trajectory,
        Turn,
        Verdict,
        define_config,
        expect,
        judge,
        mock_mcp,
        simulated_user,
        test,
    )
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "AgentHealthError": "sdk",
            "AgentRunError": "sdk",
            "Config": "sdk",
            "ConfigError": "sdk",
            "Conversation": "sdk",
            "ConversationEnd": "sdk",
            "DefinitionError": "sdk",
            "ExpectationFailed": "sdk",
            "JudgeConfig": "sdk",
            "JudgeError": "sdk",
            "JudgeFailed": "sdk",
            "MatcherUsageError": "sdk",
            "MockMCP": "sdk",
            "RunResult": "sdk",
            "Signal": "sdk",
            "SimulatedUser": "sdk",
            "Step": "sdk",
            "Stop": "sdk",
            "TestAPI": "sdk",
            "TestResult": "sdk",
            "Trajectory": "sdk",
            "Turn": "sdk",
            "Verdict": "sdk",
            "define_config": "sdk",
            "expect": "sdk",
            "judge": "sdk",
            "mock_mcp": "sdk",
            "simulated_user": "sdk",
            "test": "sdk",
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
