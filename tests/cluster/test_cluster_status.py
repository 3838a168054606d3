"""The run tally, its phases and conditions, and the batched status patches.

Status patches go to the Kubernetes API emulator (real HTTP on 127.0.0.1) serving the
generated CRDs, so every status the tally writes is also validated against the CRD schema.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from agent_health.cluster import errors
from agent_health.cluster.api import crds, evaluationrun
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import batcher, status
from agent_health.engine.reports import report
from agent_health.sdk import results
from support.kube import serve
from support.status_support import T0, Clock, running_tally

RUNS = "/apis/agenthealth.dev/v1alpha1/namespaces/default/evaluationruns"
MERGE = {"Content-Type": "application/merge-patch+json"}


def grade(
    cell: str,
    test_id: str,
    repeat: int,
    state: results.Status,
    score: float | None = None,
    error: str | None = None,
    cause: results.Cause = "infra",
) -> grading.CellGrade:
    expected = grading.ExpectedCell(test_id=test_id, repeat=repeat, run_id=f"r-{cell}")
    if state == "errored" and cause == "agent":  # doubtful evidence is the agent's
        return grading.grade_lines(cell, [], b"k" * 32, expected).model_copy(
            update={"error": error or f"no ledger for cell {cell}"}
        )
    if state == "errored":
        lost = grading.grade_failed_pod(
            cell, expected, "node gone", cause="node-lost", attempt=0,
            policy=evaluationrun.Retry(infra_retries=0),
        )  # fmt: skip
        return lost.model_copy(update={"error": error or lost.error}) if error else lost
    result = results.TestResult(
        id=test_id,
        name=test_id,
        title=test_id,
        file="t.py",
        line=1,
        repeat=repeat,
        status=state,
        score=score,
        run_id=f"r-{cell}",
    )
    return grading.CellGrade(
        cell=cell, test_id=test_id, repeat=repeat, status=state, score=score, result=result
    )


def test_counts_follow_cells_and_regrading_never_double_counts() -> None:
    tally = running_tally(Clock(), ["a0", "a1", "b0", "b1"])
    tally.started("a0")
    tally.started("b0")
    assert tally.counts() == evaluationrun.Counts(total=4, pending=2, running=2)
    tally.record(grade("a0", "a", 0, "failed", 0.0))
    assert tally.status().pass_rate == 0.0
    tally.record(grade("a0", "a", 0, "passed", 1.0))  # graded again: replaces
    tally.record(grade("a0", "a", 0, "passed", 1.0))
    assert tally.status().pass_rate == 1.0
    assert [(t.id, t.passed, t.failed) for t in tally.status().tests] == [("a", 1, 0)]
    assert tally.counts() == evaluationrun.Counts(total=4, pending=2, running=1, passed=1)


def test_the_status_names_the_cells_running_longest_first_and_no_more_than_its_cap() -> None:
    clock = Clock()
    names = [f"c{n}" for n in range(evaluationrun.MAX_RUNNING_CELLS + 5)]
    tally = running_tally(clock, names)

    def describe(name: str) -> tuple[str, int, str | None]:
        return f"t.py::{name}", int(name[1:]) % 2, "good" if name == "c0" else None

    tally.started("c1")
    clock.t = 5
    tally.started("c0")
    tally.started("c1")  # still running: it keeps its start
    running = tally.status(describe).running_cells
    assert [(r.test, r.repeat, r.agent, r.since) for r in running] == [
        ("t.py::c1", 1, None, T0),
        ("t.py::c0", 0, "good", T0 + datetime.timedelta(seconds=5)),
    ]
    assert tally.status().running_cells == []  # without saying what a cell is: none named
    tally.ended("c1")
    tally.requeued("c0")  # preempted: pending again
    assert tally.status(describe).running_cells == []
    for name in names:
        tally.started(name)
    tally.record(grade("c2", "t.py::c2", 0, "passed", 1.0))
    shown = tally.status(describe)
    assert len(shown.running_cells) == evaluationrun.MAX_RUNNING_CELLS  # the CRD's maxItems
    assert shown.counts.running == len(names) - 1
    assert "t.py::c2" not in {r.test for r in shown.running_cells}


def test_a_retryable_infra_grade_returns_the_cell_to_pending() -> None:
    tally = running_tally(Clock(), ["a0"])
    tally.started("a0")
    expected = grading.ExpectedCell(test_id="a", repeat=0, run_id="r")
    retry = evaluationrun.Retry(infra_retries=1)
    first = grading.grade_failed_pod(
        "a0", expected, "evicted", cause="evicted", attempt=0, policy=retry
    )
    tally.record(first)
    assert tally.counts() == evaluationrun.Counts(total=1, pending=1)
    assert tally.phase == "Running"
    last = grading.grade_failed_pod(
        "a0", expected, "evicted", cause="evicted", attempt=1, policy=retry
    )
    tally.record(last)
    by_cause = evaluationrun.ErroredByCause(infra=1)
    assert tally.counts() == evaluationrun.Counts(total=1, errored=1, errored_by_cause=by_cause)
    assert tally.phase == "Succeeded"  # the run measured what it could; errored is data


def test_pass_rate_excludes_errored_and_pass_at_k_matches_the_engine() -> None:
    grades = [
        grade("a0", "a", 0, "passed", 1.0),
        grade("a1", "a", 1, "failed", 0.2),
        grade("b0", "b", 0, "passed", 0.8),
        grade("b1", "b", 1, "passed", 1.0),
        grade("c0", "c", 0, "errored"),
        grade("c1", "c", 1, "failed", 0.0),
    ]
    tally = running_tally(Clock(), [g.cell for g in grades], repeats=2)
    for g in grades:
        tally.record(g)
    got = tally.status()
    assert got.pass_rate == pytest.approx(3 / 5)  # errored by the infrastructure: excluded
    assert got.score == pytest.approx((1.0 + 0.2 + 0.8 + 1.0 + 0.0) / 5)
    engine = report.RunReport.build([g.result for g in grades], duration_ms=0, repeats=2).summary
    assert (got.pass_at_k, got.pass_hat_k) == (engine.pass_at_k, engine.pass_hat_k)
    # c has one decided repeat (the other errored by the infrastructure), too few for
    # pass@2: a (pass, fail) and b (pass, pass) decide it.
    assert (got.pass_at_k, got.pass_hat_k) == (1.0, 0.5)


def of_agent(found: grading.CellGrade, agent: str) -> grading.CellGrade:
    return found.model_copy(update={"result": found.result.model_copy(update={"agent": agent})})


def test_each_agent_of_a_matrix_has_its_score_interval_as_the_engine_bootstraps_it() -> None:
    clock = Clock()
    cells = [f"{a}{i}" for a in "xy" for i in range(6)]
    tally = running_tally(clock, cells)
    for i in range(6):
        tally.record(of_agent(grade(f"x{i}", f"t{i}", 0, "passed", 0.6 + 0.05 * i), "x"))
        tally.record(of_agent(grade(f"y{i}", f"t{i}", 0, "failed", 0.1 * i), "y"))
    got = {a.name: a for a in tally.status().agents}
    engine = report.RunReport.build([g.result for g in tally.grades], duration_ms=0).matrix
    assert engine is not None
    for name in "xy":
        interval = engine.summaries[name]["score_interval"]
        assert got[name].score_interval is not None
        assert (got[name].score_interval.low, got[name].score_interval.high) == (
            interval["low"],
            interval["high"],
        )
    x, y = got["x"].score_interval, got["y"].score_interval
    assert x is not None
    assert y is not None
    assert y.high < x.low  # apart: the agents' scores differ beyond their bootstrap noise


def test_status_carries_each_rates_interval_and_refreshes_the_bootstrap_sparingly() -> None:
    clock = Clock()
    cells = [f"t{i}" for i in range(10)]
    tally = running_tally(clock, cells)
    for i, cell in enumerate(cells[:5]):
        passed = i < 4
        state: results.Status = "passed" if passed else "failed"
        tally.record(grade(cell, cell, 0, state, 0.9 if passed else 0.2))
    got = tally.status()
    # 4 of 5 decided, Wilson: z²/n = 0.7682918; centre = 1.1841459 / 1.7682918 = 0.6696553;
    # half = 1.959964 · sqrt(0.032 + 0.0384146) / 1.7682918 = 0.2941206
    assert got.pass_rate_interval is not None
    assert got.pass_rate_interval.low == pytest.approx(0.3755346, abs=1e-6)
    assert got.pass_rate_interval.high == pytest.approx(0.9637759, abs=1e-6)
    engine = report.RunReport.build([g.result for g in tally.grades], duration_ms=0).summary
    assert engine.score_interval is not None
    assert got.score_interval is not None
    assert (got.score_interval.low, got.score_interval.high) == (
        engine.score_interval.low,
        engine.score_interval.high,
    )
    first = got.score_interval
    # More grades within 30 s: the score moves, its bootstrap interval waits (stale is named
    # in the CRD's description); the pass rate's Wilson interval follows at once.
    clock.t = 10.0
    tally.record(grade("t5", "t5", 0, "failed", 0.0))
    soon = tally.status()
    assert soon.score_interval == first
    assert soon.pass_rate_interval != got.pass_rate_interval
    clock.t = 40.0
    tally.record(grade("t6", "t6", 0, "failed", 0.0))
    assert tally.status().score_interval != first
    for cell in cells[7:]:
        tally.record(grade(cell, cell, 0, "passed", 1.0))
    final = tally.status()  # the last grade ends the run: a fresh interval, at once
    assert tally.phase == "Succeeded"
    engine = report.RunReport.build([g.result for g in tally.grades], duration_ms=0).summary
    assert engine.score_interval is not None
    assert final.score_interval is not None
    assert final.score_interval.low == engine.score_interval.low
    assert final.score_interval.high == engine.score_interval.high


def test_cells_the_agent_errored_count_against_it_and_the_status_names_every_cause() -> None:
    grades = [
        grade("a0", "a", 0, "passed", 1.0),
        grade("b0", "b", 0, "errored", cause="agent"),
        grade("c0", "c", 0, "errored", cause="agent"),
        grade("d0", "d", 0, "errored", cause="infra"),
        grade("e0", "e", 0, "failed", 0.0),
    ]
    tally = running_tally(Clock(), [g.cell for g in grades])
    for g in grades:
        tally.record(g)
    got = tally.status()
    assert got.pass_rate == pytest.approx(1 / 4)  # passed / (passed + failed + errored[agent])
    assert got.counts.errored_by_cause == evaluationrun.ErroredByCause(agent=2, infra=1)
    engine = report.RunReport.build([g.result for g in grades], duration_ms=0).summary
    assert got.pass_rate == engine.pass_rate
    by_id = {t.id: t for t in got.tests}
    assert (by_id["b"].cause, by_id["b"].errored_by_agent) == ("agent", 1)
    assert (by_id["d"].cause, by_id["d"].errored_by_agent) == ("infra", 0)
    assert {t.id for t in got.tests[:3]} == {"b", "c", "e"}  # agent errors rank with failures
    tests_passed = next(c for c in got.conditions if c.type == "TestsPassed")
    assert tests_passed.message == "1 failed and 3 errored (2 agent, 1 infra) of 5 cells"


def test_the_test_summary_is_bounded_and_worst_first() -> None:
    cells = [f"t{i}" for i in range(250)]
    tally = running_tally(Clock(), cells)
    for i, cell in enumerate(cells):
        state: results.Status = "passed" if i % 50 else "failed"
        tally.record(grade(cell, f"test-{i:03}", 0, state, 1.0 if state == "passed" else 0.0))
    tally.record(grade("t7", "test-007", 0, "errored", error="x" * 5000))
    tests = tally.status().tests
    assert len(tests) == evaluationrun.MAX_TEST_SUMMARIES
    assert [t.id for t in tests[:6]] == [
        "test-000",
        "test-050",
        "test-100",
        "test-150",
        "test-200",
        "test-007",
    ]
    assert tests[5].errored == 1
    assert tests[5].error is not None
    assert len(tests[5].error) == 1024
    assert tests[5].error.endswith("…")
    assert all(t.failed == 0 and t.errored == 0 for t in tests[6:])


def test_phases_advance_with_the_cells_and_refuse_going_back() -> None:
    clock = Clock()
    tally = running_tally(clock, ["a0", "b0"])
    assert tally.start_time == T0
    tally.started("a0")
    tally.started("b0")
    tally.ended("a0")
    assert tally.phase == "Running"
    tally.ended("b0")
    assert tally.phase == "Grading"
    tally.record(grade("a0", "a", 0, "failed", 0.0))
    clock.t = 90
    tally.record(grade("b0", "b", 0, "passed", 1.0))
    assert tally.phase == "Succeeded"  # some tests failed; the run still succeeded
    assert tally.completion_time == T0 + datetime.timedelta(seconds=90)
    with pytest.raises(errors.PhaseError, match="cannot go from Succeeded to Running"):
        tally.advance("Running", reason="Again")
    assert tally.advance("Succeeded", reason="Again") is False


def test_failed_means_the_run_could_not_execute() -> None:
    tally = status.RunTally(generation=3, clock=Clock().now)
    tally.advance("Resolving", reason="Resolving")
    tally.fail("ImageUnresolvable", "target image example.com/agent:v1: manifest unknown")
    conditions = {c.type: c for c in tally.status().conditions}
    assert tally.phase == "Failed"
    assert conditions["Resolved"].status == "False"
    assert conditions["Resolved"].reason == "ImageUnresolvable"
    assert conditions["Failed"].status == "True"
    assert conditions["Complete"].status == "False"
    assert all(c.observed_generation == 3 for c in conditions.values())
    with pytest.raises(errors.PhaseError):
        tally.advance("Running", reason="Scheduled")


def test_condition_times_change_only_when_their_status_does() -> None:
    clock = Clock()
    tally = running_tally(clock, ["a0", "b0", "c0"])
    tally.record(grade("a0", "a", 0, "passed", 1.0))
    first = {c.type: c for c in tally.status().conditions}
    assert first["TestsPassed"].status == "Unknown"
    clock.t = 10
    tally.record(grade("b0", "b", 0, "failed", 0.0))
    second = {c.type: c for c in tally.status().conditions}
    assert second["TestsPassed"].status == "False"
    assert second["TestsPassed"].last_transition_time == T0 + datetime.timedelta(seconds=10)
    assert second["Resolved"].last_transition_time == T0  # untouched
    clock.t = 20
    tally.record(grade("c0", "c", 0, "failed", 0.0))
    third = {c.type: c for c in tally.status().conditions}
    assert third["TestsPassed"].message == "2 failed and 0 errored of 3 cells"
    assert third["TestsPassed"].last_transition_time == T0 + datetime.timedelta(seconds=10)
    assert third["Complete"].status == "True"
    assert third["Complete"].last_transition_time == T0 + datetime.timedelta(seconds=20)


def test_a_tally_resumes_from_a_stored_status() -> None:
    clock = Clock()
    before = running_tally(clock, ["a0"])
    stored = evaluationrun.Status.model_validate(before.wire())
    clock.t = 500
    after = status.RunTally(generation=1, previous=stored, clock=clock.now)
    after.plan(["a0"])
    after.record(grade("a0", "a", 0, "passed", 1.0))
    got = after.status()
    assert got.start_time == T0
    assert {c.type: c for c in got.conditions}["Resolved"].last_transition_time == T0
    assert {c.type: c for c in got.conditions}["TestsPassed"].status == "True"


def test_merge_patch_is_minimal() -> None:
    old = {"phase": "Running", "counts": {"total": 3, "passed": 1}, "tests": [{"id": "a"}]}
    new = {"phase": "Running", "counts": {"total": 3, "passed": 2}, "tests": [{"id": "a"}]}
    assert batcher.merge_patch(old, new) == {"counts": {"passed": 2}}
    assert batcher.merge_patch(new, new) == {}
    assert batcher.merge_patch({"score": 0.5, "a": 1}, {"a": 1}) == {"score": None}


class Recorder:
    """A patch function that keeps what it was sent and answers like the API server."""

    def __init__(self) -> None:
        self.sent: list[tuple[batcher.RunRef, dict[str, Any]]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
        self.sent.append((ref, body))
        self.arrived.set()
        meta = {"namespace": ref.namespace, "name": ref.name, "generation": 1}
        return {"metadata": meta | {"resourceVersion": str(len(self.sent))}}


RUN = batcher.RunRef("default", "nightly")


async def test_a_burst_of_completions_becomes_few_patches() -> None:
    clock, sent = Clock(), Recorder()
    cells = [f"c{i}" for i in range(1000)]
    tally = running_tally(clock, cells)
    patches = batcher.StatusBatcher(sent, interval=1.0, clock=clock)
    for i, cell in enumerate(cells):
        clock.t = i * 0.002  # 1,000 completions over 2 simulated seconds
        tally.record(grade(cell, f"test-{i}", 0, "passed", 1.0))
        await patches.update(RUN, tally.wire)
        await patches.tick()
    await patches.flush(RUN)
    assert len(sent.sent) <= 3
    assert patches.patches_sent == len(sent.sent)
    final = sent.sent[-1][1]["status"]
    assert final["counts"]["passed"] == 1000
    assert final["phase"] == "Succeeded"


async def test_updates_are_held_until_the_interval_then_sent() -> None:
    clock, sent = Clock(), Recorder()
    patches = batcher.StatusBatcher(sent, interval=1.0, clock=clock)
    assert await patches.update(RUN, lambda: {"phase": "Running", "counts": {"total": 2}})
    clock.t = 0.5
    assert not await patches.update(RUN, lambda: {"phase": "Running", "counts": {"total": 3}})
    assert patches.next_due() == pytest.approx(0.5)
    assert await patches.tick() == 0
    clock.t = 1.0
    assert await patches.tick() == 1
    assert sent.sent[-1][1] == {"status": {"counts": {"total": 3}}}
    assert patches.next_due() is None


async def test_a_large_run_is_written_less_often_than_a_small_one() -> None:
    clock, sent = Clock(), Recorder()
    patches = batcher.StatusBatcher(sent, interval=1.0, clock=clock)
    large, small = batcher.RunRef("default", "large"), batcher.RunRef("default", "small")
    patches.pace(large, batcher.interval_for(100))
    patches.pace(small, batcher.interval_for(4))
    for tick in range(121):  # a change in both runs every 0.1 s for 12 simulated seconds
        clock.t = tick * 0.1
        for ref in (large, small):
            await patches.update(ref, lambda t=tick: {"counts": {"passed": t}})
        await patches.tick()
    by_run = Counter(ref for ref, _ in sent.sent)
    assert by_run[small] == 13  # once a second
    assert by_run[large] == 2  # at 0 s and 10 s: its counts are at most 10 s stale
    assert batcher.interval_for(100) == 10.0
    assert batcher.interval_for(4) == 1.0


async def test_no_op_patches_are_skipped() -> None:
    clock, sent = Clock(), Recorder()
    patches = batcher.StatusBatcher(sent, clock=clock)
    patches.seed(RUN, {"phase": "Running"})
    assert not await patches.update(RUN, lambda: {"phase": "Running"})
    assert sent.sent == []
    assert patches.noops_skipped == 1
    assert await patches.update(RUN, lambda: {"phase": "Grading"})
    assert not await patches.flush(RUN)  # nothing new to say


async def test_a_failed_patch_is_kept_for_the_next_tick() -> None:
    clock, calls = Clock(), []

    async def flaky(ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
        calls.append(body)
        if len(calls) == 1:
            raise httpx.ConnectError("refused")
        return {"metadata": {"resourceVersion": "9"}}

    patches = batcher.StatusBatcher(flaky, clock=clock)
    with pytest.raises(httpx.ConnectError):
        await patches.update(RUN, lambda: {"phase": "Running"})
    clock.t = 1.0
    assert await patches.tick() == 1
    assert calls[-1] == {"status": {"phase": "Running"}}


async def test_the_run_loop_sends_held_updates_and_flushes_on_stop() -> None:
    sent = Recorder()
    patches = batcher.StatusBatcher(sent, interval=0.005)
    stop = asyncio.Event()
    loop = asyncio.create_task(patches.run(stop))
    await patches.update(RUN, lambda: {"counts": {"total": 1}})
    await patches.update(RUN, lambda: {"counts": {"total": 2}})
    while len(sent.sent) < 2:
        sent.arrived.clear()
        await sent.arrived.wait()
    await patches.update(RUN, lambda: {"counts": {"total": 3}})
    stop.set()
    await loop
    assert [b["status"]["counts"]["total"] for _, b in sent.sent] == [1, 2, 3]


async def test_a_write_refused_in_the_run_loop_stops_neither_the_loop_nor_other_runs() -> None:
    gone, sent = batcher.RunRef("default", "deleted"), Recorder()

    async def patch(ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
        if ref == gone:  # deleted while its last status was held
            raise LookupError("404 NotFound: evaluationruns deleted")
        return await sent(ref, body)

    patches = batcher.StatusBatcher(patch, interval=0.005)
    stop = asyncio.Event()
    loop = asyncio.create_task(patches.run(stop))
    await patches.update(RUN, lambda: {"counts": {"total": 1}})
    with pytest.raises(LookupError):  # written at once, by the caller: it hears
        await patches.update(gone, lambda: {"counts": {"total": 1}})
    await patches.update(gone, lambda: {"counts": {"total": 2}})  # held for the loop
    await patches.update(RUN, lambda: {"counts": {"total": 2}})
    while len(sent.sent) < 2:
        sent.arrived.clear()
        await sent.arrived.wait()
    await patches.update(RUN, lambda: {"counts": {"total": 3}})
    stop.set()
    await loop  # the final flush of the deleted run is refused too: logged, not raised
    assert [b["status"]["counts"]["total"] for _, b in sent.sent] == [1, 2, 3]
    assert {ref for ref, _ in sent.sent} == {RUN}


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    async with serve() as (_, url), httpx.AsyncClient(base_url=url) as client:
        for definition in crds.definitions():
            answer = await client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=definition
            )
            assert answer.status_code == 201, answer.text
        run = {
            "apiVersion": "agenthealth.dev/v1alpha1",
            "kind": "EvaluationRun",
            "metadata": {"name": "nightly"},
            "spec": {"runSpecRef": {"name": "triage"}, "repeats": 2},
        }
        assert (await client.post(RUNS, json=run)).status_code == 201
        yield client


def kube_patch(client: httpx.AsyncClient) -> batcher.PatchFn:
    async def patch(ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
        url = f"/apis/agenthealth.dev/v1alpha1/namespaces/{ref.namespace}/evaluationruns"
        answer = await client.patch(f"{url}/{ref.name}/status", json=body, headers=MERGE)
        assert answer.status_code == 200, answer.text  # the CRD schema accepts our status
        result: Mapping[str, Any] = answer.json()
        return result

    return patch


async def test_statuses_are_accepted_by_the_crd_and_echoes_are_recognised(
    api: httpx.AsyncClient,
) -> None:
    clock = Clock()
    tally = running_tally(clock, ["a0", "a1", "b0", "b1"], repeats=2)
    patches = batcher.StatusBatcher(kube_patch(api), clock=clock)
    await patches.update(RUN, tally.wire)
    for i, (cell, state) in enumerate([("a0", "passed"), ("a1", "failed"), ("b0", "errored")]):
        clock.t = 2.0 * (i + 1)
        tally.record(grade(cell, cell[0], int(cell[1]), state, 0.5))  # type: ignore[arg-type]
        await patches.update(RUN, tally.wire)
    tally.record(grade("b1", "b", 1, "passed", 1.0))
    await patches.flush(RUN, tally.wire)
    stored = (await api.get(f"{RUNS}/nightly")).json()
    assert stored["status"]["phase"] == "Succeeded"
    assert stored["status"]["counts"] == {
        "total": 4,
        "pending": 0,
        "queued": 0,
        "running": 0,
        "passed": 2,
        "failed": 1,
        "errored": 1,
        "skipped": 0,
        "erroredByCause": {"agent": 0, "judge": 0, "test": 0, "infra": 1},
        "unverifiedClaims": 0,
        "conversations": 0,
        "goalMet": 0,
    }
    # b's infra-errored repeat leaves it one decided repeat, too few for pass@2: a decides.
    assert stored["status"]["passAtK"] == 1.0
    assert stored["status"]["passHatK"] == 0.0
    assert json.loads(json.dumps(stored["status"]))["tests"][0]["id"] == "a"
    assert patches.is_own_echo(stored)
    # Someone else changes the object: not our echo.
    labelled = await api.patch(
        f"{RUNS}/nightly", json={"metadata": {"labels": {"team": "x"}}}, headers=MERGE
    )
    assert not patches.is_own_echo(labelled.json())
    assert not patches.is_own_echo({"metadata": {"name": "other", "namespace": "default"}})
