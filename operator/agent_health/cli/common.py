"""What every command shares: exit codes, the usage error, consoles, report writing."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from agent_health.engine import reporters
from agent_health.engine.report import RunReport

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ERRORED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad command-line input; exit 2 with the message."""


@dataclass(frozen=True)
class Consoles:
    """Where a command prints: results on stdout, errors and hints on stderr."""

    out: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))
    err: Console = field(
        default_factory=lambda: Console(stderr=True, highlight=False, soft_wrap=True)
    )


Handler = Callable[[argparse.Namespace, Consoles], int]


def write_reports(
    outputs: list[tuple[str, Path | None]], report: RunReport, console: Console
) -> None:
    """Write every file reporter's output (``json:PATH``, ``junit:PATH``, ``html:DIR``)."""
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
