"""Judges: the providers behind ``judge()``, their prompts, and the backend the engine installs.

:func:`backend` turns the config's ``judge={...}`` into the
:class:`~agent_health.sdk.context.JudgeBackend` seam; no judge configured gives ``None``
and the SDK records neutral ``skipped`` verdicts with :data:`NO_JUDGE_HINT`.
"""

from agent_health.judging.backend import NO_JUDGE_HINT, LLMJudge, backend

__all__ = ["NO_JUDGE_HINT", "LLMJudge", "backend"]
