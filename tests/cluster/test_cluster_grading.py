"""Grading cells from real ledgers: HMAC chains written by ``chain.Writer`` on real backends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading
from agent_health.ledger import backends, chain, filestore, records, store
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results
from support import ledger_support
from support.kube import serve

KEY = b"g" * 32
TEST = "suite/rca.py::payment rca"
EXPECTED = grading.ExpectedCell(test_id=TEST, repeat=1, run_id="run-abc", labels=("rca",))
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def meta(test_id: str = TEST, repeat: int = 1, run_id: str = "run-abc") -> records.CellMeta:
    return records.CellMeta(test_id=test_id, repeat=repeat, run_id=run_id, started_at=T0)


def exchange(
    principal: str, upstream: str, usage: tuple[int, int] | None = None, evidence: str = "tok"
) -> records.Exchange:
    return ledger_support.exchange(
        principal=principal,
        evidence=evidence if principal != "target" else "none",
        upstream=upstream,
        path="/v1/chat/completions" if usage else "/run",
        started_at=T0,
        ended_at=T0,
        request_bytes=12,
        usage=None
        if usage is None
        else ledger_usage.TokenUsage(
            input_tokens=usage[0], output_tokens=usage[1], total_tokens=sum(usage), model="m"
        ),
    )


def run_result(run_id: str = "run-abc") -> records.RunResultRecord:
    return records.RunResultRecord(
        run_id=run_id,
        prompt="Diagnose the payment service.",
        output="payment-service cannot reach db-primary",
        trajectory=[
            {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"q": "payment"}},
            {"type": "tool_result", "tool_name": "search_logs", "tool_output": "refused"},
            {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"q": "payment"}},
            {"type": "tool_result", "tool_name": "search_logs", "tool_output": "refused"},
            {"type": "assistant", "content": "payment-service cannot reach db-primary"},
        ],
        token_usage={"prompt": 300, "completion": 40},
        duration_ms=1500.0,
    )


def signal(name: str, passed: bool | None, **extra: Any) -> records.SignalRecord:
    fields: dict[str, Any] = {"kind": "deterministic", "role": "gate", "name": name}
    fields |= {"passed": passed, "score": None if passed is None else float(passed)} | extra
    return records.SignalRecord(signal=results.Signal(**fields).model_dump(mode="json"))


def judge_signal(score: float, *, cached: bool = False, error: str | None = None) -> Any:
    evidence = {"cached": cached, "model": "judge-m", "skipped": False, "errored": bool(error)}
    evidence |= {"input_tokens": 50, "output_tokens": 10}
    return signal(
        "names the DB outage",
        None if error else score >= 0.5,
        kind="judge",
        score=None if error else score,
        error=error,
        evidence=evidence,
    )


def end(status: str = "passed", error: str | None = None) -> records.CellEnd:
    return records.CellEnd(status=status, exit_code=0, error=error, duration_ms=2000.0)  # type: ignore[arg-type]


def passing_cell() -> list[records.Record]:
    return [
        meta(),
        exchange("controller", "target"),
        exchange("target", "peer:llm", usage=(200, 30)),
        exchange("target", "peer:llm", usage=(100, 10)),
        run_result(),
        signal("to_have_called_tool(search_logs)", True),
        exchange("controller", "judge", usage=(50, 10)),
        judge_signal(0.8),
        end("passed"),
    ]


@pytest.fixture
def backend(tmp_path: Path) -> filestore.FileBackend:
    return filestore.FileBackend(tmp_path / "ledger")


async def write(backend: store.Backend, cell: str, items: list[records.Record]) -> None:
    writer = chain.Writer(backend, cell, KEY)
    await writer.append(*items)


async def grade(backend: store.Backend, cell: str = "c1") -> grading.CellGrade:
    return await grading.grade_cell(backend, cell, KEY, EXPECTED)


async def test_a_passing_cell_is_graded_from_its_records(backend: filestore.FileBackend) -> None:
    await write(backend, "c1", passing_cell())
    graded = await grade(backend)
    assert graded.status == "passed", graded.error
    assert graded.error is None
    assert graded.discrepancy is None
    assert graded.score == pytest.approx(0.9)  # mean of the gate (1.0) and the judge (0.8)
    assert graded.records == 9
    assert graded.metrics["tool_calls"] == 2
    assert graded.metrics["redundant_tool_calls"] == 1
    assert graded.metrics["total_tokens"] == 340
    assert graded.result.id == TEST
    assert graded.result.repeat == 1
    assert graded.result.prompt == "Diagnose the payment service."
    assert graded.result.labels == ("rca",)
    assert graded.duration_ms == 2000.0
    assert graded.verified is True  # its HMAC chain, checked as it was read
    # Derived metrics live in result.metrics (reports list them as signals), as in a local run.
    assert not [s for s in graded.result.signals if s.kind == "metric"]


async def test_token_usage_is_summed_by_consumer(backend: filestore.FileBackend) -> None:
    await write(backend, "c1", passing_cell())
    graded = await grade(backend)
    assert set(graded.usage) == {"target", "judge"}
    target = graded.usage["target"]
    assert (target.input_tokens, target.output_tokens, target.total_tokens) == (300, 40, 340)
    assert graded.usage["judge"].total_tokens == 60
    assert graded.judge.calls == 1
    assert graded.judge.total_tokens == 60


async def test_a_failing_cell_fails_with_its_score(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items[5] = signal("to_have_called_tool(restart_db)", False)
    items[-1] = end("failed")
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.status == "failed"
    assert graded.score == pytest.approx(0.4)
    assert graded.discrepancy is None


async def test_an_errored_cell_carries_the_real_message(backend: filestore.FileBackend) -> None:
    await write(
        backend,
        "c1",
        [meta(), exchange("controller", "target"), run_result(), end("errored", "boom: x")],
    )
    graded = await grade(backend)
    assert (graded.status, graded.error, graded.score) == ("errored", "boom: x", None)
    assert graded.retryable is False
    assert graded.infra is False


async def test_a_pure_data_test_needs_no_run_result(backend: filestore.FileBackend) -> None:
    await write(backend, "c1", [meta(), signal("to_equal", True), end("passed")])
    graded = await grade(backend)
    assert graded.status == "passed"
    assert graded.score == 1.0
    assert graded.metrics == {}


async def test_a_refused_forgery_does_not_make_a_data_test_doubtful(
    backend: filestore.FileBackend,
) -> None:
    refused = exchange("target", "gateway").model_copy(update={"status": 403, "version": 2})
    await write(backend, "c1", [meta(), refused, signal("to_equal", True), end("passed")])
    graded = await grade(backend)
    assert (graded.status, graded.error) == ("passed", None)


async def test_agent_traffic_without_a_run_result_is_doubtful(
    backend: filestore.FileBackend,
) -> None:
    items = [meta(), exchange("controller", "target"), signal("ok", True), end("passed")]
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error == (
        "no run-result record from controller, yet the gateway recorded the target's "
        "exchange at record 1"
    )


def spans(run_id: str = "run-abc", principal: str = "target") -> records.SpansRecord:
    span = {"trace_id": "ab" * 16, "span_id": "cd" * 8, "name": "chat m", "attributes": {}}
    return records.SpansRecord(
        principal=principal,
        run_id=run_id,
        trace_id="ab" * 16,
        content_type="application/json",
        request_bytes=10,
        request_sha256="e" * 64,
        spans=[span],
        time=T0,
    )


async def test_a_cell_with_the_agents_spans_grades_as_one_without(
    backend: filestore.FileBackend,
) -> None:
    cell = passing_cell()
    await write(backend, "c1", [*cell[:2], spans(), *cell[2:]])
    graded = await grade(backend)
    assert graded.status == "passed", graded.error
    assert graded.records == 10


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (spans(run_id="run-other"), "are of run 'run-other', the cell is run 'run-abc'"),
        (spans(principal="controller"), "attributed to controller without token evidence"),
    ],
)
async def test_spans_of_another_run_or_a_forged_principal_are_doubtful(
    backend: filestore.FileBackend, record: records.SpansRecord, says: str
) -> None:
    cell = passing_cell()
    await write(backend, "c1", [*cell[:2], record, *cell[2:]])
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error is not None
    assert says in graded.error


async def test_a_missing_cell_is_errored(backend: filestore.FileBackend) -> None:
    graded = await grade(backend, "nowhere")
    assert (graded.status, graded.error) == ("errored", "no ledger for cell nowhere")
    assert graded.verified is None  # nothing to verify


async def test_no_cell_end_means_no_final_record(backend: filestore.FileBackend) -> None:
    await write(backend, "c1", passing_cell()[:-1])
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error is not None
    assert graded.error.startswith("no final record from controller: ")
    assert "after record 7 without cell-end" in graded.error
    assert graded.verified is False  # cut short: the chain does not verify as a whole


def _lines(backend: filestore.FileBackend, cell: str = "c1") -> list[str]:
    return backend.path(cell).read_text().splitlines()


def _store(backend: filestore.FileBackend, lines: list[str], cell: str = "c1") -> None:
    backend.path(cell).write_text("".join(f"{line}\n" for line in lines))


async def test_an_edited_record_is_tampering(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items[5] = signal("to_have_called_tool(restart_db)", False)
    items[-1] = end("failed")
    await write(backend, "c1", items)
    lines = _lines(backend)
    edited = json.loads(lines[5])
    edited["signal"]["passed"], edited["signal"]["score"] = True, 1.0  # forge a pass
    lines[5] = json.dumps(edited)
    _store(backend, lines)
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error is not None
    assert graded.error.startswith("ledger tampered at record 5 (edited: mac mismatch")
    assert graded.verified is False


async def test_a_deleted_record_is_tampering(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items[5] = signal("to_have_called_tool(restart_db)", False)
    await write(backend, "c1", items)
    lines = _lines(backend)
    _store(backend, lines[:5] + lines[6:])
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error is not None
    assert graded.error.startswith("ledger tampered at record 5 (removed: found seq 6")


async def test_reordered_records_are_tampering(backend: filestore.FileBackend) -> None:
    await write(backend, "c1", passing_cell())
    lines = _lines(backend)
    lines[2], lines[3] = lines[3], lines[2]
    _store(backend, lines)
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error is not None
    assert graded.error.startswith("ledger tampered at record 2 (reordered:")


async def test_a_chain_copied_from_another_cell_does_not_grade(
    backend: filestore.FileBackend,
) -> None:
    other = passing_cell()
    other[0] = meta(test_id="suite/rca.py::easy one", repeat=0)
    await write(backend, "other", other)
    _store(backend, _lines(backend, "other"), "c1")  # a valid chain, under the wrong name
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error == (
        "ledger belongs to another cell (test 'suite/rca.py::easy one', expected "
        "'suite/rca.py::payment rca'; repeat 0, expected 1)"
    )
    assert graded.verified is True  # it verifies: it is only not this cell's


async def test_another_run_of_the_same_test_does_not_grade(
    backend: filestore.FileBackend,
) -> None:
    items = passing_cell()
    items[0] = meta(run_id="run-old")
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.error == "ledger belongs to another cell (run 'run-old', expected 'run-abc')"


async def test_a_chain_sealed_with_another_key_is_tampering(
    backend: filestore.FileBackend,
) -> None:
    await chain.Writer(backend, "c1", b"x" * 32).append(*passing_cell())
    graded = await grade(backend)
    assert graded.error is not None
    assert graded.error.startswith("ledger tampered at record 0")


async def test_a_controller_claiming_a_pass_over_a_failed_gate_fails(
    backend: filestore.FileBackend,
) -> None:
    items = passing_cell()
    items[5] = signal("to_have_called_tool(restart_db)", False)
    await write(backend, "c1", items)  # cell-end still says passed
    graded = await grade(backend)
    assert graded.status == "failed"
    assert graded.reported_status == "passed"
    assert graded.discrepancy == "the controller reported passed, its recorded signals give failed"


async def test_a_disagreement_never_yields_a_pass(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items[-1] = end("failed")  # every recorded gate passed
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error == (
        "doubtful evidence: the controller reported failed, its recorded signals give passed"
    )


async def test_an_errored_judge_errors_the_cell_even_if_the_controller_forgot(
    backend: filestore.FileBackend,
) -> None:
    items = passing_cell()
    items[7] = judge_signal(0.0, error="HTTP 503")
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.status == "errored"
    assert graded.error == "judge errored on 'names the DB outage': HTTP 503"
    assert graded.discrepancy is not None


async def test_a_trusted_principal_without_token_evidence_is_doubtful(
    backend: filestore.FileBackend,
) -> None:
    items = passing_cell()
    items[1] = exchange("controller", "target", evidence="none")
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.error == (
        "exchange at record 1 is attributed to controller without token evidence"
    )


async def test_two_run_results_are_doubtful(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items.insert(5, run_result())
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.error == ("two run-result records (records 4 and 5); a test calls the agent once")


async def test_a_malformed_signal_is_doubtful(backend: filestore.FileBackend) -> None:
    items = passing_cell()
    items[5] = records.SignalRecord(signal={"kind": "vibes", "role": "gate", "name": "x"})
    await write(backend, "c1", items)
    graded = await grade(backend)
    assert graded.error is not None
    assert graded.error.startswith("signal at record 5: kind:")


async def test_an_unreadable_ledger_raises_to_be_retried(tmp_path: Path) -> None:
    store = filestore.FileBackend(tmp_path)
    (tmp_path / "c1.jsonl").mkdir()  # reading a directory fails with an OSError
    with pytest.raises(errors.LedgerUnavailable, match=r"cannot read the ledger of cell c1 at"):
        await grade(store)


@pytest.fixture
async def configmap() -> AsyncIterator[store.Backend]:
    async with serve() as (_, url):
        options = store.Options(kube_api_url=url, kube_token="t")
        backend = backends.from_url("configmap://default/ledger", options)
        try:
            yield backend
        finally:
            await backend.close()


async def test_cells_in_a_configmap_ledger_grade_the_same(configmap: store.Backend) -> None:
    await write(configmap, "c1", passing_cell())
    tampered = passing_cell()
    tampered[0] = meta(repeat=0)
    await write(configmap, "c2", tampered)
    assert (await grade(configmap, "c1")).status == "passed"
    assert (await grade(configmap, "c2")).error == (
        "ledger belongs to another cell (repeat 0, expected 1)"
    )


RETRY = evaluationrun.Retry(infra_retries=2, backoff_seconds=30)


@pytest.mark.parametrize(
    ("cause", "attempt", "retryable", "note"),
    [
        ("image-pull", 0, True, "retry 1 of 2"),
        ("evicted", 1, True, "retry 2 of 2"),
        ("sidecar-oom", 2, False, "no retries left (2 allowed)"),
        ("deadline", 0, False, "not retried"),
        ("other", 0, False, "not retried"),
    ],
)
def test_a_failed_pod_is_errored_and_retried_only_for_infrastructure(
    cause: grading.InfraCause, attempt: int, retryable: bool, note: str
) -> None:
    graded = grading.grade_failed_pod(
        "c1", EXPECTED, "pod lost", cause=cause, attempt=attempt, policy=RETRY
    )
    assert graded.status == "errored"
    assert graded.infra
    assert graded.retryable is retryable
    assert graded.retry_after_seconds == (30.0 if retryable else None)
    assert graded.error == f"infrastructure failure ({cause}): pod lost; {note}"
    assert graded.result.status == "errored"
    assert graded.score is None


async def test_a_ledger_moved_to_another_attempt_is_another_cells(
    backend: filestore.FileBackend,
) -> None:
    """Attempts of a cell share test, repeat and run id; their sealed cell-meta tells them
    apart, so the first attempt's ledger (say, a pass) cannot stand in for the retry's."""
    first = [meta().model_copy(update={"cell": "c1", "attempt": 0}), *passing_cell()[1:]]
    await write(backend, "c1", first)
    await backend.append("c1.a1", await backend.read("c1"))  # copied into the retry's place
    retry = EXPECTED.model_copy(update={"ledger_cell": "c1.a1", "attempt": 1})
    graded = await grading.grade_cell(backend, "c1", KEY, retry, ledger_cell="c1.a1")
    assert (graded.status, graded.cause) == ("errored", "agent")
    assert graded.error == (
        "ledger belongs to another cell (cell 'c1', expected 'c1.a1'; attempt 0, expected 1)"
    )
    own = EXPECTED.model_copy(update={"ledger_cell": "c1", "attempt": 0})
    assert (await grading.grade_cell(backend, "c1", KEY, own)).status == "passed"
    unnamed = [meta(), *passing_cell()[1:]]  # a cell-meta that names no attempt
    await write(backend, "c2", unnamed)
    graded = await grading.grade_cell(backend, "c2", KEY, own, ledger_cell="c2")
    assert graded.error is not None
    assert graded.error.startswith("ledger belongs to another cell (cell None, expected 'c1'")


async def test_a_gateway_restart_on_record_is_errored_infra_never_passed(
    backend: filestore.FileBackend,
) -> None:
    items = passing_cell()
    restarted = meta().model_copy(update={"restarted": True})
    await write(backend, "c1", [*items[:2], restarted, *items[2:]])
    graded = await grade(backend)
    assert (graded.status, graded.cause, graded.infra) == ("errored", "infra", True)
    assert graded.error is not None
    assert graded.error.startswith("the gateway restarted during the cell (record 2)")
