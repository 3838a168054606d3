"""What the history knows of runs, as typed values: what a recording is told beside its
report and what it wrote, and a recorded run as the queries answer it. A page, a CI reporter
or a server renders these (``model_dump`` for JSON) without SQL; what the history knows of
tests' outcomes across runs is :mod:`.outcomes`'.

* :class:`RunContext` — what a run's report does not hold: where it was recorded from, its
  exit code, its CI job, where its report is, whether its ledger verified.
* :class:`Recorded` — one run a recording wrote.
* :class:`Run` — one recorded run (an agent matrix records one per agent, linked by
  ``group``), with its :class:`Trend` against the previous run of the same agent.

Each model is built on first use (``defer_build``): a run records itself and prints its
history line building only what it makes (the context, what it recorded, its agent).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Source = Literal["local", "ci", "operator"]
Mark = Literal["better", "worse"]
Ending = Literal["green", "failed", "errored", "incomplete"]
"""How a run ended, for filtering runs: ``green`` passed whole (as ``last-green``),
``failed`` had a failed test or one the agent errored, ``errored`` only other errors,
``incomplete`` was interrupted or stopped by a budget."""


def short(uid: str) -> str:
    """A run's uid as tables and pages show it: its random part (``f3686ba2``); any unique
    part of a uid names the run where one is asked for."""
    head = uid.split("/", 1)[0]
    return head.rsplit("-", 1)[-1][:12]


class CI(BaseModel):
    """The CI job a run was part of, from the CI system's standard variables."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    provider: str = Field(description="github-actions, gitlab-ci, jenkins, buildkite")
    url: str | None = Field(default=None, description="the job's (or pipeline's) page")
    job: str | None = None
    commit: str | None = None
    branch: str | None = None
    pr: str | None = Field(default=None, description="the pull/merge request's number")


class RunContext(BaseModel):
    """What a recording is told beside the report (the report does not hold it)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: Source = "local"
    uid: str | None = Field(
        default=None,
        description="the run's id when the report has none (the operator: the EvaluationRun's "
        "uid); else provenance.run_id, else one derived from the report's content",
    )
    suite: str | None = Field(
        default=None,
        description="which suite this is, for baselines: its folder within git, or "
        "NAMESPACE/RUNSPEC in a cluster",
    )
    exit_code: int | None = None
    report_path: str | None = Field(default=None, description="where its JSON report was written")
    ledger_verified: bool | None = Field(
        default=None, description="whether its ledger's HMAC chain verified; None: not checked"
    )
    ci: CI | None = None
    agent_versions: dict[str, str] = Field(
        default_factory=dict,
        description="the version each agent reports, by agent name ('' for a run's only agent)",
    )
    started_at: datetime | None = Field(
        default=None, description="when the report does not say (a version 1 report)"
    )
    attempt: int = Field(
        default=0,
        ge=0,
        description="which attempt of the run this is: 0 its first; N after an EvaluationRun's "
        "errored cells were requeued N times. A later attempt of a run already recorded "
        "replaces its results; the same or an earlier one is left as it was",
    )


class Recorded(BaseModel):
    """One run a recording wrote (or found already there: ``new`` is false)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    uid: str
    agent: str | None
    new: bool
    results: int
    attempt: int = 0
    replaced: int | None = Field(
        default=None, description="the earlier attempt whose results this one replaced"
    )


class Interval(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    low: float
    high: float


class Agent(BaseModel):
    """An agent's identity: a change in any field is a different agent for flakiness."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str | None = None
    connector: str | None = None
    url: str | None = None
    command: list[str] | None = None
    image: str | None = Field(default=None, description="the pinned image digest (cells)")
    version: str | None = Field(default=None, description="the version the agent reports")

    @property
    def label(self) -> str:
        """How the agent is named on one line."""
        return self.name or self.url or (" ".join(self.command) if self.command else "?")


class Trend(BaseModel):
    """A run's pass rate against the previous run of the same agent (and suite), by the paired
    test ``compare`` uses (:mod:`agent_health.engine.statistics.pairing`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    previous: str = Field(description="the previous run's uid")
    effect: float = Field(description="change in pass rate over the paired tests")
    p_value: float
    method: str
    tests: int = Field(description="tests decided in both runs")
    mark: Mark | None = Field(
        default=None, description="better or worse when significant at α = 0.05; else None"
    )


class Run(BaseModel):
    """One recorded run of one agent."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    uid: str
    group: str | None = Field(default=None, description="an agent matrix: shared by its runs")
    source: Source
    agent: Agent | None
    suite: str | None
    suite_hash: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_ms: float | None
    exit_code: int | None
    interrupted: bool
    budget_stop: str | None = Field(description="the budget limit that stopped it, if one did")
    stopped: str | None
    total: int
    passed: int
    failed: int
    errored: int
    skipped: int
    flaky: int
    not_run: int
    errored_by_cause: dict[str, int]
    pass_rate: float | None
    pass_rate_interval: Interval | None
    score: float | None
    score_interval: Interval | None
    tokens: int | None
    cost_usd: float | None
    repeats: int
    selection: dict[str, Any] = Field(default_factory=dict, description="grep, labels, shard")
    git_commit: str | None
    git_branch: str | None
    git_dirty: bool | None
    judge_provider: str | None
    judge_model: str | None
    ci: CI | None
    report_path: str | None
    ledger_url: str | None
    ledger_verified: bool | None
    agent_health_version: str | None
    config_hash: str | None
    trend: Trend | None = None
    attempt: int = Field(
        default=0,
        description="the attempt its results are: 0 the first; N after its errored cells "
        "were requeued N times (an EvaluationRun's spec.requeueErrored)",
    )

    @property
    def incomplete(self) -> bool:
        """Interrupted or stopped by a budget: what finished was recorded, not every test."""
        return self.interrupted or self.budget_stop is not None
