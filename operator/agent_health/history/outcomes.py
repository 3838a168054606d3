"""What the history knows of tests' outcomes across runs, as typed values: what the
``history`` command's queries, the history page and the server answer. A page, a CI reporter
or a server renders these (``model_dump`` for JSON) without SQL; runs are :mod:`.facts`'.

* :class:`TestHistory` — one test across runs: each :class:`Outcome`, and for its latest
  break the :class:`Break` (last passing and first failing run, and what differed).
* :class:`Flaky` — a test whose outcome flips while neither the agent nor the test changed.
* :class:`Regression` — a test that passed in a run and not in the next run of that agent.
* :class:`Grid` — the newest runs (each a :class:`Column`, with its tests' :class:`Latency`)
  × the tests they ran (each a :class:`Row` of one character per run): the history page.
* :class:`Result` — one (test, repeat) of one run, with the test's identity: a page of a
  run's results (:class:`Results`).

A module apart from :mod:`.facts` because recording a run never makes one of these: the
run's history (``agent-health run``) neither imports it nor makes its twelve classes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health.history import facts


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
    failure_rate_interval: facts.Interval = Field(description="Wilson, 95%")
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
    :attr:`.facts.Run.duration_ms`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    mean_ms: float
    p50_ms: float
    p90_ms: float


class Column(BaseModel):
    """One run of a :class:`Grid`."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run: facts.Run
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
