"""What the history's queries answer, as typed values: what the ``history`` command, the
history page and the server show. A page, a CI reporter or a server renders these
(``model_dump`` for JSON) without SQL; what a recording is told and writes is :mod:`.facts`'.

* :class:`Run` — one recorded run (an agent matrix records one per agent, linked by
  ``group``), with its :class:`Trend` against the previous run of the same agent.
* :class:`TestHistory` — one test across runs: each :class:`Outcome`, and for its latest
  break the :class:`Break` (last passing and first failing run, and what differed).
* :class:`Flaky` — a test whose outcome flips while neither the agent nor the test changed.
* :class:`Regression` — a test that passed in a run and not in the next run of that agent.
* :class:`Grid` — the newest runs (each a :class:`Column`, with its tests' :class:`Latency`)
  × the tests they ran (each a :class:`Row` of one character per run): the history page.
* :class:`Result` — one (test, repeat) of one run, with the test's identity: a page of a
  run's results (:class:`Results`).

A module apart from :mod:`.facts` because recording a run never makes one of these: the
run's history (``agent-health run``) neither imports this module nor makes its fifteen
classes (its line reads the pass rates it shows: :func:`.trends.rates`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health.history import facts


class Interval(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    low: float
    high: float


class Trend(BaseModel):
    """A run's pass rate against the previous run of the same agent (and suite), by the paired
    test ``compare`` uses (:mod:`agent_health.engine.statistics.pairing`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    previous: str = Field(description="the previous run's uid")
    effect: float = Field(description="change in pass rate over the paired tests")
    p_value: float
    method: str
    tests: int = Field(description="tests decided in both runs")
    mark: facts.Mark | None = Field(
        default=None, description="better or worse when significant at α = 0.05; else None"
    )


class Run(BaseModel):
    """One recorded run of one agent."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    uid: str
    group: str | None = Field(default=None, description="an agent matrix: shared by its runs")
    source: facts.Source
    agent: facts.Agent | None
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
    ci: facts.CI | None
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


class Outcome(BaseModel):
    """One (test, repeat) in one run."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run: str = Field(description="the run's uid")
    started_at: datetime
    agent: str | None
    repeat: int
    status: str
    cause: str | None
    score: float | None
    duration_ms: int
    tokens: int | None
    cost_usd: float | None
    content_hash: str | None
    quarantined: bool = False
    turns: int | None = None
    ended: str | None = None
    messages: list[str] = Field(default_factory=list, description="error and failed gates")


class Difference(BaseModel):
    """One thing that differed between the last passing and the first failing run."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    what: Literal[
        "agent image", "agent version", "agent", "suite commit", "test content", "judge model"
    ]
    before: str | None
    after: str | None


class Break(BaseModel):
    """A test's latest break: where it last passed, where it first failed, what differed."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    last_pass: Outcome
    first_fail: Outcome
    differences: list[Difference] = Field(
        description="agent image or version, suite commit, the test's content hash, judge "
        "model — empty when none of them changed (the agent's answer did)"
    )


class TestHistory(BaseModel):
    """One test across runs, oldest first."""

    __test__ = False
    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    title: str
    file: str
    line: int
    labels: list[str]
    outcomes: list[Outcome]
    broke: Break | None = Field(
        default=None, description="its latest break, when its newest outcome is not a pass"
    )


class Flaky(BaseModel):
    """A test whose outcome flipped across runs of one agent identity and one version of the
    test; ranked by flips, then by how near its failure rate is to a coin's."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    title: str
    agent: facts.Agent | None
    content_hash: str | None
    runs: int = Field(description="runs of this agent and test version in the window")
    decided: int = Field(description="results that passed or failed (the rate's denominator)")
    failures: int
    flips: int = Field(description="changes between pass and not-pass, in run order")
    failure_rate: float
    failure_rate_interval: Interval = Field(description="Wilson, 95%")
    last_status: str


class Regression(BaseModel):
    """A test that passed in one run and failed or errored in the next run of that agent."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    title: str
    run: str
    previous: str
    started_at: datetime
    agent: str | None
    status: str
    cause: str | None
    messages: list[str]
    changed: bool = Field(description="the test's content hash changed between the two runs")


CELLS: dict[str, str] = {
    "passed": "P",
    "flaky": "K",
    "failed": "F",
    "errored": "E",
    "skipped": "S",
}
"""A grid cell's character for each status; an error of another cause than the agent (the
judge, the test, the infrastructure) is ``X``, a test a run did not run ``.``."""
OTHER_ERROR, ABSENT = "X", "."
WORST_FIRST = "FEXKPS"
"""Repeats of a test in one run make one cell: the first of these any of them has."""


class Latency(BaseModel):
    """How long a run's tests took, one result each (a run's own duration is its
    :attr:`Run.duration_ms`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    mean_ms: float
    p50_ms: float
    p90_ms: float


class Column(BaseModel):
    """One run of a :class:`Grid`."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run: Run
    latency: Latency | None = Field(description="its tests' durations; None: no result")


class Row(BaseModel):
    """One test of a :class:`Grid`: its outcome in each run, one character per column."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    title: str
    file: str
    line: int
    labels: list[str]
    cells: str = Field(
        description="one character per column, oldest run first: P passed, K flaky, F "
        "failed, E errored by the agent, X errored for another cause, S skipped, . not run; "
        "a test's repeats in a run make one cell, the worst of them (F E X K P S)"
    )


class Grid(BaseModel):
    """The newest runs × the tests they ran: what the history page draws."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    columns: list[Column] = Field(description="the runs, oldest first")
    rows: list[Row] = Field(description="every test any of the runs ran, by id")


class Result(BaseModel):
    """One (test, repeat) of one run, as a run's page lists it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str = Field(description="the test's stable id")
    title: str
    file: str
    line: int
    labels: list[str]
    repeat: int
    status: str
    cause: str | None
    score: float | None
    duration_ms: int
    tokens: int | None
    cost_usd: float | None
    content_hash: str | None
    quarantined: bool = False
    turns: int | None = None
    ended: str | None = None
    messages: list[str] = Field(default_factory=list, description="error and failed gates")


class Results(BaseModel):
    """A page of one run's results, in test id then repeat order."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run: str = Field(description="the run's uid")
    total: int = Field(description="results of the run that match the filter")
    offset: int
    results: list[Result]
