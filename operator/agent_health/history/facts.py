"""What a recording is told and what it writes, as typed values: the context a run's report
does not hold, the run it recorded, the agent's identity. What the queries answer (a
recorded run, tests across runs) is :mod:`.answers`'.

* :class:`RunContext` — what a run's report does not hold: where it was recorded from, its
  exit code, its CI job (:class:`CI`), where its report is, whether its ledger verified.
* :class:`Recorded` — one run a recording wrote (or found there already).
* :class:`Agent` — an agent's identity, as a run's row refers to it.

Apart from :mod:`.answers` because ``agent-health run`` records its run and prints its
history line with these alone: it neither imports the answers nor makes their classes.
Each model is built on first use (``defer_build``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

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
