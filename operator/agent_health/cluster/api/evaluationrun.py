"""EvaluationRun: *one execution* of a RunSpec — repeats, parallelism, selection, retries.

The spec is a record once created, like a Job's, except what steers a run while it runs
(:data:`STEERABLE`: ``suspend``, ``parallelism``, ``budget``, ``requeueErrored`` — each a
plain ``kubectl patch``, docs/operator.md); the status is the operator's running tally,
folded from graded cells in few, batched patches.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import pydantic

from agent_health.cluster.api import meta, runbudget

KIND = "EvaluationRun"
PLURAL = "evaluationruns"
MAX_TEST_SUMMARIES = 200
MAX_RUNNING_CELLS = 100
DEFAULT_DEADLINE = 24 * 3600  # every run ends, even one whose RunSpec never resolves
MAX_DEADLINE = 30 * 24 * 3600

Phase = Literal["Pending", "Resolving", "Running", "Grading", "Succeeded", "Failed"]
PHASES: tuple[Phase, ...] = ("Pending", "Resolving", "Running", "Grading", "Succeeded", "Failed")
Fraction = Annotated[float, pydantic.Field(ge=0, le=1)]
Count = Annotated[int, pydantic.Field(ge=0)]


class RunSpecRef(meta.Model):
    """The RunSpec this run executes, in the run's own namespace."""

    name: meta.DnsSubdomain = pydantic.Field(description="The RunSpec's name.")


class Selection(meta.Model):
    """Which tests run: all labels must match, and the id or title must match ``grep``."""

    labels: Annotated[
        list[Annotated[str, pydantic.Field(min_length=1, max_length=256)]],
        pydantic.Field(max_length=32),
    ] = pydantic.Field(
        default_factory=list, description="Run only tests that carry every one of these labels."
    )
    grep: Annotated[str, pydantic.Field(min_length=1, max_length=1024)] | None = pydantic.Field(
        default=None,
        description="A regular expression (RE2 syntax: no backreferences or lookarounds) "
        "matched against test ids and titles.",
    )


class Retry(meta.Model):
    """Retries of a cell for infrastructure failures only (never for a failed or errored test)."""

    infra_retries: Annotated[int, pydantic.Field(ge=0, le=10)] = pydantic.Field(
        default=2, description="New pods for a cell the infrastructure failed (eviction, ...)."
    )
    backoff_seconds: Annotated[int, pydantic.Field(ge=1, le=3600)] = pydantic.Field(
        default=10, description="The wait before such a retry."
    )


class Spec(meta.Model):
    """The desired run."""

    run_spec_ref: RunSpecRef
    repeats: Annotated[int, pydantic.Field(ge=1, le=100)] = pydantic.Field(
        default=1, description="Cells per test (pass@k and pass^k need more than one)."
    )
    parallelism: Annotated[int, pydantic.Field(ge=1, le=1000)] = pydantic.Field(
        default=1, description="Cells of this run at once."
    )
    selection: Selection = pydantic.Field(default_factory=Selection)
    timeout_seconds: Annotated[int, pydantic.Field(ge=1, le=86400)] | None = pydantic.Field(
        default=None, description="Per-test timeout; defaults to the RunSpec's timeoutSeconds."
    )
    retry: Retry = pydantic.Field(default_factory=Retry)
    skip_judge: bool = pydantic.Field(
        default=False, description="Every judge() call is a neutral skip."
    )
    skip_simulate: bool = pydantic.Field(
        default=False,
        description="A test whose conversation needs a simulated user is skipped (the CLI's "
        "--no-simulate). A run that skips judging has no model for one either: its "
        "simulated users are skipped too.",
    )
    ttl_seconds_after_finished: Annotated[int, pydantic.Field(ge=0)] | None = pydantic.Field(
        default=None, description="Delete the run (and its cells) this long after it finished."
    )
    active_deadline_seconds: Annotated[int, pydantic.Field(ge=1, le=MAX_DEADLINE)] = pydantic.Field(
        default=DEFAULT_DEADLINE,
        description="The whole run's time limit, counted from its creation: when it "
        "passes, cells still running are stopped and the run fails with reason "
        "DeadlineExceeded (cells graded by then keep their grades).",
    )
    agents: Annotated[
        list[meta.DnsLabel],
        pydantic.Field(max_length=16, json_schema_extra={"x-kubernetes-list-type": "set"}),
    ] = pydantic.Field(
        default_factory=list,
        description="An agent matrix: run every test against each of these RunSpec "
        "spec.targets (by name), side by side; empty: the RunSpec's target alone.",
    )
    budget: runbudget.Budget | None = pydantic.Field(
        default=None,
        description="Cost, token and duration limits; reaching one stops starting cells "
        "(BudgetExhausted).",
    )
    queue: meta.DnsLabel | None = pydantic.Field(
        default=None,
        description="The Kueue LocalQueue (in the run's namespace) every cell waits in for "
        "admission (label kueue.x-k8s.io/queue-name); unset: the RunSpec's spec.queue, then "
        "the operator's --default-queue; none of them: no queue.",
    )
    suspend: bool = pydantic.Field(
        default=False,
        description="Suspended: no cell starts, and the cells running are stopped and planned "
        "again (as when Kueue preempts one: no infraRetries spent); set back to false, the run "
        "goes on and its activeDeadlineSeconds count again from then, as a suspended Job's. "
        "Kueue's own field for holding a workload, so a run may be created suspended.",
    )
    requeue_errored: Annotated[int, pydantic.Field(ge=0, le=1000)] = pydantic.Field(
        default=0,
        description="Raise it by one to run every cell errored so far once more, as its next "
        "attempt (its errored grade is replaced by the new one); a finished run whose cells "
        "are still there runs again. status.requeuedErrored says which value was done.",
    )


Cause = Literal["agent", "judge", "test", "infra"]


class ErroredByCause(meta.Model):
    """Errored cells by whom the error blames; only ``agent`` counts in the pass rate."""

    agent: Count = pydantic.Field(
        default=0, description="the agent under test: refused, error status, bad reply, timeout"
    )
    judge: Count = 0
    test: Count = pydantic.Field(default=0, description="the test's body, a fixture or a hook")
    infra: Count = pydantic.Field(default=0, description="scheduling, eviction, node, gateway")


class Counts(meta.Model):
    """Cells by state; a cell is one (test, repeat)."""

    total: Count = 0
    pending: Count = 0
    queued: Count = pydantic.Field(
        default=0,
        description="Cells whose pod waits for Kueue to admit it (its scheduling gate "
        "kueue.x-k8s.io/admission is still on); not counted in pending.",
    )
    running: Count = 0
    passed: Count = 0
    failed: Count = 0
    errored: Count = 0
    skipped: Count = 0
    errored_by_cause: ErroredByCause = pydantic.Field(default_factory=ErroredByCause)
    unverified_claims: Count = pydantic.Field(
        default=0,
        description="Tool calls the agents claimed on a peer's declared tools (peers[].tools) "
        "that the gateway never saw.",
    )
    conversations: Count = pydantic.Field(
        default=0,
        description="Graded cells whose test held a conversation (agent.run(turns=...) or "
        "user=...).",
    )
    goal_met: Count = pydantic.Field(
        default=0,
        description="Of those conversations, the cells whose user ended it saying its goal "
        "was met (ended goal-met).",
    )
    warm_starts: Count | None = pydantic.Field(
        default=None,
        description="Cells of a warm-pool run (isolation.warmPool) that took a pooled sandbox "
        "whose target was already started; unset for other runs.",
    )
    cold_starts: Count | None = pydantic.Field(
        default=None,
        description="Cells of a warm-pool run that found the pool empty and started cold.",
    )


class TestSummary(meta.Model):
    """One test's outcome over its repeats."""

    __test__ = False  # not a pytest class

    id: Annotated[str, pydantic.Field(min_length=1, max_length=512)]
    passed: Count = 0
    failed: Count = 0
    errored: Count = 0
    errored_by_agent: Count = 0
    score: Fraction | None = None
    error: Annotated[str, pydantic.Field(max_length=1024)] | None = pydantic.Field(
        default=None, description="The first error of an errored repeat (truncated)."
    )
    cause: Cause | None = pydantic.Field(default=None, description="That error's cause.")
    agents: Annotated[
        list[AgentTestSummary],
        pydantic.Field(max_length=16, json_schema_extra=meta.list_map("name")),
    ] = pydantic.Field(
        default_factory=list, description="An agent matrix: this test for each agent."
    )


class RunningCell(meta.Model):
    """One cell running now: which test, which repeat, which agent, since when."""

    test: Annotated[str, pydantic.Field(min_length=1, max_length=512)]
    repeat: Count = 0
    agent: meta.DnsLabel | None = pydantic.Field(
        default=None, description="An agent matrix: the agent it runs against."
    )
    since: datetime.datetime | None = pydantic.Field(
        default=None, description="When its pod started running."
    )


class Interval(meta.Model):
    """A 95% confidence interval of the value beside it (docs/statistics.md)."""

    low: Fraction
    high: Fraction


class ChangeInterval(meta.Model):
    """The interval of a change between two agents (1 − alpha; docs/statistics.md)."""

    low: Annotated[float, pydantic.Field(ge=-1, le=1)]
    high: Annotated[float, pydantic.Field(ge=-1, le=1)]


class AgentTestSummary(meta.Model):
    """One test's outcome for one agent of a matrix."""

    name: meta.DnsLabel
    passed: Count = 0
    failed: Count = 0
    errored: Count = 0
    errored_by_agent: Count = 0
    skipped: Count = 0
    score: Fraction | None = None


class AgentSummary(meta.Model):
    """One agent of a matrix over all its cells."""

    name: meta.DnsLabel
    passed: Count = 0
    failed: Count = 0
    errored: Count = 0
    skipped: Count = 0
    pass_rate: Fraction | None = None
    pass_rate_interval: Interval | None = None
    score: Fraction | None = None
    score_interval: Interval | None = pydantic.Field(
        default=None,
        description="95% bootstrap interval of this agent's score over its tests; refreshed "
        "as sparingly as the run's scoreInterval.",
    )
    pass_at_k: Fraction | None = None


class AgentPair(meta.Model):
    """From one agent of a matrix to another, over the tests both decided (paired by id)."""

    base: meta.DnsLabel
    new: meta.DnsLabel
    tests: Count = 0
    worse: Count = pydantic.Field(default=0, description="Tests whose pass share fell.")
    better: Count = pydantic.Field(default=0, description="Tests whose pass share rose.")
    pass_rate_delta: Annotated[float, pydantic.Field(ge=-1, le=1)] | None = None
    score_delta: Annotated[float, pydantic.Field(ge=-1, le=1)] | None = None
    pass_rate_delta_interval: ChangeInterval | None = pydantic.Field(
        default=None, description="The interval of the pass-rate change (as compare gives it)."
    )
    p_value: Fraction | None = pydantic.Field(
        default=None, description="The paired test of the pass rate (as compare runs it)."
    )
    significant: bool | None = pydantic.Field(
        default=None, description="Whether the change in pass rate is more than noise at 0.05."
    )


class Status(meta.Model):
    """The run's tally; pass rates count cells errored by the agent as not passed."""

    observed_generation: Annotated[int, pydantic.Field(ge=0)] | None = None
    phase: Phase | None = None
    counts: Counts = pydantic.Field(default_factory=Counts)
    pass_rate: Fraction | None = pydantic.Field(
        default=None,
        description="passed / (passed + failed + errored by the agent); cells errored by the "
        "judge, the test or the infrastructure are excluded.",
    )
    pass_rate_interval: Interval | None = pydantic.Field(
        default=None,
        description="95% Wilson interval of passRate, over the decided cells, shrunk to the "
        "effective sample size when a test's repeats are alike.",
    )
    score: Fraction | None = None
    score_interval: Interval | None = pydantic.Field(
        default=None,
        description="95% bootstrap interval of score over tests (a test's repeats resampled "
        "together); refreshed at most every 30 seconds while cells are graded, and when the "
        "run ends.",
    )
    pass_at_k: Fraction | None = pydantic.Field(
        default=None,
        description="pass@k for k = repeats: the mean over tests with k decided repeats of "
        "whether one passed.",
    )
    pass_at_k_interval: Interval | None = pydantic.Field(
        default=None, description="95% Wilson interval of passAtK over those tests."
    )
    pass_hat_k: Fraction | None = pydantic.Field(
        default=None,
        description="pass^k for k = repeats: the share of tests with k decided repeats whose "
        "every one passed.",
    )
    pass_hat_k_interval: Interval | None = pydantic.Field(
        default=None, description="95% Wilson interval of passHatK over those tests."
    )
    tests: Annotated[
        list[TestSummary],
        pydantic.Field(max_length=MAX_TEST_SUMMARIES, json_schema_extra=meta.list_map("id")),
    ] = pydantic.Field(default_factory=list)
    running_cells: Annotated[list[RunningCell], pydantic.Field(max_length=MAX_RUNNING_CELLS)] = (
        pydantic.Field(
            default_factory=list,
            description="The cells running now, longest running first (at most 100; "
            "counts.running says how many): what a run has in flight.",
        )
    )
    budget: runbudget.BudgetStatus | None = pydantic.Field(
        default=None, description="Spend against spec.budget (unset without a budget)."
    )
    agents: Annotated[
        list[AgentSummary],
        pydantic.Field(max_length=16, json_schema_extra=meta.list_map("name")),
    ] = pydantic.Field(default_factory=list, description="An agent matrix: each agent's tally.")
    pairs: Annotated[list[AgentPair], pydantic.Field(max_length=120)] = pydantic.Field(
        default_factory=list, description="An agent matrix: each pair of agents compared."
    )
    conditions: meta.Conditions = pydantic.Field(default_factory=list)
    start_time: datetime.datetime | None = None
    completion_time: datetime.datetime | None = None
    requeued_errored: Annotated[int, pydantic.Field(ge=0)] | None = pydantic.Field(
        default=None, description="The spec.requeueErrored the operator has done (unset: 0)."
    )


class EvaluationRun(meta.Model):
    """The whole custom resource as stored by Kubernetes."""

    api_version: Literal["agenthealth.dev/v1alpha1"] = "agenthealth.dev/v1alpha1"
    kind: Literal["EvaluationRun"] = "EvaluationRun"
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)
    spec: Spec
    status: Status | None = None


STEERABLE = ("suspend", "parallelism", "budget", "requeue_errored")
"""The spec's fields that may change while the run runs (``kubectl patch``); the rest is
the run's record and never changes."""


def _fixed_rule() -> tuple[str, str]:
    """The CEL transition rule keeping every field but :data:`STEERABLE` as it was (a field
    left out stays left out)."""
    checks = []
    for name, field in Spec.model_fields.items():
        if name in STEERABLE:
            continue
        wire = field.alias or name
        checks.append(
            f"(has(self.{wire}) ? (has(oldSelf.{wire}) && self.{wire} == oldSelf.{wire}) "
            f": !has(oldSelf.{wire}))"
        )
    steered = ", ".join(Spec.model_fields[n].alias or n for n in STEERABLE)
    return (
        " && ".join(checks),
        f"spec is immutable but for {steered}: create a new EvaluationRun instead",
    )


SPEC_IMMUTABLE = _fixed_rule()
