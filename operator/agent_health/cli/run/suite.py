"""What ``run`` and ``list`` read before a test is chosen: the config file, which files are
tests, and how strictly case files are read (their flags over the config)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_health.engine import loading
    from agent_health.sdk import config as config_mod


def case_file_flags(parser: Any) -> None:
    """``--lenient`` and ``--forbid-unknown``, which ``run`` and ``list`` both take."""
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="load case files that upstream's validation refuses (no category, a difficulty "
        "outside Easy/Medium/Hard, blank outcomes, ...), with a warning for each problem",
    )
    parser.add_argument(
        "--forbid-unknown",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a field a case file's format does not know is an error, not a warning "
        "(default: on when $CI is set)",
    )


def discovery_of(args: argparse.Namespace, config: config_mod.Config) -> loading.Discovery:
    """Which files are tests, and how strictly case files are read (flags over config)."""
    from agent_health.engine import loading

    return loading.discover(
        config.test_match,
        config.test_ignore,
        lenient=args.lenient or config.lenient_cases,
        forbid_unknown=args.forbid_unknown,
    )


def config_path(args: argparse.Namespace, paths: list[Path]) -> Path | None:
    from agent_health.engine import loading

    if getattr(args, "config", None):
        return Path(args.config)
    return loading.find_config(paths[0] if paths else Path.cwd())


def load_config(args: argparse.Namespace, paths: list[Path]) -> config_mod.Config:
    from agent_health.engine import loading

    return loading.load_config(config_path(args, paths))


def home(args: argparse.Namespace, paths: list[Path]) -> Path:
    """The suite's ``.agent-health/`` (its local ledgers, the ``--last-failed`` cache, the
    history), beside its config as the history finds it; relative to the working directory
    when it is below it, so what is printed with it runs as printed from here."""
    from agent_health import suitehome

    found = suitehome.of(config_path(args, paths), paths[0] if paths else None)
    try:
        return found.relative_to(Path.cwd())
    except ValueError:
        return found
