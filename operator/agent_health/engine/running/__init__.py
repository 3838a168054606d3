"""Running tests: one (test, repeat) with its fixtures, hooks, timeout and teardown
(:mod:`.runner`, :mod:`.fixtures`, what it prints: :mod:`.capture`), many in a session
(:mod:`.session`), the agent a run starts from its config (:mod:`.agent_process`), and a
run's live feed to ``agent-health serve`` with the wire models the server reads
(:mod:`.livefeed`; where it goes, asked by every run: :mod:`.feedtarget`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.running.agent_process import refuse_credentials, serving
    from agent_health.engine.running.feedtarget import ENV as SERVE_ENV
    from agent_health.engine.running.feedtarget import TOKEN_ENV as SERVE_TOKEN_ENV
    from agent_health.engine.running.feedtarget import FeedError
    from agent_health.engine.running.feedtarget import url_from as feed_url
    from agent_health.engine.running.fixtures import asks_for
    from agent_health.engine.running.livefeed import PATH as LIVE_PATH
    from agent_health.engine.running.livefeed import Batch as LiveBatch
    from agent_health.engine.running.livefeed import Begun as LiveBegun
    from agent_health.engine.running.livefeed import Ended as LiveEnded
    from agent_health.engine.running.livefeed import Feed, LiveResult, Tee
    from agent_health.engine.running.livefeed import Finished as LiveFinished
    from agent_health.engine.running.livefeed import Started as LiveStarted
    from agent_health.engine.running.runner import RunEnv, ready, run_case
    from agent_health.engine.running.session import Halt, Outcome, Policy, plan, run
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "refuse_credentials": "agent_process",
            "serving": "agent_process",
            "asks_for": "fixtures",
            "SERVE_ENV": "feedtarget:ENV",
            "LIVE_PATH": "livefeed:PATH",
            "SERVE_TOKEN_ENV": "feedtarget:TOKEN_ENV",
            "LiveBatch": "livefeed:Batch",
            "LiveBegun": "livefeed:Begun",
            "LiveEnded": "livefeed:Ended",
            "Feed": "livefeed",
            "FeedError": "feedtarget",
            "LiveResult": "livefeed",
            "Tee": "livefeed",
            "LiveFinished": "livefeed:Finished",
            "LiveStarted": "livefeed:Started",
            "feed_url": "feedtarget:url_from",
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
    "LIVE_PATH",
    "SERVE_ENV",
    "SERVE_TOKEN_ENV",
    "Feed",
    "FeedError",
    "Halt",
    "LiveBatch",
    "LiveBegun",
    "LiveEnded",
    "LiveFinished",
    "LiveResult",
    "LiveStarted",
    "Outcome",
    "Policy",
    "RunEnv",
    "Tee",
    "asks_for",
    "feed_url",
    "plan",
    "ready",
    "refuse_credentials",
    "run",
    "run_case",
    "serving",
]
