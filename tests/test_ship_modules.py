"""Size follows concept (docs/architecture.md, "Import layers").

A module holds one concept, however long that takes: kopf's ``on.py`` is ~970 lines and
httpx's ``_client.py`` ~2,000, each one thing. What is checked is the rare long one: a
module over :data:`LIMIT` lines says in its docstring why it is still one concept, in a
sentence that starts with :data:`MARKER`. No module is split to meet a number.
"""

from __future__ import annotations

import ast

from ship_support import ROOT

PACKAGE = ROOT / "operator" / "agent_health"
LIMIT = 600
MARKER = "One concept:"


def _says_why(source: str) -> bool:
    doc = ast.get_docstring(ast.parse(source)) or ""
    reason = doc.partition(MARKER)[2].strip()
    return len(reason) >= 20


def _long_modules() -> dict[str, str]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > LIMIT:
            found[path.relative_to(PACKAGE).as_posix()] = source
    return found


def test_every_long_module_says_in_its_docstring_why_it_is_one_concept() -> None:
    missing = [name for name, source in _long_modules().items() if not _says_why(source)]
    assert not missing, (
        f"these modules are over {LIMIT} lines: say in each docstring why it is one concept "
        f"('{MARKER} <why>'), or move what is a concept of its own out: " + ", ".join(missing)
    )


def test_the_reason_must_say_something() -> None:
    assert _says_why('"""Matchers.\n\nOne concept: every matcher of a RunResult, one class."""')
    assert not _says_why('"""Matchers.\n\nOne concept: big."""')
    assert not _says_why('"""Matchers, a long module."""')


def test_no_module_carries_the_old_line_count_marker() -> None:
    # The old rule (350 lines, a comment at the top) split concepts by count; its markers go.
    marked = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.read_text(encoding="utf-8").startswith("# Over 350 lines")
    ]
    assert not marked, f"drop the '# Over 350 lines' comment from: {', '.join(marked)}"
