"""The operator's Prometheus metrics, read back by parsing the text exposition."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from agent_health.cluster import metrics
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results
from aiohttp import web
from prometheus_client import parser

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes | str) -> Samples:
    body = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(body)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def cell(name: str, state: results.Status, *, seconds: float = 0.0) -> grading.CellGrade:
    result = results.TestResult(
        id="t",
        name="t",
        title="t",
        file="t.py",
        line=1,
        status=state,
        run_id="r",
        cause="agent" if state == "errored" else None,
    )
    usage = {
        "target": ledger_usage.TokenUsage(input_tokens=100, output_tokens=20, total_tokens=120),
        "peer:search": ledger_usage.TokenUsage(input_tokens=5, output_tokens=1, total_tokens=6),
        "judge": ledger_usage.TokenUsage(input_tokens=40, output_tokens=4, total_tokens=44),
    }
    return grading.CellGrade(
        cell=name,
        test_id="t",
        repeat=0,
        status=state,
        duration_ms=seconds * 1000,
        usage=usage,
        result=result,
    )


RUN = ("default", "triage", "nightly-1")


def test_grades_count_once_per_cell_with_tokens_by_principal() -> None:
    m = metrics.OperatorMetrics()
    assert m.observe_grade(*RUN, cell("c0", "passed", seconds=42))
    assert not m.observe_grade(*RUN, cell("c0", "passed", seconds=42))  # graded again
    assert m.observe_grade(*RUN, cell("c1", "failed", seconds=7))
    found = samples(m.render())
    base = {"namespace": "default", "runspec": "triage"}
    assert value(found, "agent_health_cells_graded_total", **base, status="passed") == 1
    assert value(found, "agent_health_cells_graded_total", **base, status="failed") == 1
    assert (
        value(found, "agent_health_tokens_total", **base, principal="target", kind="input") == 200
    )
    assert value(found, "agent_health_tokens_total", **base, principal="judge", kind="output") == 8
    assert value(found, "agent_health_tokens_total", **base, principal="peer", kind="input") == 10
    duration = "agent_health_cell_duration_seconds"
    assert value(found, f"{duration}_count", **base, status="passed") == 1
    assert value(found, f"{duration}_sum", **base, status="passed") == 42
    assert value(found, f"{duration}_bucket", **base, status="failed", le="10.0") == 1


def test_run_gauges_follow_the_status_and_vanish_with_the_run() -> None:
    m = metrics.OperatorMetrics()
    running = evaluationrun.Status(
        phase="Running",
        counts=evaluationrun.Counts(total=5, pending=1, running=1, passed=2, failed=1),
        pass_rate=2 / 3,
    )
    m.observe_run(*RUN, running)
    found = samples(m.render())
    run = {"namespace": "default", "runspec": "triage", "run": "nightly-1"}
    assert value(found, "agent_health_cells", **run, state="pending") == 1
    assert value(found, "agent_health_cells", **run, state="passed") == 2
    assert value(found, "agent_health_run_pass_rate", **run) == pytest.approx(2 / 3)
    assert value(found, "agent_health_run_score", **run) is None  # unknown is no series
    assert (
        value(found, "agent_health_runspec_pass_rate", namespace="default", runspec="triage")
        is None
    )
    done = running.model_copy(update={"phase": "Succeeded", "score": 0.5, "pass_rate": 0.5})
    m.observe_run(*RUN, done)
    found = samples(m.render())
    assert value(found, "agent_health_runspec_score", namespace="default", runspec="triage") == 0.5
    m.forget_run(*RUN)
    left = samples(m.render())
    assert not [key for key in left if ("run", "nightly-1") in key[1]]
    assert value(left, "agent_health_runspec_score", namespace="default", runspec="triage") == 0.5


def test_judge_reconcile_and_queue_metrics() -> None:
    m = metrics.OperatorMetrics()
    m.observe_judge("gpt-j", "ok", 0.8)
    m.observe_judge("gpt-j", "cached", 0.01)
    m.observe_judge("gpt-j", "errored", 30)
    m.reconcile_error("evaluationrun.resume")
    m.reconcile_error("evaluationrun.resume")
    m.set_queue_depth("cells", 17)
    found = samples(m.render())
    assert value(found, "agent_health_judge_calls_total", model="gpt-j", outcome="ok") == 1
    assert value(found, "agent_health_judge_cache_hits_total", model="gpt-j") == 1
    assert value(found, "agent_health_judge_latency_seconds_count", model="gpt-j") == 3
    assert value(found, "agent_health_judge_latency_seconds_bucket", model="gpt-j", le="0.05") == 1
    assert value(found, "agent_health_reconcile_errors_total", handler="evaluationrun.resume") == 2
    assert value(found, "agent_health_queue_depth", queue="cells") == 17


def test_each_instance_has_its_own_registry() -> None:
    first, second = metrics.OperatorMetrics(), metrics.OperatorMetrics()
    first.reconcile_error("x")
    assert value(samples(first.render()), "agent_health_reconcile_errors_total", handler="x") == 1
    assert (
        value(samples(second.render()), "agent_health_reconcile_errors_total", handler="x") is None
    )


def test_no_label_can_carry_a_test_id() -> None:
    m = metrics.OperatorMetrics()
    m.observe_grade(*RUN, cell("suite/a.py::a very specific test", "passed", seconds=1))
    m.observe_run(*RUN, evaluationrun.Status(phase="Succeeded", pass_rate=1.0, score=1.0))
    m.observe_judge("m", "ok", 1.0)
    m.reconcile_error("h")
    m.set_queue_depth("q", 1)
    found = samples(m.render())
    labels = {name for _, pairs in found for name, _ in pairs}
    assert labels == {"namespace", "runspec", "run", "state", "status", "principal", "kind",
                      "model", "outcome", "handler", "queue", "le"}  # fmt: skip
    assert not [v for _, pairs in found for _, v in pairs if "specific" in v]


@pytest.fixture
async def served() -> AsyncIterator[tuple[metrics.OperatorMetrics, str]]:
    m = metrics.OperatorMetrics()
    app = web.Application()
    app.router.add_get("/metrics", m.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        yield m, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_metrics_are_served_over_http(
    served: tuple[metrics.OperatorMetrics, str],
) -> None:
    m, url = served
    m.set_queue_depth("grading", 3)
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"{url}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert value(samples(answer.text), "agent_health_queue_depth", queue="grading") == 3
