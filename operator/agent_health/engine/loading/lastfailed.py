"""What failed last time, for ``agent-health run --last-failed`` (pytest's ``--lf``).

The cache is ``last-failed.json`` in the suite's ``.agent-health/`` (beside its config, as
``agent-health run`` finds it, wherever the command runs from), one entry per suite root
(test ids are relative to it). After every run it is updated as
pytest updates its own: a test that failed or errored is added, one that passed, was flaky or
skipped is removed, and a test that did not run this time keeps its entry.
"""

import json
import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_health import statuses
from agent_health.sdk import declare
from agent_health.sdk.results import TestResult

NAME = "last-failed.json"
PATH = Path(".agent-health") / NAME
VERSION = 1


class Cache(BaseModel):
    """The file's format: suite root (absolute) → ids of the tests that did not pass."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    version: int = VERSION
    suites: dict[str, list[str]] = Field(default_factory=dict)


def read(path: Path = PATH) -> Cache:
    """The cache, or an empty one when there is none (or it is unreadable: it is only a hint)."""
    try:
        return Cache.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return Cache.model_construct()  # the defaults: no validator built for a missing file


def failed(root: Path, path: Path = PATH) -> set[str]:
    """Ids of the tests under ``root`` that failed or errored when they last ran."""
    return set(read(path).suites.get(str(root.resolve()), []))


def update(root: Path, results: Sequence[TestResult], path: Path = PATH) -> None:
    """Fold this run's results into the cache (written atomically)."""
    cache = read(path)
    key = str(root.resolve())
    ids = set(cache.suites.get(key, []))
    failing = {r.id for r in results if r.status in statuses.NOT_PASSED}
    ids -= {r.id for r in results} - failing
    ids |= failing
    suites = {**cache.suites, key: sorted(ids)}
    if not ids:
        del suites[key]
    if not suites and not path.exists():
        return  # nothing to remember, nothing remembered: no file (nor folder) is made
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(Cache(suites=suites).model_dump(), indent=1) + "\n")
    tmp.replace(path)


def choose(
    cases: Sequence[declare.TestCase], previous: set[str]
) -> tuple[list[declare.TestCase], str]:
    """The cases that failed last time, and a line saying what was chosen.

    When none of them failed last time (or none is among ``cases``), all of them run, as
    pytest does: a rerun of nothing would pass and prove nothing.
    """
    chosen = [c for c in cases if c.id in previous]
    if chosen:
        return chosen, f"--last-failed: rerunning {len(chosen)} of {len(cases)} tests"
    return list(cases), (f"--last-failed: no test failed last time, running all {len(cases)} tests")
