"""``list`` (and ``run --list``): the tests a suite holds, printed without running them.

``list`` imports the loader and nothing else (``tests/cli/test_cli_imports.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.cli import common
from agent_health.cli.run import suite as suite_mod

if TYPE_CHECKING:
    from agent_health.engine import loading


def add_command(sub: Any) -> None:
    ls = sub.add_parser("list", help="discover tests without running them")
    ls.add_argument("paths", nargs="*", default=["."])
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument(
        "--grep",
        action="append",
        default=[],
        help="only tests whose title or id matches this regex (repeat it: any may match)",
    )
    ls.add_argument(
        "--label",
        action="append",
        default=[],
        help="only tests with this label (repeat it: all must match, letter case aside)",
    )
    ls.add_argument("--config", help="config file (default: agent-health.config.py found upward)")
    suite_mod.case_file_flags(ls)
    ls.set_defaults(handler=list_command)


def list_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import loading

    paths = [Path(p) for p in args.paths]
    suite = loading.load(paths, suite_mod.discovery_of(args, suite_mod.load_config(args, paths)))
    cases = loading.select_tests(suite.cases, grep=args.grep, labels=args.label)
    return print_cases(cases, suite, as_json=args.json, consoles=consoles)


def print_cases(
    cases: list[Any], suite: loading.Suite, *, as_json: bool, consoles: common.Consoles
) -> int:
    """What ``list`` (and ``run --list``) prints: every selected test, or JSON."""
    from agent_health.engine import loading

    for error in suite.errors:
        consoles.error(error, label="load error")
    for note in loading.notes(suite):
        sys.stderr.write(note + "\n")
    if as_json:
        from agent_health.ledger import strictjson

        payload = [loading.list_entry(c) for c in cases]
        # A code test may hold a NaN (a parameter, metadata): written as null, never as the
        # bare NaN that is not JSON.
        sys.stdout.write(strictjson.dumps(payload, indent=2) + "\n")
    else:
        for c in cases:
            sys.stdout.write(loading.list_line(c) + "\n")  # its titles and labels made visible
        skipped = f", {len(suite.skipped)} JSON skipped" if suite.skipped else ""
        sys.stdout.write(f"{len(cases)} tests in {len(suite.files)} files{skipped}\n")
    return common.EXIT_USAGE if suite.errors else common.EXIT_OK
