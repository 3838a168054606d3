"""``agent-health gateway`` (also ``python -m agent_health.gateway``): flags → settings → serve.

Settings come from a JSON object (``--config FILE`` or ``$AGENT_HEALTH_GATEWAY_CONFIG``) with
the fields of :class:`~agent_health.gateway.config.Settings`; flags given on the command line
override it. SIGTERM and SIGINT shut the gateway down gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from agent_health.gateway import config, errors, memory, server

EXIT_OK, EXIT_USAGE = 0, 2
_FLAGS = {  # flag dest → settings field, for flags that map one to one
    "ledger": "ledger_url",
    "ledger_log": "ledger_log",
    "key_file": "key_file",
    "cell": "cell",
    "run_id": "run_id",
    "test_id": "test_id",
    "repeat": "repeat",
    "attempt": "attempt",
    "agent": "agent",
    "admin": "admin",
    "health": "health",
    "connect_timeout": "connect_timeout",
    "timeout": "total_timeout",
    "idle_timeout": "idle_timeout",
    "grace": "grace",
    "usage_max_bytes": "usage_max_bytes",
    "mcp_max_bytes": "mcp_max_bytes",
    "mcp_keep_bytes": "mcp_keep_bytes",
    "header_timeout": "header_timeout",
    "max_connections": "max_connections",
    "max_untrusted_calls": "max_untrusted_calls",
    "admin_max_bytes": "admin_max_bytes",
    "body_timeout": "body_timeout",
    "max_refused_records": "max_refused_records",
    "max_cell_exchanges": "max_cell_exchanges",
    "max_cell_bytes": "max_cell_bytes",
    "spool": "spool",
    "spool_max_bytes": "spool_max_bytes",
    "otlp_listen": "otlp_listen",
    "otlp_max_bytes": "otlp_max_bytes",
    "otlp_max_spans": "otlp_max_spans",
    "assignment": "assignment",
    "sandbox_key_env": "sandbox_key_env",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gateway's flags, on ``parser``."""
    add = parser.add_argument
    add(
        "--route",
        action="append",
        default=[],
        metavar="principal=P,to=T,listen=HOST:PORT,upstream=URL[,protocol=mcp]",
        help="one listener (repeatable); to= defaults to target; protocol=mcp on a route to a "
        "peer reads its MCP calls into the ledger",
    )
    add("--config", help=f"JSON settings file (default: ${config.CONFIG_ENV} if set)")
    add("--ledger", help="ledger URL: file://DIR, configmap://NS/NAME, s3://... (default: none)")
    add(
        "--ledger-log",
        action="store_true",
        default=None,
        help="write the cell's sealed records to standard output, framed, instead of to a "
        "ledger (the operator collects them from the container's log into its run's "
        "ConfigMap ledger; the gateway then needs no Kubernetes credential)",
    )
    add("--key-file", help="HMAC key file (default: $AGENT_HEALTH_LEDGER_KEY)")
    add("--cell", help="the ledger cell this gateway records (a cell pod's name)")
    add(
        "--spool",
        metavar="DIR",
        help="keep the cell's records in DIR (the gateway's own, outliving its process) and "
        "write them to the ledger in one batch when the cell ends (default: write through)",
    )
    add(
        "--spool-max-bytes",
        type=int,
        help="a cell's spool past this size is written before the cell ends (default 1 MiB)",
    )
    add("--run-id", help="the cell's run id, added as X-Agent-Health-Run-Id when absent")
    add("--test-id", help="test id for the cell-meta record")
    add("--repeat", type=int, help="repeat index for the cell-meta record")
    add("--attempt", type=int, help="the cell's attempt for the cell-meta record (default 0)")
    add("--agent", help="the agent of an agent matrix this cell runs, for the cell-meta record")
    add("--image", action="append", default=[], metavar="NAME=IMAGE", help="pinned image")
    add(
        "--token",
        action="append",
        default=[],
        metavar="PRINCIPAL=FILE|env:VAR",
        help="a trusted principal's token: a file, or env:VAR for the environment variable VAR "
        "(repeatable)",
    )
    pooled = parser.add_argument_group(
        "a pooled (warm) cell: listening before its cell exists (docs/agent-protocol.md)"
    )
    pooled.add_argument(
        "--assignment",
        metavar="FILE",
        help="wait for the cell's assignment in FILE (a downward-API file); until then every "
        "call is answered 503 and nothing is recorded. Replaces --cell, --run-id, --test-id, "
        "--repeat, --attempt, --agent and --key-file",
    )
    pooled.add_argument(
        "--sandbox-key-env",
        metavar="VAR",
        help="the environment variable holding the sandbox's own key, which unwraps the "
        "assigned cell's ledger key (required with --assignment)",
    )
    add("--admin", help="HOST:PORT or unix:/PATH of the /healthz and /ledger listener")
    add("--health", help="HOST:PORT of a listener answering /healthz alone (kubelet probes)")
    add(
        "--otlp-listen",
        metavar="HOST:PORT",
        help="receive the target's OpenTelemetry spans (OTLP/HTTP, POST /v1/traces) here and "
        "seal them into the cell (the target is told: OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    add("--connect-timeout", type=float, help="seconds to connect upstream (default 10)")
    add("--timeout", type=float, help="total seconds per exchange (default: none)")
    add("--idle-timeout", type=float, help="max seconds of upstream silence (default 300)")
    add("--grace", type=float, help="seconds shutdown waits for exchanges (default 30)")
    add("--usage-max-bytes", type=int, help="bodies above this are not parsed for usage")
    add(
        "--mcp-max-bytes",
        type=int,
        help="the most bytes of one MCP message read (default 1 MiB); a longer one passes unread",
    )
    add(
        "--mcp-keep-bytes",
        type=int,
        help="an MCP result or arguments past this many bytes are left out of its record "
        "(default 64 KiB)",
    )
    limits = parser.add_argument_group("limits (every listener is reachable by the target)")
    limits.add_argument(
        "--header-timeout",
        type=float,
        help="seconds to send a request head, and to idle between requests (default 30)",
    )
    limits.add_argument(
        "--max-connections", type=int, help="open connections per listener (default 256)"
    )
    limits.add_argument(
        "--max-untrusted-calls",
        type=int,
        help="calls in flight per route from callers without a valid token (default 64)",
    )
    limits.add_argument(
        "--admin-max-bytes", type=int, help="largest /ledger/records body (default 16 MiB)"
    )
    limits.add_argument(
        "--body-timeout", type=float, help="seconds to receive an admin request body (default 60)"
    )
    limits.add_argument(
        "--max-refused-records",
        type=int,
        help="refused calls recorded per cell; the rest are counted (default 100)",
    )
    limits.add_argument(
        "--max-cell-exchanges",
        type=int,
        help="exchanges recorded per cell; past it they are dropped, counted, and the cell "
        "is marked (its grade: errored, cause infra) (default: no cap)",
    )
    limits.add_argument(
        "--max-cell-bytes",
        type=int,
        help="bytes of exchange records per cell, likewise (default: no cap)",
    )
    limits.add_argument(
        "--otlp-max-bytes", type=int, help="largest OTLP body, also inflated (default 4 MiB)"
    )
    limits.add_argument(
        "--otlp-max-spans",
        type=int,
        help="spans kept per run; later ones are dropped and counted (default 2000)",
    )


def settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> config.Settings:
    """Merge the JSON settings (file or environment) with the flags given."""
    environ = os.environ if environ is None else environ
    fields: dict[str, Any] = {}
    if args.config:
        try:
            fields = json.loads(Path(args.config).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise errors.GatewayConfigError(f"cannot read --config {args.config}: {err}") from err
    elif environ.get(config.CONFIG_ENV):
        try:
            fields = json.loads(environ[config.CONFIG_ENV])
        except ValueError as err:
            raise errors.GatewayConfigError(f"${config.CONFIG_ENV} is not JSON: {err}") from err
    if not isinstance(fields, dict):
        raise errors.GatewayConfigError("gateway settings must be a JSON object")
    for dest, field in _FLAGS.items():
        value = getattr(args, dest)
        if value is not None:
            fields[field] = value
    if args.route:
        fields["routes"] = [config.parse_route(r) for r in args.route]
    if args.image:
        fields["images"] = dict(_pair(v, "--image", "NAME=IMAGE") for v in args.image)
    if args.token:
        fields["token_files"] = dict(
            _pair(v, "--token", "PRINCIPAL=FILE or PRINCIPAL=env:VAR") for v in args.token
        )
    if not fields.get("routes"):
        raise errors.GatewayConfigError(
            "no routes: pass --route principal=controller,listen=127.0.0.1:15001,"
            "upstream=http://127.0.0.1:8080 (or routes in --config)"
        )
    return config.build(fields)


def _pair(value: str, flag: str, shape: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep or not name or not rest:
        raise errors.GatewayConfigError(f"{flag} {value!r} is not {shape}")
    return name, rest


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT; exit 2 with a one-line message on a configuration error."""
    handler = logging.StreamHandler()  # standard error: standard output is the ledger's
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    try:
        chosen = settings(args)
        if chosen.spool is not None:
            memory.keep_freed(chosen.spool_max_bytes)  # the spool's buffers are used again
        _run_loop(_serve(chosen))
    except errors.GatewayError as err:
        logging.getLogger("agent_health.gateway").error("%s", err)
        return EXIT_USAGE
    return EXIT_OK


class OneLineFormatter(logging.Formatter):
    """Each record on one line, line breaks escaped: a message may quote what the target
    sent, and no line of the log but the ledger's own may start with its frame marker
    (:mod:`agent_health.ledger.podlog`)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (``pip install 'agent-health[gateway]'``): the
    proxy's per-call cost is mostly event-loop and socket work, which uvloop halves."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


async def _serve(settings: config.Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    await server.serve(settings, stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agent-health gateway", description="The recording sidecar proxy of a cell."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    check(parser, args)
    return run(args)


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2, usage) flags that cannot go together: a pooled gateway's identity is
    its assignment's alone."""
    if args.assignment is None:
        if args.sandbox_key_env is not None:
            parser.error("--sandbox-key-env goes with --assignment (a pooled cell's gateway)")
        return
    clash = [
        "--" + dest.replace("_", "-")
        for dest in config.POOLED_CLASHES  # the flags' dests are the settings' names
        if getattr(args, dest) is not None
    ]
    if clash:
        parser.error(
            f"--assignment cannot be combined with {', '.join(clash)}: a pooled gateway takes "
            "its cell, run id, test, repeat, attempt, agent and ledger key from the assignment"
        )
    if args.sandbox_key_env is None:
        parser.error(
            "--assignment needs --sandbox-key-env VAR (the sandbox's key unwraps its cell's)"
        )
