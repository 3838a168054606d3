"""``agent-health serve``: the web app and JSON API over the history, live runs, and starting
and steering runs (docs/serve.md). What it needs loads when it runs."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from agent_health.cli import common

READ_TOKEN_ENV = "AGENT_HEALTH_SERVE_READ_TOKEN_FILE"
OPERATE_TOKEN_ENV = "AGENT_HEALTH_SERVE_OPERATE_TOKEN_FILE"


def add_commands(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="a web app and JSON API over the history: runs, compare, live runs, start and steer",
    )
    common.history_flag(serve)
    serve.add_argument("--config", help="config file naming the history (default: found upward)")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; any other needs a "
        "token or --trust-header)",
    )
    serve.add_argument("--port", type=int, default=8340, help="port (0: any free port)")
    serve.add_argument(
        "--read-token-file",
        type=Path,
        default=os.environ.get(READ_TOKEN_ENV) or None,
        help=f"a file holding a bearer token of the read role (${READ_TOKEN_ENV})",
    )
    serve.add_argument(
        "--operate-token-file",
        type=Path,
        default=os.environ.get(OPERATE_TOKEN_ENV) or None,
        help="a file holding a bearer token of the operate role: start, cancel, suspend, "
        f"requeue, retune (${OPERATE_TOKEN_ENV})",
    )
    serve.add_argument(
        "--trust-header",
        metavar="HEADER",
        help="an authenticating proxy's header naming the user (X-Forwarded-Email, "
        "X-Goog-Authenticated-User-Email): its users read; those of --operator operate. Only "
        "behind a proxy that sets it on every request and strips it from clients",
    )
    serve.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="USER",
        help="a --trust-header user with the operate role (repeatable)",
    )
    serve.add_argument(
        "--root",
        type=Path,
        default=None,
        help="local runs started from the page run suites under this folder (default: the "
        "current one)",
    )
    serve.add_argument(
        "--cluster",
        action="store_true",
        help="watch the cluster's EvaluationRuns live and start and steer them (kubeconfig or "
        "in-cluster service account; needs the operator extra)",
    )
    serve.add_argument(
        "--namespace", help="the namespace to watch with --cluster (default: every namespace)"
    )
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    import asyncio
    import contextlib
    import sys

    from agent_health import history, server

    if not 0 <= args.port <= 65535:
        raise common.UsageError(f"--port {args.port}: a port is 0 to 65535 (0 picks a free one)")
    where = common.history_to_read(args)
    guards = server.Access(
        host=args.host,
        trust_header=args.trust_header,
        operators=frozenset(args.operator),
    )
    from agent_health.server import access

    given: tuple[tuple[access.Role, Path | None], ...] = (
        ("read", args.read_token_file),
        ("operate", args.operate_token_file),
    )
    try:
        for role, path in given:
            if path is not None:
                guards.add_token(access.read_token(Path(path), role), role)
        if args.operator and not args.trust_header:
            raise server.SettingsError("--operator names users of --trust-header: give it too")
        guards.check()
    except server.ServerError as err:
        raise common.UsageError(str(err)) from err
    settings = server.Settings(
        history=where,
        host=args.host,
        port=args.port,
        root=(args.root or Path.cwd()).resolve(),
        cluster=args.cluster,
        namespace=args.namespace,
    )
    shown = where.shown

    def ready(address: str) -> None:
        consoles.out.print(f"serving history {shown} at {address}/ (Ctrl+C to stop)", markup=False)
        sys.stdout.flush()

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(server.serve(settings, guards, ready=ready))
    except (server.ServerError, history.HistoryError) as err:
        raise common.UsageError(str(err)) from err
    return common.EXIT_OK
