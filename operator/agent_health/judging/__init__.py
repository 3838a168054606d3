"""Judges: the providers behind ``judge()``, the agentic loop, custom evaluators, the cache.

:func:`backend` turns the config's ``judge={...}`` and ``evaluators={...}`` into the
:class:`~agent_health.sdk.context.JudgeBackend` seam; with neither, it gives ``None`` and
the SDK records neutral ``skipped`` verdicts with :data:`NO_JUDGE_HINT`.
"""

from agent_health.judging.asking import Asked
from agent_health.judging.dispatch import NO_JUDGE_HINT, Judging, backend
from agent_health.judging.errors import JudgeCacheWarning
from agent_health.judging.tools import RunResultSource, TracePack, TraceSource
from agent_health.judging.usage import JudgeUsage, summarize

__all__ = [
    "NO_JUDGE_HINT",
    "Asked",
    "JudgeCacheWarning",
    "JudgeUsage",
    "Judging",
    "RunResultSource",
    "TracePack",
    "TraceSource",
    "backend",
    "summarize",
]
