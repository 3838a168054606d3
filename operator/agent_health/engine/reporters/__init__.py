"""Reporters: live progress and a summary on the terminal, JSON, JUnit and plain lists."""

from __future__ import annotations

from pathlib import Path

from agent_health.engine.report import RunReport
from agent_health.engine.reporters import json_file, junit
from agent_health.sdk import errors

FILE_REPORTERS = {"json": json_file.write, "junit": junit.write}
DEFAULT_PATHS = {"json": "agent-health-report.json", "junit": "agent-health-junit.xml"}
KINDS = ("list", "json", "junit")


def parse(value: str) -> tuple[str, Path | None]:
    """``KIND[:PATH]`` → (kind, path); a clear error for an unknown kind."""
    kind, _, path = value.partition(":")
    if kind not in KINDS:
        raise errors.ConfigError(
            f"unknown reporter {kind!r}; choose from {', '.join(KINDS)} (as KIND or KIND:PATH)"
        )
    if kind == "list":
        return kind, None
    return kind, Path(path or DEFAULT_PATHS[kind])


def write(kind: str, path: Path, report: RunReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    FILE_REPORTERS[kind](path, report)
