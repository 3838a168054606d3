"""The run report: every TestResult plus aggregates, in the versioned JSON shape of DESIGN.md §9."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health.sdk.results import TestResult

REPORT_VERSION = 1


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    total: int
    passed: int
    failed: int
    errored: int
    skipped: int
    pass_rate: float | None
    score: float | None
    duration_ms: float
    tokens: int
    repeats: int = 1
    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    flaky: list[str] = Field(default_factory=list)
    load_errors: list[str] = Field(default_factory=list)
    interrupted: bool = False
    not_run: int = 0
    judge_tokens: dict[str, Any] | None = None


class RunReport(BaseModel):
    """All results of one run. Field order is part of the file format."""

    model_config = ConfigDict(frozen=True)

    version: int = REPORT_VERSION
    summary: Summary
    tests: list[dict[str, Any]]

    @classmethod
    def build(
        cls,
        results: Sequence[TestResult],
        *,
        duration_ms: float,
        repeats: int = 1,
        load_errors: Sequence[str] = (),
        interrupted: bool = False,
        not_run: int = 0,
        judge_tokens: dict[str, Any] | None = None,
    ) -> RunReport:
        counts = {"passed": 0, "failed": 0, "errored": 0, "skipped": 0}
        for r in results:
            counts[r.status] += 1
        decided = counts["passed"] + counts["failed"]
        scores = [r.score for r in results if r.score is not None]
        summary: dict[str, Any] = dict(
            total=len(results),
            **counts,
            pass_rate=round(counts["passed"] / decided, 6) if decided else None,
            score=round(sum(scores) / len(scores), 6) if scores else None,
            duration_ms=round(duration_ms, 3),
            tokens=sum(r.token_usage.total for r in results),
            repeats=repeats,
            load_errors=list(load_errors),
            interrupted=interrupted,
            not_run=not_run,
            judge_tokens=judge_tokens,
        )
        if repeats > 1:
            summary.update(_pass_at_k(results))
        return cls(summary=Summary(**summary), tests=[_test_entry(r) for r in results])


def _pass_at_k(results: Sequence[TestResult]) -> dict[str, Any]:
    by_test: dict[str, list[str]] = defaultdict(list)
    titles: dict[str, str] = {}
    for r in results:
        if r.status in ("passed", "failed"):
            by_test[r.id].append(r.status)
        titles[r.id] = r.title
    at_k = [1.0 if "passed" in s else 0.0 for s in by_test.values()]
    hat_k = [1.0 if all(x == "passed" for x in s) else 0.0 for s in by_test.values()]
    flaky = sorted(titles[t] for t, s in by_test.items() if len(set(s)) > 1)
    return {
        "pass_at_k": round(sum(at_k) / len(at_k), 6) if at_k else None,
        "pass_hat_k": round(sum(hat_k) / len(hat_k), 6) if hat_k else None,
        "flaky": flaky,
    }


def _test_entry(r: TestResult) -> dict[str, Any]:
    return {
        "id": r.id,
        "name": r.title,
        "file": r.file,
        "line": r.line,
        "labels": list(r.labels),
        "repeat": r.repeat,
        "status": r.status,
        "score": r.score,
        "error": r.error,
        "skip_reason": r.skip_reason,
        "run_id": r.run_id,
        "prompt": r.prompt,
        "duration_ms": round(r.duration_ms, 3),
        "content_hash": r.content_hash,
        "signals": [
            {
                "kind": s.kind,
                "role": s.role,
                "name": s.name,
                "passed": s.passed,
                "score": s.score,
                "weight": s.weight,
                "evidence": s.evidence,
                "reasoning": s.reasoning,
                "error": s.error,
                "location": s.location,
            }
            for s in r.signals
        ],
        "metrics": r.metrics,
        "insights": r.insights,
    }
