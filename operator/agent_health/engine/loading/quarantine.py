"""A quarantine: tests known to be flaky, reported apart so they neither hide nor gate.

``agent-health flaky --quarantine FILE`` writes the file; ``agent-health run --quarantine
FILE`` (or ``quarantine="FILE"`` in the config) reads it. Each test it names still runs and
is shown — its status, failures and reasons, marked quarantined — but is counted apart
(``summary.quarantined``), out of the headline counts, the pass rate, the score and the exit
code; JUnit writes a quarantined test that did not pass as skipped, saying why.

The file is JSON, versioned::

    {"version": 1, "written_at": "...", "tests": [{"id": "test_x.py::flaky one",
      "flips": 3, "failure_rate": 0.4, "agent": "triage"}]}

Only ``id`` is needed: a file written by hand may list ids alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_health.ledger import strictjson
from agent_health.sdk import errors
from agent_health.sdk.results import TestResult

VERSION = 1


class QuarantineError(errors.AgentHealthError):
    """A quarantine file that cannot be read (names the file and what is wrong)."""


class Entry(BaseModel):
    """One quarantined test, with why (as ``flaky`` found it)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    flips: int | None = None
    failure_rate: float | None = None
    agent: str | None = None


class QuarantineFile(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    version: int = VERSION
    written_at: datetime | None = None
    tests: list[Entry] = Field(default_factory=list)


def write(path: Path, tests: Sequence[Entry]) -> Path:
    """Write the file (atomically: a reader never sees half of it)."""
    body = QuarantineFile(written_at=datetime.now(UTC), tests=list(tests))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(body.model_dump_json(indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read(path: Path) -> set[str]:
    """The ids the file quarantines; :class:`QuarantineError` naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise QuarantineError(
            f"{path}: no such quarantine file (write one with `agent-health flaky "
            f"--quarantine {path}`)"
        ) from err
    except (OSError, UnicodeDecodeError) as err:
        raise QuarantineError(f"{path}: cannot read the quarantine file ({err})") from err
    try:
        data = strictjson.loads(text)
    except strictjson.JSONError as err:
        raise QuarantineError(f"{path}: not JSON we can read ({err})") from None
    if isinstance(data, dict) and data.get("version") not in (None, VERSION):
        raise QuarantineError(
            f"{path}: version {data.get('version')!r} is not a quarantine file version this "
            f"agent-health reads ({VERSION})"
        )
    try:
        found = QuarantineFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise QuarantineError(f"{path}: {where}: {first['msg']}") from None
    return {entry.id for entry in found.tests}


def apply(results: list[TestResult], quarantined: set[str]) -> list[TestResult]:
    """``results`` with those of quarantined tests marked (in place, as few copies as marks)."""
    if not quarantined:
        return results
    for i, r in enumerate(results):
        if r.id in quarantined:
            results[i] = r.model_copy(update={"quarantined": True})
    return results
