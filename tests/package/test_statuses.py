"""One vocabulary of outcomes: ``agent_health/statuses.py`` says the status words once."""

from __future__ import annotations

import ast
import typing

from agent_health import statuses
from agent_health.ledger import records
from agent_health.sdk import results
from support.ship_support import ROOT

PACKAGE = ROOT / "operator" / "agent_health"


def test_the_sdk_and_the_ledger_say_the_same_words() -> None:
    assert typing.get_args(results.Status) == statuses.STATUSES
    assert typing.get_args(results.Cause) == statuses.CAUSES
    # A ledger cell's end is one run of one test: the same words, never flaky.
    assert typing.get_args(records.Status) == statuses.ENDED
    assert set(statuses.STATUSES) - set(statuses.ENDED) == {"flaky"}
    assert set(statuses.NOT_PASSED) <= set(statuses.ENDED)
    assert set(statuses.DECIDED) <= set(statuses.STATUSES)


def _spelled(node: ast.AST) -> bool:
    """A literal tuple, list or set of two or more status words."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set) or len(node.elts) < 2:
        return False
    words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return len(words) == len(node.elts) and set(words) <= set(statuses.STATUSES)


def test_no_module_spells_a_set_of_statuses_to_test_one_against() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "statuses.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                tested = node.comparators
            elif isinstance(node, ast.Call):
                tested = node.args
            else:
                continue
            if any(_spelled(c) for c in tested):
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not spelled, f"read agent_health.statuses (NOT_PASSED, DECIDED, ...): {spelled}"
