"""The entry point: build the parser from each command group, dispatch, map errors to exit 2.

A command group is imported when its commands are built (``run`` and ``list`` build only
theirs); what a command needs loads when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agent_health import connectors
from agent_health.cli import common
from agent_health.sdk import errors

YOUNG_COLLECTION_EVERY = 20_000
"""Allocations between two young collections while a command runs (CPython's default: 700)."""
SWITCH_INTERVAL_S = 0.0005
"""How long a thread may hold the GIL while another waits for it, as a command runs
(CPython's default: 5 ms)."""


GROUPS = ("run", "ledgers", "reports", "history", "web", "cluster")
"""The command groups (``agent_health.cli.<group>``), in the order their commands are listed."""


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; each group adds its commands and their handlers.

    Given the ``command`` about to be parsed, the groups after the one that adds it are left
    out (``run`` and ``list`` are the first group's: a run does not build the flags of the
    other twenty commands); the whole command line when it is none of them (``--help``, a
    mistyped name).
    """
    top = argparse.ArgumentParser(prog="agent-health", description="Test and benchmark AI agents.")
    sub = top.add_subparsers(dest="command", required=True)
    for name in GROUPS:
        group = importlib.import_module(f"agent_health.cli.{name}")  # only the groups needed
        group.add_commands(sub)
        if command is not None and command in sub.choices:
            break
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    consoles = common.Consoles()
    # Their own parsers, so `operator --help` and `gateway --help` show their flags.
    if argv[:1] in (["operator"], ["gateway"], ["mcp"]):
        from agent_health.cli import cluster

        own = {"operator": cluster.operator, "gateway": cluster.gateway, "mcp": cluster.mcp}
        try:
            return own[argv[0]](argv[1:])
        except common.UsageError as err:
            consoles.error(err)
            return common.EXIT_USAGE
    if argv[:1] == ["history"]:  # a test or a subcommand in one place: its own parsers
        from agent_health.cli import history

        return _handled(lambda: history.command(argv[1:], consoles), consoles)
    top = parser(argv[0] if argv else None)
    args, unknown = top.parse_known_args(argv)
    if unknown:  # said by the command's own parser, with its usage, not the top level's
        _command_parser(top, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    args.command_line = ["agent-health", *argv]  # what ran, for the report's provenance
    handler: common.Handler = args.handler
    return _handled(lambda: handler(args, consoles), consoles)


def _handled(command: Callable[[], int], consoles: common.Consoles) -> int:
    """Run a command's handler; bad input (a usage error of any part) is one line, exit 2."""
    try:
        with _fewer_collections(), _quicker_switches():
            code = command()
        # Whatever the command, a reader that went away is said as a shell says it.
        return common.EXIT_PIPE_CLOSED if consoles.stdout.gone else code
    except Exception as err:
        if not isinstance(err, _usage_errors()):
            raise
        consoles.error(err)
        return common.EXIT_USAGE


def _command_parser(top: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the (sub)command ``args`` were parsed for: ``ledger verify``'s for
    ``agent-health ledger verify ...``."""
    found: argparse.ArgumentParser = top
    while True:
        subparsers = [a for a in found._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subparsers[0].dest, None) if subparsers else None
        if chosen is None:
            return found
        found = subparsers[0].choices[chosen]


def program() -> int:
    """The ``agent-health`` program: :func:`main`, after which the process ends.

    Everything the command made is garbage by then, and the interpreter's last cyclic
    collections at exit would walk all of it only to free it anyway (about 50 ms after a
    400-test run here); frozen, it is freed without that walk. Not done in :func:`main`,
    which also runs inside programs that go on (tests, notebooks).
    """
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``agent-health list | head``): what it did not read is not
        # an error to report, and the interpreter's own flush at exit must not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return common.EXIT_PIPE_CLOSED
    gc.freeze()
    return code


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Young collections made rarer for the length of a command, then put back as they were
    (``main`` also runs inside other programs: tests, notebooks).

    A command keeps most of what it allocates until it ends (each test's result, records,
    report entries), and the cyclic collector's default pace (every 700 allocations) went
    over those again and again: about a tenth of a 2,000-test run here. The long-running
    commands (``operator``, ``gateway``) keep the default: they returned above.
    """
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], YOUNG_COLLECTION_EVERY), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


@contextlib.contextmanager
def _quicker_switches() -> Iterator[None]:
    """The GIL handed over sooner for the length of a command, then put back as it was.

    A run's event loop shares the interpreter with threads that work beside it — the
    ledger's writer (canonical JSON and an HMAC per record), the history's (SQLAlchemy's
    import, the tests written ahead), git's — so their work fills the time the loop waits
    on agents. But each time an answer woke the loop while one of them ran, the loop waited
    up to the interpreter's switch interval (5 ms) before it could read it: a 2 ms round trip
    beside a busy thread took 8.8 ms, 3.6 ms at 0.5 ms (``bench/handover.py``), at no CPU
    cost measured in a whole run.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _usage_errors() -> tuple[type[Exception], ...]:
    """The errors that mean bad input (exit 2). The ledger's are imported only here: a
    command that never loaded the ledger cannot have raised one."""
    from agent_health.ledger import errors as ledger_errors

    return (
        common.UsageError,
        errors.ConfigError,
        errors.DefinitionError,
        connectors.ConnectorError,
        ledger_errors.LedgerError,
    )
