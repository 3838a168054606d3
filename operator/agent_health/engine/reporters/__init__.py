"""Reporters: live progress and a summary on the terminal, JSON, JUnit and plain lists.

A file reporter is named by the module that writes it, imported only when a run asks for it:
a run without ``--reporter junit`` never loads an XML library.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from agent_health.sdk import errors

if TYPE_CHECKING:
    from agent_health.engine.report import RunReport

# kind → the module whose ``write(path, report)`` writes it
FILE_REPORTERS: Mapping[str, str] = MappingProxyType(
    {
        "json": "agent_health.engine.reporters.json_file",
        "junit": "agent_health.engine.reporters.junit",
    }
)
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
    importlib.import_module(FILE_REPORTERS[kind]).write(path, report)
