"""What a judge backend is asked: one ``judge()`` call's :class:`JudgeRequest`.

Made by :mod:`.judges` as a test calls ``judge()``, answered by the
:class:`~agent_health.sdk.context.JudgeBackend` the engine installed (``agent_health.judging``).
Its own module, loaded with the first call: a run whose tests judge nothing never makes the
class (a frozen dataclass compiles its generated methods as its module is imported; issue
#40). ``agent_health.sdk.context.JudgeRequest`` names it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_health.sdk.results import Role, RunResult


@dataclass(frozen=True)
class JudgeRequest:
    """Everything a judge backend needs to answer one ``judge()`` call."""

    result: RunResult | None
    text: str | None
    criteria: str
    role: Role
    context: tuple[str, ...]
    tools: tuple[str, ...]
    evaluator: str | None
    model: str | None
    repeat: int
    test_id: str
    options: Mapping[str, Any] = field(default_factory=dict)
    trace: Mapping[str, Any] | None = None
    """The run's telemetry read where the test ran (spans, logs, metrics), for a judge that
    answers elsewhere (a cell's judge service) and cannot read the run's traces itself."""
    expected: str | None = None
    """The expected answer (a case file's ``expectedPPL``): what the judge compares the
    agent's work with; ``None`` when the test gives none."""
