"""Reporters: live progress and a summary on the terminal, JSON, JUnit, HTML and plain lists.

A file reporter is named by the module that writes it, imported only when a run asks for it:
a run without ``--reporter junit`` never loads an XML library, nor one without
``--reporter html`` the HTML report's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, cast

from agent_health.sdk import errors

if TYPE_CHECKING:
    from agent_health.engine.report import RunReport

# kind → (the module whose ``write(path, report)`` writes it, the default path)
FILE_REPORTERS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "json": ("agent_health.engine.reporters.json_file", "agent-health-report.json"),
        "junit": ("agent_health.engine.reporters.junit", "agent-health-junit.xml"),
        "html": ("agent_health.engine.reporters.html", "agent-health-report"),
    }
)
DEFAULT_PATHS = {kind: default for kind, (_, default) in FILE_REPORTERS.items()}
KINDS = ("list", *FILE_REPORTERS)
HELP = "list, json[:PATH], junit[:PATH], html[:DIR] (repeatable)"


class _Writer(Protocol):
    def write(self, path: Path, report: RunReport) -> object: ...


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


def write(kind: str, path: Path, report: RunReport) -> Path:
    """Write one file report; the file written (``DIR/index.html`` for html)."""
    module = cast("_Writer", importlib.import_module(FILE_REPORTERS[kind][0]))
    if kind != "html":  # html writes into the folder it is given
        path.parent.mkdir(parents=True, exist_ok=True)
    written = module.write(path, report)
    return written if isinstance(written, Path) else path
