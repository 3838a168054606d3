"""What a cell loads before it runs its test: the suite, with its config, and the test in it.

A cold cell loads them when it starts; a pooled cell (:mod:`.warmcell`) while it waits for
its assignment, so its test starts as soon as it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_health import connectors
from agent_health.engine import loading
from agent_health.sdk import config as config_mod
from agent_health.sdk import errors


class CellError(errors.AgentHealthError):
    """The cell cannot run its test (a wrong environment or suite); exit 2."""


@dataclass(frozen=True)
class Loaded:
    """The suite and its config, loaded, and the target's connector: what a pooled cell
    makes before it has a cell (none of it depends on which cell it gets)."""

    config: config_mod.Config
    suite: loading.Suite
    connector: connectors.Connector | None = None


def load(path: Path) -> Loaded:
    """The suite at ``path`` with the files and case-file strictness it was listed with (its
    config's)."""
    config = loading.load_config(loading.find_config(path))
    found_by = loading.discover(
        config.test_match, config.test_ignore, lenient=config.lenient_cases, forbid_unknown=None
    )
    return Loaded(config, loading.load([path], found_by))


def find(suite: loading.Suite, test_id: str) -> Any:
    """The suite's test with this id, or a CellError listing what was found."""
    for case in suite.cases:
        if case.id == test_id:
            return case
    problems = "; ".join(str(e) for e in suite.errors)
    known = ", ".join(c.id for c in suite.cases[:10]) or "none"
    raise CellError(
        f"no test {test_id!r} in the suite at {suite.root} (found: {known})"
        + (f"; load errors: {problems}" if problems else "")
    )
