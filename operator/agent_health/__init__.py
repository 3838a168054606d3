"""agent-health: Playwright-style tests for AI agents, run locally or on Kubernetes.

    from agent_health import test, expect, judge, define_config

The package's public surface is the SDK's (:mod:`agent_health.sdk`).
"""

from agent_health.sdk import *  # noqa: F403
from agent_health.sdk import __all__ as __all__
