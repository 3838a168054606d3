"""What every command shares: exit codes, the usage error, consoles, report writing.

Importing this module (and every command group) is cheap on purpose: ``agent-health list``
must start as fast as importing pydantic. rich, the reporters and the engine load when a
command first uses them (``tests/test_cli_imports.py`` holds the line).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health.engine.report import RunReport

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ERRORED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad command-line input; exit 2 with the message."""


class Consoles:
    """Where a command prints: results on stdout, errors and hints on stderr.

    Each rich console is made on first use, so a command that prints plain lines never
    imports rich.
    """

    def __init__(self) -> None:
        self._out: Console | None = None
        self._err: Console | None = None

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            self._out = Console(highlight=False, soft_wrap=True)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._err


Handler = Callable[[argparse.Namespace, Consoles], int]


def write_reports(
    outputs: list[tuple[str, Path | None]], report: RunReport, console: Console
) -> None:
    """Write every file reporter's output (``json:PATH``, ``junit:PATH``, ``html:DIR``)."""
    from agent_health.engine import reporters

    for kind, path in outputs:
        if path is not None:
            written = reporters.write(kind, path, report)
            console.print(f"{kind} report: {written}", markup=False)
            if kind == "html":
                console.print(f"open it with: agent-health show-report {path}", markup=False)


def exit_code(report: RunReport) -> int:
    """The exit code of a run (or a re-grade) from its summary."""
    s = report.summary
    if s.interrupted:
        return EXIT_INTERRUPTED
    if s.load_errors:
        return EXIT_USAGE
    if s.failed:
        return EXIT_FAILED
    if s.errored:
        return EXIT_ERRORED
    return EXIT_OK
