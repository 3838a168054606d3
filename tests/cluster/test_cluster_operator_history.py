"""The operator records every finished EvaluationRun in the history (docs/operator.md, "The
history"), against the API emulator: into SQLite and into the real PostgreSQL the tests start,
each (test, repeat) a result, the agent's pinned image its identity, with the counts of the
run's status; a history that cannot be written never changes a run's grading, is said in a
condition, an Event and a log line, and is tried again a bounded number of times."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from agent_health import history
from agent_health.cluster.reconcile import historian
from support.operator_support import (
    Cell,
    Cluster,
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    listing,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(
    ("suite/t.py::passes", ["smoke"]),
    ("suite/t.py::fails", []),
    ("suite/t.py::evicted", []),
    ("suite/t.py::also passes", []),
)
FAST = (0.05,) * 3
"""Retries of a failed recording, quick (the operator's own are minutes apart)."""


def outcome(cell: Cell) -> str:
    title = cell.test_id.split("::")[-1]
    return {"fails": "failed", "evicted": "evicted"}.get(title, "passed")


def run_named(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    base = {k: v for k, v in run["spec"].items() if k != "selection"}
    body = base | {"repeats": 2, "parallelism": 4, "retry": {"infraRetries": 0}} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


def recorded(k8s: Cluster, name: str) -> dict[str, Any] | None:
    """The run's ``Recorded`` condition once it is set, else None (for :func:`until`)."""
    status = k8s.run(name).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == "Recorded"), None)


def settled(k8s: Cluster, name: str, reason: str) -> dict[str, Any] | None:
    found = recorded(k8s, name)
    return found if found is not None and found["reason"] == reason else None


def events_of(k8s: Cluster, name: str) -> list[dict[str, Any]]:
    kind = k8s.emulator.store.kinds[("", "events")]
    found = k8s.emulator.store.list(kind, "default", lambda _labels: True)
    return [e for e in found if e["involvedObject"]["name"] == name]


def target_images(k8s: Cluster) -> set[str]:
    return {
        next(c["image"] for c in pod["spec"]["initContainers"] if c["name"] == "target")
        for pod in k8s.pods()
    }


def same_counts(run: history.Run, status: dict[str, Any]) -> None:
    counts = status["counts"]
    got = (run.total, run.passed, run.failed, run.errored, run.skipped)
    assert got == tuple(counts[k] for k in ("total", "passed", "failed", "errored", "skipped"))
    assert run.errored_by_cause == counts["erroredByCause"]
    assert run.pass_rate == pytest.approx(status["passRate"])
    interval = status["passRateInterval"]
    assert run.pass_rate_interval is not None
    assert (run.pass_rate_interval.low, run.pass_rate_interval.high) == pytest.approx(
        (interval["low"], interval["high"])
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def where(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> history.Location:
    """A history as the chart gives one: a SQLite file on a volume, or PostgreSQL with the
    password in a mounted Secret's file (never in the URL)."""
    if request.param == "sqlite":
        return history.parse(f"sqlite:///{tmp_path}/history/history.db")
    from support import postgres_support

    server: postgres_support.Server = request.getfixturevalue("postgres_server")
    secret = tmp_path / "password"
    secret.write_text(postgres_support.PASSWORD + "\n")
    monkeypatch.setenv("AGENT_HEALTH_HISTORY_PASSWORD_FILE", str(secret))
    return history.parse(server.url(server.new_database()))


async def test_a_finished_run_is_recorded_with_the_counts_of_its_status(
    where: history.Location, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_health.operator")
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)),
            k8s.operator(history=where, history_retry=FAST),
        ):
            await k8s.apply(runspec)
            created = await k8s.apply(run_named(run, "kept"))
            status = await until(lambda: finished(k8s, "kept"), "the run to end")
            said = await until(lambda: settled(k8s, "kept", "Recorded"), "the run recorded")
            images = target_images(k8s)
            events = events_of(k8s, "kept")
            body = k8s.run("kept")
    # Grading as ever: 4 tests x 2 repeats, one failing, one evicted (errored, infra).
    assert status["phase"] == "Succeeded"
    assert (status["counts"]["passed"], status["counts"]["failed"]) == (4, 2)
    assert status["counts"]["errored"] == 2
    uid = f"default.kept.{created['metadata']['uid']}"
    assert said["status"] == "True"
    assert f"as run {uid}: 8 results" in said["message"]
    assert any(e["reason"] == "Recorded" and e["type"] == "Normal" for e in events), events
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
        assert h.count() == (1, 8)  # one result per (test, repeat)
        timeline = {t.id: t for t in h.timeline("suite/t.py::")}
        flaky = h.flaky()
    assert kept.uid == uid
    assert kept.source == "operator"
    assert kept.suite == "default/triage"
    assert kept.repeats == 2
    assert kept.interrupted is False
    same_counts(kept, body["status"])
    # The agent is the RunSpec's target, known by the image its cells ran, pinned.
    assert kept.agent is not None
    assert kept.agent.name == "triage"
    assert kept.agent.connector == "rest"
    assert {kept.agent.image} == images
    assert "@sha256:" in (kept.agent.image or "")
    assert kept.judge_model == "gpt-4o-mini"
    assert kept.ledger_url == "configmap://default/triage-ledger-kept"
    assert kept.ledger_verified is True  # each cell's chain, verified as it was graded
    # Each (test, repeat) as a local run records it: status, cause, its messages, labels.
    assert sorted(timeline) == sorted(t["id"] for t in TESTS)
    assert timeline["suite/t.py::passes"].labels == ["smoke"]
    evicted = timeline["suite/t.py::evicted"].outcomes
    assert [(o.repeat, o.status, o.cause) for o in evicted] == [
        (0, "errored", "infra"),
        (1, "errored", "infra"),
    ]
    assert "Evicted" in evicted[0].messages[0] or "evicted" in evicted[0].messages[0]
    failing = timeline["suite/t.py::fails"].outcomes
    assert {o.status for o in failing} == {"failed"}
    assert any("to_have_called_tool(search_logs)" in m for m in failing[0].messages)
    assert all(o.content_hash for o in failing)
    assert flaky == []
    said_in_log = [r.getMessage() for r in caplog.records if "recorded in the history" in r.message]
    assert said_in_log, caplog.text
    if where.kind == "postgresql":
        from support import postgres_support

        text = json.dumps(body) + json.dumps(events) + caplog.text
        assert postgres_support.PASSWORD not in text


async def test_a_history_out_of_reach_leaves_grading_as_it_was_and_records_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its folder cannot be made (a file is where it should be): every open fails until the
    # file is moved away.
    blocker = tmp_path / "volume"
    blocker.write_text("not a folder")
    where = history.parse(f"sqlite:///{blocker}/history.db")
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)),
            k8s.operator(history=where, history_retry=(0.2,) * 100),
        ):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "later"))
            status = await until(lambda: finished(k8s, "later"), "the run to end")
            waiting = await until(
                lambda: settled(k8s, "later", "HistoryUnavailable"), "the first failure said"
            )
            graded = dict(k8s.run("later")["status"])
            blocker.unlink()
            said = await until(lambda: settled(k8s, "later", "Recorded"), "the run recorded")
            final = k8s.run("later")["status"]
            events = events_of(k8s, "later")
    assert status["phase"] == "Succeeded"
    assert (status["counts"]["passed"], status["counts"]["failed"]) == (4, 2)
    assert condition(status, "TestsPassed")["status"] == "False"
    assert waiting["status"] == "False"
    assert "not recorded in the history yet (attempt 1 of 101)" in waiting["message"]
    assert "cannot make its folder" in waiting["message"]
    assert "next try in 0.2 s" in waiting["message"]
    assert any(e["type"] == "Warning" and e["reason"] == "HistoryUnavailable" for e in events), (
        events
    )
    assert "not recorded in the history yet" in caplog.text
    # Its grading never moved for the history: only the Recorded condition did.
    for key in ("phase", "counts", "passRate", "score", "tests", "completionTime"):
        assert final.get(key) == graded.get(key) == status.get(key), key
    assert said["status"] == "True"
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
    same_counts(kept, final)


async def test_a_history_that_never_answers_is_given_up_and_says_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = tmp_path / "password"
    secret.write_text("pw-Never-Shown-4711\n")
    monkeypatch.setenv("AGENT_HEALTH_HISTORY_PASSWORD_FILE", str(secret))
    where = history.parse(f"postgresql://evals@127.0.0.1:{port}/history?connect_timeout=2")
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)),
            k8s.operator(history=where, history_retry=FAST),
        ):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "lost"))
            status = await until(lambda: finished(k8s, "lost"), "the run to end")
            said = await until(lambda: settled(k8s, "lost", "NotRecorded"), "the give-up said")
            body = k8s.run("lost")
            events = events_of(k8s, "lost")
    assert status["phase"] == "Succeeded"
    assert body["status"]["counts"] == status["counts"]
    assert said["status"] == "False"
    assert said["message"].startswith(
        f"not recorded in the history postgresql://evals@127.0.0.1:{port}/history: gave up "
        "after 4 attempts; the last: history "
    )
    assert "unreachable or refused" in said["message"]
    reasons = [e["reason"] for e in events if e["type"] == "Warning"]
    assert reasons.count("HistoryUnavailable") == 3
    assert "NotRecorded" in reasons
    assert "gave up after 4 attempts" in caplog.text
    assert "pw-Never-Shown-4711" not in json.dumps(body) + json.dumps(events) + caplog.text


async def test_a_run_recorded_again_is_the_same_run(tmp_path: Path) -> None:
    # A restarted operator that grades a run again records it under the same identity: the
    # history keeps one run, and says it was there already.
    where = history.parse(f"sqlite:///{tmp_path}/history.db")
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS[:2], LEDGER, outcome=outcome)),
            k8s.operator(history=where, history_retry=FAST) as op,
        ):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "twice"))
            live = await until(lambda: next(iter(op.runs.runs.values()), None), "the run")
            await until(lambda: settled(k8s, "twice", "Recorded"), "the run recorded")
            await op.runs.historian.keep(live, historian.ended(live))
            again = recorded(k8s, "twice")
    assert again is not None
    assert again["status"] == "True"
    uid = historian.history_uid(live)
    assert (
        again["message"] == f"in the history sqlite:///{tmp_path}/history.db already as run {uid}"
    )
    with history.open_history(where, create=False) as h:
        assert h.count() == (1, 4)


async def test_an_agent_matrix_records_one_run_per_agent_each_with_its_image(
    tmp_path: Path,
) -> None:
    where = history.parse(f"sqlite:///{tmp_path}/history.db")
    tests = listing(*((f"suite/t.py::test {n}", []) for n in range(3)))
    async with cluster() as k8s:

        def faulty(cell: Cell) -> str:
            pod = k8s.emulator.read("pods", "default", cell.name)
            agent = pod["metadata"]["labels"]["agenthealth.dev/agent"]
            return "failed" if agent == "faulty" and cell.test_id.endswith("0") else "passed"

        runspec, run = k8s.example(ledger=LEDGER)
        target = runspec["spec"]["target"]
        broken = target | {"name": "faulty", "image": target["image"].replace(":0.1.0", ":bad")}
        runspec["spec"]["targets"] = [target | {"name": "good"}, broken]
        async with (
            kubelet(Kubelet(k8s, tests, LEDGER, outcome=faulty)),
            k8s.operator(history=where, history_retry=FAST),
        ):
            await k8s.apply(runspec)
            created = await k8s.apply(run_named(run, "side", repeats=1, agents=["good", "faulty"]))
            status = await until(lambda: finished(k8s, "side"), "the run to end")
            said = await until(lambda: settled(k8s, "side", "Recorded"), "the run recorded")
            images = {
                pod["metadata"]["labels"]["agenthealth.dev/agent"]: next(
                    c["image"] for c in pod["spec"]["initContainers"] if c["name"] == "target"
                )
                for pod in k8s.pods()
            }
    uid = f"default.side.{created['metadata']['uid']}"
    assert f"as runs {uid}/faulty, {uid}/good: 6 results" in said["message"]
    with history.open_history(where, create=False) as h:
        runs = {r.agent.name: r for r in h.runs() if r.agent is not None}
    assert sorted(runs) == ["faulty", "good"]
    assert {r.group for r in runs.values()} == {uid}
    agents = {a["name"]: a for a in status["agents"]}
    for name, kept in runs.items():
        assert kept.agent is not None
        assert kept.agent.image == images[name]
        assert (kept.passed, kept.failed) == (agents[name]["passed"], agents[name]["failed"])
        assert kept.pass_rate == pytest.approx(agents[name]["passRate"])
    assert runs["good"].agent.image != runs["faulty"].agent.image  # type: ignore[union-attr]


async def test_a_run_stopped_at_its_deadline_records_what_was_graded_marked_so(
    tmp_path: Path,
) -> None:
    where = history.parse(f"sqlite:///{tmp_path}/history.db")
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator(history=where, history_retry=FAST):
            await k8s.apply(runspec)
            await k8s.apply(
                run_named(run, "cut", repeats=1, parallelism=2, activeDeadlineSeconds=12)
            )
            await until(lambda: len(fake.held) == 2, "two running cells")
            await fake.release(next(iter(fake.held)))  # one is graded before the deadline
            status = await until(lambda: finished(k8s, "cut"), "the run to end")
            await until(lambda: settled(k8s, "cut", "Recorded"), "the run recorded")
    assert status["phase"] == "Failed"
    assert status["counts"]["passed"] == 1
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
    assert (kept.total, kept.passed) == (1, 1)  # what was graded, no more
    assert kept.not_run == 3
    assert kept.interrupted is True
    assert kept.incomplete
    assert kept.stopped is not None
    assert kept.stopped.startswith("DeadlineExceeded: activeDeadlineSeconds (12 s) passed")
    with (
        history.open_history(where, create=False) as h,
        pytest.raises(history.NotFoundError),  # never a green baseline
    ):
        h.baseline("last-green", agent="triage", suite="default/triage")


async def test_a_run_with_a_cell_whose_ledger_did_not_verify_records_so(tmp_path: Path) -> None:
    where = history.parse(f"sqlite:///{tmp_path}/history.db")

    def forged(cell: Cell) -> str:  # one cell's records sealed with another key
        return "tampered" if cell.test_id.endswith("fails") else "passed"

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS[:2], LEDGER, outcome=forged)),
            k8s.operator(history=where, history_retry=FAST),
        ):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "forged", repeats=1))
            status = await until(lambda: finished(k8s, "forged"), "the run to end")
            await until(lambda: settled(k8s, "forged", "Recorded"), "the run recorded")
    assert status["counts"]["errored"] == 1
    assert "ledger tampered" in status["tests"][0]["error"]
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
    assert kept.ledger_verified is False


async def test_a_requeued_run_is_recorded_again_as_its_next_attempt(tmp_path: Path) -> None:
    # Its errored cells requeued after it finished: the same run, its new grades replacing
    # the first attempt's in the history, as they did in its status.
    where = history.parse(f"sqlite:///{tmp_path}/history.db")
    runs = "/apis/agenthealth.dev/v1alpha1/namespaces/default/evaluationruns"

    def evicted_once(cell: Cell) -> str:
        return "evicted" if cell.test_id.endswith("fails") and cell.attempt == 0 else "passed"

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with (
            kubelet(Kubelet(k8s, TESTS[:2], LEDGER, outcome=evicted_once)),
            k8s.operator(history=where, history_retry=FAST),
        ):
            await k8s.apply(runspec)
            created = await k8s.apply(run_named(run, "again"))
            first = await until(lambda: finished(k8s, "again"), "the run to end")
            await until(lambda: settled(k8s, "again", "Recorded"), "the first attempt recorded")
            with history.open_history(where, create=False) as h:
                (before,) = h.runs()
            answer = await k8s.client.patch(
                f"{runs}/again",
                json={"spec": {"requeueErrored": 1}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            assert answer.status_code == 200, answer.text

            def again() -> dict[str, Any] | None:
                said = recorded(k8s, "again")
                return said if said is not None and "attempt 1" in said["message"] else None

            said = await until(again, "the requeued attempt recorded")
            final = k8s.run("again")["status"]
    assert (first["counts"]["passed"], first["counts"]["errored"]) == (2, 2)
    assert (before.attempt, before.passed, before.errored) == (0, 2, 2)
    assert final["requeuedErrored"] == 1
    assert (final["counts"]["passed"], final["counts"]["errored"]) == (4, 0)
    uid = f"default.again.{created['metadata']['uid']}"
    assert said["status"] == "True"
    assert said["message"].endswith(
        f"as run {uid}: 4 results (attempt 1, its requeued cells graded again: they replace "
        "attempt 0's)"
    )
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
        assert h.count() == (1, 4)
        outcomes = {o.status for t in h.timeline("suite/t.py::") for o in t.outcomes}
    assert (kept.uid, kept.attempt) == (uid, 1)
    same_counts(kept, final)
    assert outcomes == {"passed"}


async def _owed(k8s: Cluster, blocker: Path, where: history.Location, name: str) -> dict[str, Any]:
    """A run ended while its history was out of reach; the operator stopped before its next
    try. The run's status as it was left."""
    runspec, run = k8s.example(ledger=LEDGER)
    async with k8s.operator(history=where, history_retry=(3600.0,)):
        await k8s.apply(runspec)
        await k8s.apply(run_named(run, name))
        await until(lambda: finished(k8s, name), "the run to end")
        await until(lambda: settled(k8s, name, "HistoryUnavailable"), "the first try failed")
    await asyncio.to_thread(blocker.unlink)  # the history is back, for the next operator
    return dict(k8s.run(name)["status"])


async def test_a_recording_owed_when_the_operator_stopped_is_made_by_the_next(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "volume"
    blocker.write_text("not a folder")
    where = history.parse(f"sqlite:///{blocker}/history.db")
    async with cluster() as k8s, kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)):
        left = await _owed(k8s, blocker, where, "owed")
        async with k8s.operator(history=where, history_retry=FAST):
            said = await until(lambda: settled(k8s, "owed", "Recorded"), "recorded at last")
            final = k8s.run("owed")["status"]
            events = events_of(k8s, "owed")
    assert left["phase"] == "Succeeded"
    assert (left["counts"]["passed"], left["counts"]["failed"], left["counts"]["errored"]) == (
        4, 2, 2,
    )  # fmt: skip
    assert said["status"] == "True"
    assert said["message"].endswith(
        ": 8 results (graded again from its ledger after an operator restart)"
    )
    assert any(e["reason"] == "Recorded" and e["type"] == "Normal" for e in events)
    # The status is the one the run ended with: only the Recorded condition moved.
    for key in ("phase", "counts", "passRate", "score", "tests", "completionTime"):
        assert final.get(key) == left.get(key), key
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
        timeline = {t.id: t for t in h.timeline("suite/t.py::")}
    same_counts(kept, final)
    assert (kept.interrupted, kept.ledger_verified) == (False, True)
    assert kept.agent is not None
    assert "@sha256:" in (kept.agent.image or "")
    evicted = timeline["suite/t.py::evicted"].outcomes
    assert [(o.status, o.cause) for o in evicted] == [("errored", "infra")] * 2
    assert timeline["suite/t.py::passes"].labels == ["smoke"]


async def test_an_owed_run_whose_cells_are_gone_records_what_its_ledger_holds_marked_so(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "volume"
    blocker.write_text("not a folder")
    where = history.parse(f"sqlite:///{blocker}/history.db")
    async with cluster() as k8s, kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)):
        left = await _owed(k8s, blocker, where, "pruned")
        for pod in k8s.pods():  # its ttlSecondsAfterFinished passed meanwhile
            gone = await k8s.client.delete(
                f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}"
            )
            assert gone.status_code == 200, gone.text
        async with k8s.operator(history=where, history_retry=FAST):
            said = await until(lambda: settled(k8s, "pruned", "Recorded"), "recorded")
    assert left["counts"]["errored"] == 2
    assert said["status"] == "True"
    assert (
        "6 results (graded again from its ledger after an operator restart; graded again"
        in (said["message"])
    )
    assert "0 errored of 2" in said["message"]
    assert "2 cells left no pod and no record" in said["message"]
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
    assert (kept.passed, kept.failed, kept.errored) == (4, 2, 0)  # never made up
    assert kept.incomplete
    assert kept.stopped is not None
    assert kept.stopped.startswith("graded again after an operator restart")


async def test_a_run_whose_first_try_the_operator_never_finished_is_owed_to_the_next(
    tmp_path: Path,
) -> None:
    """The run ends while its history hangs (another writer holds it); the operator stops
    before the first try is said. The run's last status write said it was being recorded,
    so the next operator grades it again and records it."""
    import sqlite3
    import threading

    path = tmp_path / "history.db"
    history.open_history(f"sqlite:///{path}").close()
    where = history.parse(f"sqlite:///{path}?timeout=2")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # every writer waits its busy timeout, then fails

    def lingering() -> bool:  # the stopped operator's recording thread, still waiting
        return any(t.name.startswith("history") and t.is_alive() for t in threading.enumerate())

    async with cluster() as k8s, kubelet(Kubelet(k8s, TESTS[:2], LEDGER, outcome=outcome)):
        runspec, run = k8s.example(ledger=LEDGER)
        async with k8s.operator(history=where, history_retry=(3600.0,)):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "cut-short"))
            left = await until(lambda: finished(k8s, "cut-short"), "the run to end")
        said = condition(left, "Recorded")
        await until(lambda: not lingering(), "the stopped operator's try to give up")
        await asyncio.to_thread(holder.execute, "ROLLBACK")
        async with k8s.operator(history=where, history_retry=FAST):
            done = await until(lambda: settled(k8s, "cut-short", "Recorded"), "recorded")
    holder.close()
    assert (said["status"], said["reason"]) == ("Unknown", "Recording")
    assert said["message"] == f"being recorded in the history sqlite:///{path}"
    assert done["status"] == "True"
    assert "graded again from its ledger after an operator restart" in done["message"]
    with history.open_history(where, create=False) as h:
        (kept,) = h.runs()
    same_counts(kept, left)
