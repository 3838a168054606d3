"""The entry point: build the parser from each command group, dispatch, map errors to exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agent_health import connectors, ledger
from agent_health.cli import cluster, common, ledgers, reports, run
from agent_health.gateway import errors as gateway_errors
from agent_health.sdk import errors


def parser() -> argparse.ArgumentParser:
    """The whole command line; each group adds its commands and their handlers."""
    top = argparse.ArgumentParser(prog="agent-health", description="Test and benchmark AI agents.")
    sub = top.add_subparsers(dest="command", required=True)
    run.add_commands(sub)
    ledgers.add_commands(sub)
    reports.add_commands(sub)
    cluster.add_commands(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    consoles = common.Consoles()
    if argv[:1] == ["operator"]:  # its own parser, so `operator --help` shows its flags
        try:
            return cluster.operator(argv[1:])
        except common.UsageError as err:
            consoles.err.print(f"[red]error:[/] {err}")
            return common.EXIT_USAGE
    args = parser().parse_args(argv)
    args.command_line = ["agent-health", *argv]  # what ran, for the report's provenance
    handler: common.Handler = args.handler
    try:
        return handler(args, consoles)
    except (
        common.UsageError,
        errors.ConfigError,
        errors.DefinitionError,
        connectors.ConnectorError,
        ledger.LedgerError,
        gateway_errors.GatewayError,
    ) as err:
        consoles.err.print(f"[red]error:[/] {err}")
        return common.EXIT_USAGE
