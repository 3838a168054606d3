"""Reporters: live progress and a summary on the terminal, JSON, JUnit, HTML, Markdown (a CI
summary) and plain lists.

A file reporter is named by the module that writes it, imported only when a run asks for it:
a run without ``--reporter junit`` never loads an XML library, nor one without
``--reporter html`` the HTML report's code. The terminal's live progress and summary, a JSON
report read back, the HTML report's parts and the Markdown summary's inputs load on first use
too (:mod:`agent_health.faces`).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, cast

from agent_health import faces
from agent_health.sdk import errors

if TYPE_CHECKING:
    from agent_health.engine import reports
    from agent_health.engine.reporters.html import render as render_html
    from agent_health.engine.reporters.html import render_json as render_html_json
    from agent_health.engine.reporters.html import script_safe, self_contained
    from agent_health.engine.reporters.html import write as write_html
    from agent_health.engine.reporters.json_file import read as read_json_report
    from agent_health.engine.reporters.markdown import Context as MarkdownContext
    from agent_health.engine.reporters.markdown import FlakyTest
    from agent_health.engine.reporters.terminal import LiveProgress, closing, summary
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "render_html": "html:render",
            "render_html_json": "html:render_json",
            "script_safe": "html",
            "self_contained": "html",
            "write_html": "html:write",
            "read_json_report": "json_file:read",
            "FlakyTest": "markdown",
            "MarkdownContext": "markdown:Context",
            "LiveProgress": "terminal",
            "summary": "terminal",
            "closing": "terminal",
        },
    )

# kind → (the module whose ``write(path, report)`` writes it, the default path)
FILE_REPORTERS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "json": ("agent_health.engine.reporters.json_file", "agent-health-report.json"),
        "junit": ("agent_health.engine.reporters.junit", "agent-health-junit.xml"),
        "html": ("agent_health.engine.reporters.html", "agent-health-report"),
        "markdown": ("agent_health.engine.reporters.markdown", "agent-health-summary.md"),
    }
)
DEFAULT_PATHS = {kind: default for kind, (_, default) in FILE_REPORTERS.items()}
KINDS = ("list", *FILE_REPORTERS)
HELP = "list, json[:PATH], junit[:PATH], html[:DIR], markdown[:PATH] (repeatable)"


class _Writer(Protocol):
    def write(self, path: Path, report: reports.RunReport) -> object: ...


class _WriterWithContext(Protocol):
    def write(self, path: Path, report: reports.RunReport, context: object) -> object: ...


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


def check(kind: str, path: Path) -> None:
    """Fail now, before any test runs, when ``path`` cannot be written: a clear error naming
    it, rather than a traceback after the run with the reporters after it skipped.

    Creates nothing: it finds the nearest folder that exists on the way to ``path`` and
    makes (and removes) a temporary file there, which also catches what permission bits do
    not show (a read-only filesystem, ``/proc``, running as root).
    """
    where = f"--reporter {kind}:{path}"
    if kind == "html":  # a folder, made if missing
        if path.exists() and not path.is_dir():
            raise errors.ConfigError(f"{where}: {path} is a file; name a folder")
        path = path / "index.html"
    elif path.is_dir():
        raise errors.ConfigError(f"{where}: {path} is a directory; name a file")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise errors.ConfigError(f"{where}: cannot create {path.parent}: {folder} is a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise errors.ConfigError(f"{where}: {path} is not writable")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".agent-health-check-"):
            pass
    except OSError as err:
        raise errors.ConfigError(
            f"{where}: cannot write in {folder}: {err.strerror or err}; choose another path"
        ) from err


def write(kind: str, path: Path, report: reports.RunReport, context: object = None) -> Path:
    """Write one file report; the file written (``DIR/index.html`` for html). ``context``:
    what the markdown summary adds from the history (:class:`.markdown.Context`)."""
    imported = importlib.import_module(FILE_REPORTERS[kind][0])
    if kind != "html":  # html writes into the folder it is given
        path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "markdown" and context is not None:
        written = cast("_WriterWithContext", imported).write(path, report, context)
    else:
        written = cast("_Writer", imported).write(path, report)
    return written if isinstance(written, Path) else path


__all__ = [
    "DEFAULT_PATHS",
    "FILE_REPORTERS",
    "HELP",
    "KINDS",
    "FlakyTest",
    "LiveProgress",
    "MarkdownContext",
    "check",
    "closing",
    "parse",
    "read_json_report",
    "render_html",
    "render_html_json",
    "script_safe",
    "self_contained",
    "summary",
    "write",
    "write_html",
]
