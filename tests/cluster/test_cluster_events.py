"""Event bodies: reason and message rules, dedup into count bumps, accepted by Kubernetes."""

from __future__ import annotations

import datetime

import httpx
import kubernetes_validate
import pytest
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import events
from support.kube import serve

T0 = datetime.datetime(2025, 1, 1, 12, 0, tzinfo=datetime.UTC)
RUN = {
    "apiVersion": "agenthealth.dev/v1alpha1",
    "kind": "EvaluationRun",
    "metadata": {"name": "nightly", "namespace": "team-a", "uid": "u-1"},
}
REF = events.involved_ref(RUN)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ImageUnresolvable", "ImageUnresolvable"),
        ("image pull-failed", "ImagePullFailed"),
        ("ledger: tampered!", "LedgerTampered"),
        ("404 not found", "NotFound"),
        ("", "Unknown"),
        ("x" * 300, "X" + "x" * 127),
    ],
)
def test_reasons_are_camel_case(text: str, reason: str) -> None:
    assert events.to_reason(text) == reason


def test_a_short_message_is_kept_whole() -> None:
    assert events.truncate_message("fine") == "fine"
    exact = "x" * 1024
    assert events.truncate_message(exact) == exact


def test_a_long_message_keeps_its_start_and_end_within_1024_bytes() -> None:
    message = "start " + "x" * 5000 + " the real error"
    cut = events.truncate_message(message)
    assert len(cut.encode()) == 1024
    assert cut.startswith("start ")
    assert cut.endswith(" the real error")
    assert "..." in cut


def test_multibyte_messages_are_cut_on_character_boundaries() -> None:
    cut = events.truncate_message("é" * 1000)  # 2,000 bytes
    assert len(cut.encode()) <= 1024
    assert set(cut) == {"é", "."}


def test_the_same_event_within_the_window_bumps_the_count() -> None:
    clock = Clock()
    recorder = events.EventRecorder(window=60, clock=clock)
    first = recorder.error(REF, "ImageUnresolvable", "manifest unknown")
    assert first.action == "create"
    assert first.body["count"] == 1
    clock.advance(30)
    second = recorder.error(REF, "ImageUnresolvable", "manifest unknown")
    assert second.action == "bump"
    assert second.name == first.name
    assert second.patch == {"count": 2, "lastTimestamp": "2025-01-01T12:00:30Z"}
    assert second.body["firstTimestamp"] == "2025-01-01T12:00:00Z"
    other = recorder.error(REF, "ImageUnresolvable", "another message")
    assert other.action == "create"
    assert other.name != first.name
    clock.advance(61)  # past the window since the last one
    third = recorder.error(REF, "ImageUnresolvable", "manifest unknown")
    assert third.action == "create"
    assert third.name != first.name


def test_dedup_keeps_a_bounded_memory() -> None:
    clock = Clock()
    recorder = events.EventRecorder(window=600, max_keys=3, clock=clock)
    for i in range(5):
        recorder.error(REF, "Boom", f"error {i}")
    assert recorder.error(REF, "Boom", "error 4").action == "bump"
    assert recorder.error(REF, "Boom", "error 0").action == "create"  # forgotten


def test_phase_changes_and_errored_cells() -> None:
    recorder = events.EventRecorder(clock=Clock())
    running = recorder.phase_changed(REF, "Resolving", "Running", "12 cells")
    assert (running.body["type"], running.body["reason"]) == ("Normal", "Running")
    assert running.body["message"] == "Resolving → Running: 12 cells"
    failed = recorder.phase_changed(REF, "Resolving", "Failed", "no tests matched")
    assert (failed.body["type"], failed.body["reason"]) == ("Warning", "Failed")
    expected = grading.ExpectedCell(test_id="suite/a.py::a", repeat=2, run_id="r")
    tampered = grading.grade_lines("c7", ["{}"], b"k" * 32, expected)
    emitted = recorder.cell_errored(REF, tampered)
    assert emitted is not None
    assert emitted.body["reason"] == "LedgerTampered"
    assert emitted.body["message"].startswith(
        "suite/a.py::a (repeat 2, cell c7, cause agent): ledger tampered at record 0"
    )
    missing = grading.grade_lines("c8", [], b"k" * 32, expected)
    assert recorder.cell_errored(REF, missing).body["reason"] == "LedgerMissing"  # type: ignore[union-attr]
    passed = missing.model_copy(update={"status": "passed"})
    assert recorder.cell_errored(REF, passed) is None


def test_bodies_match_the_kubernetes_event_schema() -> None:
    recorder = events.EventRecorder(clock=Clock())
    body = recorder.error(REF, "boom", "x" * 3000).body
    assert kubernetes_validate.validate(body, "1.31", strict=True) == "1.31"
    assert body["involvedObject"] == {
        "apiVersion": "agenthealth.dev/v1alpha1",
        "kind": "EvaluationRun",
        "name": "nightly",
        "namespace": "team-a",
        "uid": "u-1",
    }


async def test_events_are_created_then_bumped_on_the_api_server() -> None:
    clock = Clock()
    recorder = events.EventRecorder(clock=clock)
    base = "/api/v1/namespaces/team-a/events"
    merge = {"Content-Type": "application/merge-patch+json"}
    async with serve() as (_, url), httpx.AsyncClient(base_url=url) as client:
        first = recorder.error(REF, "Boom", "it broke")
        assert (await client.post(base, json=first.body)).status_code == 201
        clock.advance(5)
        again = recorder.error(REF, "Boom", "it broke")
        assert again.patch is not None
        answer = await client.patch(f"{base}/{again.name}", json=again.patch, headers=merge)
        assert answer.status_code == 200
        stored = answer.json()
    assert stored["count"] == 2
    assert stored["lastTimestamp"] == "2025-01-01T12:00:05Z"
    assert stored["firstTimestamp"] == "2025-01-01T12:00:00Z"
