"""The operator's Prometheus metrics, in a registry of their own.

Every :class:`OperatorMetrics` owns a fresh :class:`prometheus_client.CollectorRegistry`
(nothing is put in the library's global registry), so two operators — or two tests — in
one process never share a series.

Label cardinality is bounded: no test ids, cell names or error texts as labels. Series
labelled by ``run`` exist only while the run does (:meth:`OperatorMetrics.forget_run`);
principals collapse to ``controller``, ``target``, ``judge`` and ``peer``; ``model`` comes
from the judge configuration, not from what an agent says.

========================================  =========  ==========================================
metric                                    type       labels
========================================  =========  ==========================================
agent_health_cells                        gauge      namespace, runspec, run, state
agent_health_cells_graded_total           counter    namespace, runspec, status
agent_health_run_pass_rate / _score       gauge      namespace, runspec, run
agent_health_runspec_pass_rate / _score   gauge      namespace, runspec (the last finished run)
agent_health_cell_duration_seconds        histogram  namespace, runspec, status
agent_health_tokens_total                 counter    namespace, runspec, principal, kind
agent_health_judge_calls_total            counter    model, outcome (ok, cached, errored)
agent_health_judge_cache_hits_total       counter    model
agent_health_judge_latency_seconds        histogram  model
agent_health_reconcile_errors_total       counter    handler
agent_health_queue_depth                  gauge      queue
========================================  =========  ==========================================
"""

from __future__ import annotations

from typing import Literal

import prometheus_client
from aiohttp import web
from prometheus_client import exposition

from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading

STATES = ("pending", "queued", "running", "passed", "failed", "errored", "skipped")
CELL_SECONDS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
JUDGE_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
JudgeOutcome = Literal["ok", "cached", "errored"]
_RUN = ("namespace", "runspec", "run")


def principal_label(principal: str) -> str:
    """A principal as a bounded label value: ``peer:NAME`` becomes ``peer``."""
    return "peer" if principal.startswith("peer:") else principal


class OperatorMetrics:
    """What the operator counts; :meth:`render` is the Prometheus text exposition."""

    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "agent_health"
        self.cells = prometheus_client.Gauge(
            f"{p}_cells", "Cells of a run by state.", [*_RUN, "state"], registry=r
        )
        self.cells_graded = prometheus_client.Counter(
            f"{p}_cells_graded",
            "Cells graded, by status.",
            ["namespace", "runspec", "status"],
            registry=r,
        )
        self.cells_preempted = prometheus_client.Counter(
            f"{p}_cells_preempted",
            "Cell pods Kueue preempted (each cell planned again).",
            ["namespace", "runspec"],
            registry=r,
        )
        self.cells_launched = prometheus_client.Counter(
            f"{p}_cells_launched",
            "Cells of warm-pool runs by how their sandbox started: "
            "warm (a pooled sandbox, its target already up) or cold (the pool was empty).",
            ["namespace", "runspec", "launch"],
            registry=r,
        )
        self.run_pass_rate = prometheus_client.Gauge(
            f"{p}_run_pass_rate",
            "passed / (passed + failed + errored by the agent) of a run; cells errored by the "
            "judge, the test or the infrastructure are left out.",
            _RUN,
            registry=r,
        )
        self.run_score = prometheus_client.Gauge(
            f"{p}_run_score", "Mean score of a run's graded cells.", _RUN, registry=r
        )
        self.runspec_pass_rate = prometheus_client.Gauge(
            f"{p}_runspec_pass_rate",
            "Pass rate of the RunSpec's last finished run.",
            ["namespace", "runspec"],
            registry=r,
        )
        self.runspec_score = prometheus_client.Gauge(
            f"{p}_runspec_score",
            "Score of the RunSpec's last finished run.",
            ["namespace", "runspec"],
            registry=r,
        )
        self.cell_duration = prometheus_client.Histogram(
            f"{p}_cell_duration_seconds",
            "How long a cell's test took.",
            ["namespace", "runspec", "status"],
            buckets=CELL_SECONDS,
            registry=r,
        )
        self.tokens = prometheus_client.Counter(
            f"{p}_tokens",
            "Model tokens seen by the gateways, by who consumed them.",
            ["namespace", "runspec", "principal", "kind"],
            registry=r,
        )
        self.judge_calls = prometheus_client.Counter(
            f"{p}_judge_calls", "Judge calls by outcome.", ["model", "outcome"], registry=r
        )
        self.judge_cache_hits = prometheus_client.Counter(
            f"{p}_judge_cache_hits", "Judge calls answered from the cache.", ["model"], registry=r
        )
        self.judge_latency = prometheus_client.Histogram(
            f"{p}_judge_latency_seconds",
            "Judge call latency.",
            ["model"],
            buckets=JUDGE_SECONDS,
            registry=r,
        )
        self.reconcile_errors = prometheus_client.Counter(
            f"{p}_reconcile_errors", "Reconcile handler errors.", ["handler"], registry=r
        )
        self.queue_depth = prometheus_client.Gauge(
            f"{p}_queue_depth", "Items waiting in an operator queue.", ["queue"], registry=r
        )
        # Cells already counted, so a cell graded again is not counted twice.
        self._graded: dict[tuple[str, str], set[str]] = {}

    def observe_run(
        self, namespace: str, runspec: str, run: str, status: evaluationrun.Status
    ) -> None:
        """Set a run's gauges from its status; a finished run also sets its RunSpec's."""
        labels = (namespace, runspec, run)
        counts = status.counts.model_dump()
        for state in STATES:
            self.cells.labels(*labels, state).set(counts[state])
        _set(self.run_pass_rate, labels, status.pass_rate)
        _set(self.run_score, labels, status.score)
        if status.phase == "Succeeded":
            _set(self.runspec_pass_rate, (namespace, runspec), status.pass_rate)
            _set(self.runspec_score, (namespace, runspec), status.score)

    def observe_grade(
        self, namespace: str, runspec: str, run: str, grade: grading.CellGrade
    ) -> bool:
        """Count a graded cell (once per cell of a run); ``False`` if it was counted before."""
        seen = self._graded.setdefault((namespace, run), set())
        if grade.cell in seen or grade.retryable:
            return False
        seen.add(grade.cell)
        self.cells_graded.labels(namespace, runspec, grade.status).inc()
        if grade.duration_ms > 0:
            self.cell_duration.labels(namespace, runspec, grade.status).observe(
                grade.duration_ms / 1000
            )
        for principal, used in grade.usage.items():
            who = principal_label(principal)
            self.tokens.labels(namespace, runspec, who, "input").inc(used.input_tokens)
            self.tokens.labels(namespace, runspec, who, "output").inc(used.output_tokens)
        return True

    def observe_judge(self, model: str, outcome: JudgeOutcome, seconds: float) -> None:
        """One judge call handled by the operator's judge service."""
        self.judge_calls.labels(model, outcome).inc()
        if outcome == "cached":
            self.judge_cache_hits.labels(model).inc()
        self.judge_latency.labels(model).observe(seconds)

    def reconcile_error(self, handler: str) -> None:
        self.reconcile_errors.labels(handler).inc()

    def cell_preempted(self, namespace: str, runspec: str) -> None:
        """Kueue preempted a cell's pod."""
        self.cells_preempted.labels(namespace, runspec).inc()

    def cell_launched(self, namespace: str, runspec: str, launch: str) -> None:
        """A warm-pool run's cell got its sandbox (``warm`` or ``cold``)."""
        self.cells_launched.labels(namespace, runspec, launch).inc()

    def set_queue_depth(self, queue: str, depth: int) -> None:
        self.queue_depth.labels(queue).set(depth)

    def forget_run(self, namespace: str, runspec: str, run: str) -> None:
        """Drop a deleted run's series, so labels do not pile up over time."""
        labels = (namespace, runspec, run)
        for state in STATES:
            self.cells.remove(*labels, state)
        self.run_pass_rate.remove(*labels)
        self.run_score.remove(*labels)
        self._graded.pop((namespace, run), None)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return exposition.generate_latest(self.registry)

    async def handle(self, request: web.Request) -> web.Response:
        """An aiohttp handler for ``GET /metrics``."""
        return web.Response(
            body=self.render(), headers={"Content-Type": exposition.CONTENT_TYPE_LATEST}
        )


def _set(gauge: prometheus_client.Gauge, labels: tuple[str, ...], value: float | None) -> None:
    # No number is more honest than a made-up zero: an unknown rate is no series at all.
    if value is None:
        gauge.remove(*labels)
    else:
        gauge.labels(*labels).set(value)
