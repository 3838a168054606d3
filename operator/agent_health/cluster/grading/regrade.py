"""Grading a recorded ledger again, cell by cell (``agent-health grade URL``).

Each cell is graded as the operator grades it (:func:`grading.grade_lines`: the HMAC chain,
the controller's records, the recomputed status), with the cell's own first record saying
which test and repeat it claims to be. Whole ledgers of local runs and of clusters both
work: ``file://``, ``configmap://``, ``s3://``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from agent_health import ledger
from agent_health.cluster.grading import grading
from agent_health.ledger import backends, keys, records, store
from agent_health.sdk.results import TestResult


def expected_from(cell: str, lines: list[str]) -> grading.ExpectedCell:
    """What the cell says it is (its cell-meta), or a placeholder naming the cell."""
    for line in lines:
        if not line.strip():
            continue
        try:
            first = records.parse_line(line, 1)
        except ledger.RecordError:
            break
        if isinstance(first, records.CellMeta):
            file, sep, title = first.test_id.partition("::")  # ids are FILE::TITLE
            return grading.ExpectedCell(
                test_id=first.test_id,
                repeat=first.repeat,
                run_id=first.run_id,
                title=title if sep else None,
                file=file if sep else "",
                agent=first.agent,
            )
        break
    return grading.ExpectedCell(test_id=cell, repeat=0, run_id=cell)


async def grade_ledger(
    url: str, key: bytes, options: store.Options | None = None
) -> list[grading.CellGrade]:
    """Every cell at ``url`` graded from its records, in cell-name order (each grade's
    result names its ledger cell; ``verified`` says whether its HMAC chain verified)."""
    backend = backends.from_url(url, options)
    try:
        grades = []
        for cell in sorted(await backend.cells()):
            lines = await backend.read(cell)
            sealed_with = keys.sealing_key(key, cell, lines)  # a cluster cell's own key
            grade = grading.grade_lines(cell, lines, sealed_with, expected_from(cell, lines))
            result = grade.result.model_copy(update={"ledger_cell": cell})
            grades.append(grade.model_copy(update={"result": result}))
        return grades
    finally:
        await backend.close()


class Span(NamedTuple):
    """When a recorded run ran (:func:`span`)."""

    started_at: datetime
    ended_at: datetime
    duration_ms: float
    """From the first cell's start to the last cell's end, worked out from the cells' own
    figures, not from the two datetimes: those are whole microseconds, and a duration taken
    from them could come out shorter than the longest test's own."""


def span(results: Sequence[TestResult]) -> Span | None:
    """When the recorded run ran: from its first cell's start to its last cell's end (each
    cell's own record of its start, plus its test's duration); ``None`` when no cell says
    when it started. This is the run's time, not the time it takes to grade it again, and
    not the sum of its tests' times (tests run side by side)."""
    timed = [r for r in results if r.started_at > 0]
    if not timed:
        return None
    start = min(r.started_at for r in timed)
    # Offsets from the first start, never below 0: the longest test's own time is the least
    # the run took, to the last digit (an end in epoch seconds rounds at about 0.2 µs).
    duration_ms = max((r.started_at - start) * 1000 + r.duration_ms for r in timed)
    end = max(r.started_at + r.duration_ms / 1000 for r in timed)
    return Span(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC), duration_ms)
