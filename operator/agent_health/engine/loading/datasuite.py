"""Data-driven suites: case files in the TypeScript agent-health's format, run as tests.

Each case (:class:`~agent_health.engine.loading.casefiles.model.Case`) becomes a test whose body
runs ``initialPrompt`` with its ``context`` and ``tools`` (and its ``followUpQuestions`` as
the later turns of that run: :mod:`~agent_health.engine.loading.casefiles.followups`), checks every
required tool and that the steps' tools were called in step order, and judges every
expected outcome (with ``expectedPPL`` as the expected answer), so existing case libraries
run unchanged. A case with none of these checks is ``skipped`` ("nothing to grade"). The
test's id is the case's ``id`` when it has one, else its name; its checks point at the
case's line in the file.

A file that has any error declares no test: every problem of the file is reported at once
(:mod:`~agent_health.engine.loading.casefiles.checks`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent_health.engine.loading.casefiles import checks, followups, forms, model
from agent_health.sdk import declare
from agent_health.sdk.judges import BoundJudge
from agent_health.sdk.matchers import BoundExpect

METADATA = (
    "id",
    "category",
    "subcategory",
    "difficulty",
    "currentVersion",
    "versions",
    "isPromoted",
    "createdAt",
    "updatedAt",
    "tags",
    "author",
    "describePath",
    "expectedPPL",
    "tools",
)
"""The fields a case keeps as its metadata (``list --json`` and the reports: ``case``)."""

Beside = Callable[[Path], list[Path]]
"""The case files beside a benchmark file (the loader knows which files are case files)."""


@dataclass
class Loaded:
    """What one case file declares, and every problem found in it (and in the case files
    its benchmarks name)."""

    cases: list[declare.TestCase] = field(default_factory=list)
    problems: list[checks.Problem] = field(default_factory=list)


def load(
    path: Path,
    options: checks.Options | None = None,
    beside: Beside | None = None,
) -> Loaded:
    """The tests of one case file (each with its own ``file``: a benchmark's ``testCaseIds``
    declare the tests of the case files beside it)."""
    options = options or checks.Options()
    doc = forms.read(path, options)
    loaded = _declared(doc, options)
    if doc.references and not any(p.error for p in loaded.problems):
        _resolve(doc, loaded, options, beside(path) if beside else [])
    if any(p.error for p in loaded.problems):
        loaded.cases = []
    return loaded


def _declared(doc: forms.Document, options: checks.Options) -> Loaded:
    loaded = Loaded(problems=list(doc.problems))
    seen: dict[str, tuple[str, Any, declare.TestCase]] = {}
    for item in doc.cases:
        where = item.named
        case, found = checks.check_case(
            item.raw, where, item.path, doc.line_of, str(doc.file), options, item.not_finite
        )
        loaded.problems.extend(found)
        if case is None:
            continue
        key = case.id or case.name
        earlier = seen.get(key)
        if earlier is not None:
            first, raw, declared = earlier
            if raw == item.raw and item.benchmark:  # one case in two benchmarks of the file
                _in_benchmark(declared, item.benchmark)
                continue
            message = f"{where}: {_duplicate(case, key, first)}"
            loaded.problems.append(checks.Problem(str(doc.file), doc.line_of(item.path), message))
            continue
        declared = _declare(case, item, doc)
        seen[key] = (where, item.raw, declared)
        loaded.cases.append(declared)
    return loaded


def _duplicate(case: model.Case, key: str, first: str) -> str:
    if case.id is not None:
        return f"id {key!r} is also {first}'s; a case's id is unique in its file"
    return (
        f"name {key!r} is also {first}'s; give the cases distinct names, or each an id "
        "(cases with ids may share a name)"
    )


def _in_benchmark(case: declare.TestCase, benchmark: str) -> None:
    meta = dict(case.metadata or {})
    names = list(meta.get("benchmarks", []))
    if benchmark not in names:
        meta["benchmarks"] = [*names, benchmark]
    case.metadata = meta


def _resolve(
    doc: forms.Document, loaded: Loaded, options: checks.Options, files: Iterable[Path]
) -> None:
    """Each ``testCaseIds`` entry → the case of that id in the case files beside it."""
    by_id: dict[str, declare.TestCase] = {}
    looked: list[str] = []
    for other in files:
        if other.resolve() == doc.file.resolve():
            continue
        sibling = _declared(forms.read(other, options), options)
        if any(p.error for p in sibling.problems):
            loaded.problems.extend(sibling.problems)
            looked.append(f"{other.name} (does not load: see its errors)")
            continue
        looked.append(other.name)
        for case in sibling.cases:
            if case.key is not None:
                by_id.setdefault(case.key, case)
    for ref in doc.references:
        for k, case_id in ref.ids:
            found = by_id.get(case_id)
            if found is None:
                where = ", ".join(looked) or "none"
                loaded.problems.append(
                    checks.Problem(
                        str(doc.file),
                        ref.line,
                        f"benchmark {ref.benchmark!r}: testCaseIds[{k}]: no case has the id "
                        f"{case_id!r} in the case files beside it (looked in: {where}); give "
                        "the case that id, or put its file beside the benchmark",
                    )
                )
                continue
            if found not in loaded.cases:
                loaded.cases.append(found)
            _in_benchmark(found, ref.benchmark)


def _declare(case: model.Case, item: forms.RawCase, doc: forms.Document) -> declare.TestCase:
    # A case with no check would pass whatever the agent did: it is reported skipped, with
    # the reason, and the agent is not called (and not paid for). Not errored: the case is
    # valid in the established format, and a library with placeholder cases must still run.
    empty = case.nothing_to_grade()
    raw = item.raw
    metadata = {key: raw[key] for key in METADATA if key in raw}
    if item.benchmark:
        metadata["benchmarks"] = [item.benchmark]
    return declare.TestCase(
        mode="skip" if empty else "run",
        skip_reason=empty,
        name=case.name,
        describe_path=(),
        fn=_body(case),
        params=("agent", "expect", "judge"),
        fixtures={},
        file=str(doc.file),
        line=doc.line_of(item.path) or 0,
        labels=case.all_labels(),
        description=case.description,
        timeout=case.timeout,
        default_prompt=case.initial_prompt,
        context=tuple({"description": c.description or "", "value": c.value} for c in case.context),
        expected_outcomes=tuple(case.expected_outcomes),
        expected_trajectory=tuple(s.model_dump(by_alias=True) for s in case.expected_trajectory),
        source=json.dumps(raw, sort_keys=True),
        key=case.id,
        metadata=metadata,
        from_case_file=True,
    )


def _body(case: model.Case) -> Callable[..., Any]:
    tools = case.required_tools()
    steps = case.tool_steps()
    outcomes = list(case.expected_outcomes)
    offered = [t.model_dump() for t in case.tools] or None
    expected = case.expected_ppl
    talk: dict[str, Any] = {}
    if case.follow_up_questions:  # later turns of the same run: scripted, or by trigger
        scripted = followups.scripted(case.follow_up_questions)
        if scripted is not None:
            talk["turns"] = scripted
        else:
            talk["user"] = followups.asker(case.follow_up_questions)
            talk["max_turns"] = len(case.follow_up_questions) + 1

    async def data_case(agent: Any, expect: BoundExpect, judge: BoundJudge) -> None:
        result = await agent.run(tools=offered, **talk)
        for tool in tools:
            expect(result).to_have_called_tool(tool)
        # The order of the steps, among the tools that were called: a missing tool already
        # failed above, and one failure counts once.
        called = {s.tool_name for s in result.tool_calls()}
        present = [kept for step in steps if (kept := [t for t in step if t in called])]
        if len(present) > 1:
            expect(result).to_have_called_tools_in_steps(present)
        for outcome in outcomes:
            await judge(result, outcome, expected=expected)

    return data_case


def relocated(case: declare.TestCase, file: str) -> declare.TestCase:
    """``case`` as the loader lists it: its file as shown, its id ``FILE::ID-or-name``."""
    return replace(case, id=f"{file}::{case.key or case.title}", file=file)
