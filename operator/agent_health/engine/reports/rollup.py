"""The run-level insights rollup: what the per-test insights say across the suite.

Two ways, and the report says which (``source``):

* ``llm`` — with a judge model configured, it is asked **once** over every test's
  insights (status, failed checks, summary, why, recommendations) to synthesise a summary
  and merged recommendations, each naming the tests it applies to. The prompt holds no run
  ids, timings or token counts, so an identical run asks an identical question and the
  judge cache answers it.
* ``grouped`` — without a model (or when its answer is not the JSON asked for: ``error``
  says so), a deterministic grouping: recommendations that say the same thing in other
  words (the same content words, by Jaccard similarity) are merged under their most common
  wording and ranked by how many tests made them.

Either way ``patterns`` add what the signals and metrics show across tests: the same check
failing in several tests, tool-use smells (redundant calls, ignored tool errors, retries),
tools called many times per test ("across the suite the agent over-calls
search_logs") and conversations going wrong at the same turn ("2 of 3 tests: conversations
went wrong at turn 2").
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_health import statuses
from agent_health.sdk.results import TestResult

LLM = Callable[[str], Awaitable[str]]
SIMILAR = 0.5
"""Jaccard similarity of content words at which two recommendations say the same thing."""
MAX_ITEMS = 10
OVERCALLED = 3
"""A tool called this many times or more in one test is over-called there."""
# fmt: off
_STOP = frozenset((
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "by", "at", "from",
    "is", "are", "be", "it", "its", "this", "that", "these", "those", "should", "could",
    "would", "can", "will", "more", "less", "than", "then", "when", "if", "as", "not", "no",
    "do", "does", "use", "using", "agent", "tool", "tools", "call", "calls",
))
# fmt: on
_WORD = re.compile(r"[a-z0-9_]+")
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


class Item(BaseModel):
    """One recommendation across the suite and the tests (ids) it applies to."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    text: str
    tests: list[str] = Field(default_factory=list)


class Rollup(BaseModel):
    """The suite's insights, synthesised (``llm``) or grouped (``grouped``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: Literal["llm", "grouped"]
    summary: str
    recommendations: list[Item] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    error: str | None = Field(
        default=None, description="why the judge model's synthesis was not used"
    )


class _Answer(BaseModel):
    """What the judge model is asked to answer."""

    model_config = ConfigDict(defer_build=True)  # built for the runs that ask, not every run

    summary: str
    recommendations: list[Item] = Field(default_factory=list)


async def synthesise(results: Sequence[TestResult], llm: LLM | None) -> Rollup | None:
    """The rollup of ``results``: one model call when ``llm`` is given, else grouped.

    ``None`` when no test has insights. Never raises for the model's failures: the grouped
    rollup is returned with ``error`` saying what went wrong.
    """
    explained = _explained(results)
    if not explained:
        return None
    grouped = group(results)
    if llm is None or grouped is None:
        return grouped
    try:
        text = await llm(prompt(results))
    except Exception as err:  # the rollup is a convenience: the run's results stand
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        return grouped.model_copy(update={"error": f"the judge model could not roll up: {reason}"})
    try:
        answer = _Answer.model_validate_json(_FENCE.sub("", text.strip()))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        return grouped.model_copy(
            update={
                "error": f"the judge model's rollup is not the JSON asked for ({where}: "
                f"{first['msg']}); grouped instead"
            }
        )
    known = set(explained)
    items = [
        Item(text=i.text.strip(), tests=sorted({t for t in i.tests if t in known}))
        for i in answer.recommendations
        if i.text.strip()
    ]
    return Rollup(
        source="llm",
        summary=answer.summary.strip(),
        recommendations=items[:MAX_ITEMS],
        patterns=grouped.patterns,
    )


def group(results: Sequence[TestResult]) -> Rollup | None:
    """The deterministic rollup (see the module docstring); ``None`` without insights."""
    explained = _explained(results)
    if not explained:
        return None
    made: dict[str, set[str]] = defaultdict(set)  # wording → test ids
    for test_id, found in explained.items():
        for text in found["recommendations"]:
            made[text].add(test_id)
    groups: list[tuple[frozenset[str], list[str]]] = []
    by_word: dict[str, list[int]] = defaultdict(list)  # word → groups whose head has it
    for text in sorted(made, key=lambda t: (-len(made[t]), len(t), t)):
        words = _content(text)
        # Only groups sharing a word can be similar: the operator re-groups on every grade.
        candidates = sorted({i for w in words for i in by_word[w]})
        home = next((i for i in candidates if _jaccard(groups[i][0], words) >= SIMILAR), None)
        if home is None:
            for w in words:
                by_word[w].append(len(groups))
            groups.append((words, [text]))
        else:
            groups[home][1].append(text)
    items = [
        Item(text=wordings[0], tests=sorted(set().union(*(made[w] for w in wordings))))
        for _, wordings in groups
    ]
    items.sort(key=lambda i: (-len(i.tests), i.text))
    ran = sorted({r.id for r in results if r.status != "skipped"})
    troubled = sorted({r.id for r in results if r.status in statuses.NOT_PASSED})
    summary = f"{len(explained)} of {len(ran)} tests explained; {len(troubled)} failed or errored"
    if items:
        summary += f"; most common: {items[0].text} ({len(items[0].tests)} tests)"
    return Rollup(
        source="grouped",
        summary=summary,
        recommendations=items[:MAX_ITEMS],
        patterns=patterns(results),
    )


def patterns(results: Sequence[TestResult]) -> list[str]:
    """What the signals and metrics show in two tests or more (by test id, repeats once)."""
    ran = [r for r in results if r.status != "skipped"]
    total = len({r.id for r in ran})
    failing: dict[str, set[str]] = defaultdict(set)
    smells: dict[str, set[str]] = defaultdict(set)
    amounts: Counter[str] = Counter()
    heavy: dict[str, set[str]] = defaultdict(set)
    wrong_at: dict[int, set[str]] = defaultdict(set)
    for r in ran:
        wrong = (r.insights or {}).get("went_wrong")
        if isinstance(wrong, dict) and isinstance(wrong.get("turn"), int):
            wrong_at[wrong["turn"]].add(r.id)
        for s in r.signals:
            if s.role == "gate" and s.passed is False:
                failing[s.name].add(r.id)
        for key in ("redundant_tool_calls", "ignored_tool_errors", "retries"):
            value = r.metrics.get(key)
            if isinstance(value, int) and value > 0:
                smells[key].add(r.id)
                amounts[key] += value
        for tool, calls in (r.metrics.get("tool_histogram") or {}).items():
            if isinstance(calls, int) and calls >= OVERCALLED:
                heavy[tool].add(r.id)
    found = [
        f"{name} failed in {len(ids)} of {total} tests"
        for name, ids in sorted(failing.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        if len(ids) > 1
    ]
    words = {
        "redundant_tool_calls": "made redundant tool calls",
        "ignored_tool_errors": "ignored tool errors",
        "retries": "retried failed tools",
    }
    found += [
        f"{len(smells[key])} of {total} tests {words[key]} ({amounts[key]} in all)"
        for key in words
        if len(smells[key]) > 1
    ]
    found += [
        f"the agent over-calls {tool}: {OVERCALLED}+ calls in {len(ids)} of {total} tests"
        for tool, ids in sorted(heavy.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        if len(ids) > 1
    ]
    found += [
        f"{len(ids)} of {total} tests: conversations went wrong at turn {turn}"
        for turn, ids in sorted(wrong_at.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        if len(ids) > 1
    ]
    return found


def prompt(results: Sequence[TestResult]) -> str:
    """The one question asked of the judge model: deterministic for identical results."""
    lines = [
        "You summarise why an AI agent's tests went as they did, across a whole test run.",
        "Each test below has its status, the checks that failed, and its own insights.",
        "Answer with one JSON object and nothing else:",
        '{"summary": "two or three sentences on what goes wrong (or right) across the '
        'suite", "recommendations": [{"text": "one change to make to the agent", '
        '"tests": ["the ids of the tests it applies to"]}]}',
        f"Give at most {MAX_ITEMS} recommendations, the most widespread first; merge "
        "recommendations that say the same thing.",
        "",
        "## TESTS",
    ]
    statuses: dict[str, list[str]] = defaultdict(list)
    failed: dict[str, set[str]] = defaultdict(set)
    for r in results:
        statuses[r.id].append(r.status)
        failed[r.id].update(s.name for s in r.signals if s.role == "gate" and s.passed is False)
    for test_id, found in sorted(_explained(results).items()):
        entry = {
            "id": test_id,
            "status": ", ".join(sorted(set(statuses[test_id]))),
            "failed_checks": sorted(failed[test_id]),
            "summary": found["summary"],
            "why": found["why"],
            "recommendations": found["recommendations"],
        }
        lines.append(json.dumps(entry, ensure_ascii=False, sort_keys=True))
    return "\n".join(lines)


def _explained(results: Sequence[TestResult]) -> dict[str, dict[str, Any]]:
    """Per test id, its insights (repeats merged: summaries and whys joined, recommendations
    in first-seen order); tests whose insights errored are left out."""
    found: dict[str, dict[str, Any]] = {}
    for r in results:
        insights = r.insights or {}
        if "error" in insights or not insights.get("summary"):
            continue
        entry = found.setdefault(r.id, {"summary": [], "why": [], "recommendations": []})
        for key in ("summary", "why"):
            text = insights.get(key)
            if isinstance(text, str) and text and text not in entry[key]:
                entry[key].append(text)
        for text in insights.get("recommendations") or []:
            if str(text) not in entry["recommendations"]:
                entry["recommendations"].append(str(text))
    return {
        test_id: {
            "summary": " / ".join(e["summary"]),
            "why": " / ".join(e["why"]) or None,
            "recommendations": e["recommendations"],
        }
        for test_id, e in found.items()
    }


def _content(text: str) -> frozenset[str]:
    words = (w for w in _WORD.findall(text.lower()) if w not in _STOP)
    found = frozenset(w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words)
    return found or frozenset({" ".join(text.lower().split())})


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 1.0 if a == b else 0.0
    return len(a & b) / len(a | b)
