"""What ``agent-health list`` says about each test, without running anything.

Besides the declaration (id, labels, default prompt, context, expected outcomes and
trajectory), each entry says where the prompt comes from (``prompt_source``):

* ``default`` — the test's ``default_prompt`` (what ``agent.run()`` sends without one);
* ``dynamic`` — no default prompt, and the test can reach the ``agent`` fixture (in its
  body, a hook or a fixture it uses): the prompt is built at run time by the body;
* ``none`` — the test never reaches the agent (a pure data test).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from agent_health.engine import visible
from agent_health.sdk import declare

PromptSource = Literal["default", "dynamic", "none"]


def prompt_source(case: declare.TestCase) -> PromptSource:
    """Where the prompt of ``case`` comes from (see the module docstring)."""
    if case.default_prompt is not None:
        return "default"
    hooks = (h.params for h in case.hooks if h.kind in ("before_each", "after_each"))
    return "dynamic" if _reaches_agent(case, [case.params, *hooks]) else "none"


def _reaches_agent(case: declare.TestCase, roots: Iterable[Iterable[str]]) -> bool:
    seen: set[str] = set()
    todo = [name for params in roots for name in params]
    while todo:
        name = todo.pop()
        if name == "agent":
            return True
        if name in seen:
            continue
        seen.add(name)
        fixture = case.fixtures.get(name)
        if fixture is not None:
            todo.extend(fixture.params)
    return False


def entry(case: declare.TestCase) -> dict[str, Any]:
    """The ``list --json`` entry of one test (JSON data)."""
    return {
        "id": case.id,
        "name": case.name,
        "title": case.title,
        "file": case.file,
        "line": case.line,
        "labels": list(case.labels),
        "description": case.description,
        "default_prompt": case.default_prompt,
        "prompt_source": prompt_source(case),
        "context": _plain(list(case.context)) if case.context is not None else None,
        "timeout": case.timeout,
        "expected_outcomes": list(case.expected_outcomes),
        "expected_trajectory": _plain(list(case.expected_trajectory)),
        "mode": case.mode,
        "skip_reason": case.skip_reason,
        "content_hash": case.content_hash,
        "case": _plain(dict(case.metadata)) if case.metadata is not None else None,
    }


def line(case: declare.TestCase) -> str:
    """The plain ``list`` line of one test: id, labels, mode, and a dynamic prompt marker.

    Titles, labels and skip reasons come from the suite's files (a case file may hold
    anything): their control characters are made visible, so a line shows what it says."""
    labels = f"  [{', '.join(case.labels)}]" if case.labels else ""
    mode = f"  ({case.mode}{': ' + case.skip_reason if case.skip_reason else ''})"
    dynamic = "  (prompt: dynamic)" if prompt_source(case) == "dynamic" else ""
    return visible.line(f"{case.id}{labels}{mode if case.mode != 'run' else ''}{dynamic}")


def _plain(value: Any) -> Any:
    """JSON data: what JSON cannot hold (a code test may put anything there) as its repr."""
    return json.loads(json.dumps(value, default=repr))
