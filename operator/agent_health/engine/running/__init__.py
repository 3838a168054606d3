"""Running tests: one (test, repeat) with its fixtures, hooks, timeout and teardown
(:mod:`.runner`, :mod:`.fixtures`, what it prints: :mod:`.capture`), many in a session
(:mod:`.session`), and the agent a run starts from its config (:mod:`.agent_process`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.running.agent_process import refuse_credentials, serving
    from agent_health.engine.running.fixtures import asks_for
    from agent_health.engine.running.runner import RunEnv, ready, run_case
    from agent_health.engine.running.session import Halt, Outcome, Policy, plan, run
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "refuse_credentials": "agent_process",
            "serving": "agent_process",
            "asks_for": "fixtures",
            "RunEnv": "runner",
            "ready": "runner",
            "run_case": "runner",
            "Halt": "session",
            "Outcome": "session",
            "Policy": "session",
            "plan": "session",
            "run": "session",
        },
    )

__all__ = [
    "Halt",
    "Outcome",
    "Policy",
    "RunEnv",
    "asks_for",
    "plan",
    "ready",
    "refuse_credentials",
    "run",
    "run_case",
    "serving",
]
