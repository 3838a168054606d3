"""Reports to record in a history, made to order: which tests, with which statuses, of which
agent, when — the JSON shape ``agent-health run --reporter json`` writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def report(
    statuses: Mapping[str, str] | Sequence[tuple[str, str]],
    *,
    run_id: str | None,
    at: int = 0,
    agent: str | None = "triage",
    image: str | None = None,
    content: Mapping[str, str] | None = None,
    commit: str | None = "c0ffee",
    judge_model: str | None = None,
    suite: str | None = "suite",
    repeats: int = 1,
    causes: Mapping[str, str] | None = None,
    labels: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A version 2 report: one entry per (test, status) — a test listed ``repeats`` times in
    ``statuses`` (as pairs) is its repeats — started ``at`` minutes after :data:`T0`."""
    pairs = list(statuses.items()) if isinstance(statuses, Mapping) else list(statuses)
    seen: dict[str, int] = {}
    tests = []
    for test_id, status in pairs:
        repeat = seen.get(test_id, 0)
        seen[test_id] = repeat + 1
        cause = (causes or {}).get(test_id) if status == "errored" else None
        tests.append(
            {
                "id": test_id,
                "name": test_id.split("::")[-1],
                "file": test_id.split("::")[0],
                "line": 3,
                "labels": list((labels or {}).get(test_id, [])),
                "repeat": repeat,
                "status": status,
                "score": 1.0 if status == "passed" else 0.0,
                "error": "agent refused" if status == "errored" else None,
                "cause": cause or ("agent" if status == "errored" else None),
                "duration_ms": 12.5,
                "content_hash": (content or {}).get(test_id, "h-" + test_id),
                "metrics": {"total_tokens": 10, "cost_usd": 0.001},
                "signals": [
                    {
                        "kind": "deterministic",
                        "role": "gate",
                        "name": "to_match",
                        "passed": status == "passed",
                        "score": None,
                        "evidence": {"pattern": "x"},
                        "reasoning": None,
                        "error": None,
                        "location": None,
                    }
                ],
            }
        )
    passed = sum(t["status"] == "passed" for t in tests)
    failed = sum(t["status"] == "failed" for t in tests)
    errored = sum(t["status"] == "errored" for t in tests)
    by_agent = sum(t["status"] == "errored" and t["cause"] == "agent" for t in tests)
    decided = passed + failed + by_agent
    started = T0 + timedelta(minutes=at)
    provenance: dict[str, Any] = {
        "agent": {
            "name": agent,
            "connector": "rest",
            "url": "http://127.0.0.1/run",
            "command": None,
            "image": image,
        }
        if agent
        else None,
        "judge": {"provider": "openai", "model": judge_model, "skipped": False},
        "suite": {"paths": ["."], "git_commit": commit, "git_dirty": False, "name": suite},
        "started_at": started.isoformat(),
        "ended_at": (started + timedelta(seconds=30)).isoformat(),
        "agent_health_version": "0.1.0",
    }
    if run_id is not None:
        provenance["run_id"] = run_id
    return {
        "version": 2,
        "summary": {
            "total": len(tests),
            "passed": passed,
            "failed": failed,
            "errored": errored,
            "skipped": sum(t["status"] == "skipped" for t in tests),
            "pass_rate": round(passed / decided, 6) if decided else None,
            "score": None,
            "duration_ms": 30000.0,
            "tokens": 10 * len(tests),
            "cost_usd": 0.001 * len(tests),
            "repeats": repeats,
            "errored_by_cause": {
                "agent": by_agent,
                "judge": 0,
                "test": errored - by_agent,
                "infra": 0,
            },
        },
        "provenance": provenance,
        "tests": tests,
    }


def named(n: int, status: str = "passed", prefix: str = "t.py::test") -> dict[str, str]:
    return {f"{prefix} {i:03d}": status for i in range(n)}
