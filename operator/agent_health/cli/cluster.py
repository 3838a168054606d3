"""The cluster's commands: ``operator``, ``cell`` (a cell's controller), ``gateway``, ``crds``.

kopf and the cluster package load only when one of these runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent_health.cli import common


def add_commands(sub: Any) -> None:
    crds_cmd = sub.add_parser("crds", help="print the CRDs generated from the models")
    crds_cmd.add_argument("--out", metavar="DIR", help="write one YAML file per CRD into DIR")
    crds_cmd.set_defaults(handler=crds)

    cell_cmd = sub.add_parser("cell", help="run one test inside a cell pod (the controller)")
    cell_cmd.add_argument("--test", help="the test's id (file::title)")
    cell_cmd.add_argument("--repeat", type=int, help="the repeat index (0-based; default 0)")
    cell_cmd.add_argument(
        "--assignment",
        metavar="FILE",
        help="a pooled (warm) cell: wait for its assignment in FILE, then run the test, repeat "
        "and settings it names (instead of --test and --repeat)",
    )
    cell_cmd.add_argument("--suite", default=".", help="the suite's folder (default: .)")
    cell_cmd.set_defaults(handler=cell)

    # The gateway and the operator parse their own flags (app.main hands them argv), so their
    # servers load only when they run; these entries are for the command list and `--help`.
    gateway_cmd = sub.add_parser(
        "gateway", help="the recording sidecar proxy of a cell", add_help=False
    )
    gateway_cmd.add_argument("gateway_args", nargs=argparse.REMAINDER)
    gateway_cmd.set_defaults(handler=lambda args, _consoles: gateway(args.gateway_args))

    mcp_cmd = sub.add_parser(
        "mcp",
        help="run an MCP peer: a stdio server behind HTTP (bridge), or a mock server (mock)",
        add_help=False,
    )
    mcp_cmd.add_argument("mcp_args", nargs=argparse.REMAINDER)
    mcp_cmd.set_defaults(handler=lambda args, _consoles: mcp(args.mcp_args))

    operator_cmd = sub.add_parser(
        "operator",
        help="the Kubernetes operator: kopf, judge service, metrics, probes",
        add_help=False,
    )
    operator_cmd.add_argument("operator_args", nargs=argparse.REMAINDER)
    operator_cmd.set_defaults(handler=lambda args, _consoles: operator(args.operator_args))


def cell(args: argparse.Namespace, consoles: common.Consoles) -> int:
    if args.assignment is not None:
        if args.test is not None or args.repeat is not None:
            consoles.error(
                "agent-health cell: --assignment names the test and repeat; "
                "give either --assignment FILE or --test ID [--repeat N]"
            )
            return common.EXIT_USAGE
        from agent_health.engine import controller

        return controller.run_warm_cell(Path(args.suite), Path(args.assignment))
    if args.test is None:
        consoles.error("agent-health cell: give --test ID [--repeat N], or --assignment FILE")
        return common.EXIT_USAGE
    from agent_health.engine import controller

    return controller.run_cell(Path(args.suite), args.test, args.repeat or 0)


def crds(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.cluster.api import crds

    if args.out is None:
        sys.stdout.write(crds.render())
        return common.EXIT_OK
    for path in crds.write(Path(args.out)):
        consoles.out.print(f"wrote {path}")
    return common.EXIT_OK


def gateway(argv: list[str]) -> int:
    from agent_health.gateway import command

    return command.main(argv)


def mcp(argv: list[str]) -> int:
    from agent_health.peers import command

    return command.main(argv)


def operator(argv: list[str]) -> int:
    try:
        from agent_health.cluster import operator, options
    except ModuleNotFoundError as err:  # even for --help: without kopf there is no operator
        missing = common.missing_extra("agent-health operator", "operator", err)
        if missing is None:
            raise
        raise missing from err

    parser = argparse.ArgumentParser(
        prog="agent-health operator", description=options.DESCRIPTION, epilog=options.EPILOG
    )
    options.add_arguments(parser)
    try:
        chosen = options.from_args(parser.parse_args(argv))
    except ValueError as err:
        raise common.UsageError(str(err)) from err
    return operator.run(chosen)
