"""``agent-health mcp``: run an MCP peer — a stdio server behind HTTP, or a mock — or list
the tools of running ones.

::

    agent-health mcp bridge [--listen HOST:PORT] -- COMMAND [ARG...]
    agent-health mcp mock FILE.py:NAME [--listen HOST:PORT]
    agent-health mcp tools NAME=URL [NAME=URL...] [--timeout SECONDS]

``bridge`` serves the stdio MCP server ``COMMAND`` over Streamable HTTP (one process per
session; :mod:`~agent_health.peers.bridge`); ``mock`` serves the
:class:`~agent_health.peers.mock.MockServer` named ``NAME`` in the Python file ``FILE.py`` (a
test file that declares it, say). Both answer on ``/mcp`` until SIGTERM or SIGINT. In a cell
(``$AGENT_HEALTH_TOKEN_FILE`` or ``$AGENT_HEALTH_TOKEN`` set) they serve only the calls the
gateway forwards, which carry that token: the target cannot reach them unrecorded.

``tools`` asks each MCP server its tools (:mod:`~agent_health.peers.catalog`) and prints
one JSON object and nothing else: ``{"peers": {NAME: {"tools": [...]} or {"error":
"..."}}}``, exit 0 once it is printed. The operator runs it beside a RunSpec's MCP peers when
the RunSpec resolves, and reads it from the container's log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from agent_health.ledger import strictjson
from agent_health.peers import bridge, catalog, errors, mock, streamable

EXIT_OK, EXIT_USAGE = 0, 2
log = logging.getLogger("agent_health.peers")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="agent-health mcp", description="Run an MCP peer: a stdio server's bridge, or a mock."
    )
    sub = top.add_subparsers(dest="kind", required=True)
    bridging = sub.add_parser(
        "bridge",
        help="serve a stdio MCP server over Streamable HTTP, so a gateway records its calls",
        description="Serve the stdio MCP server COMMAND over Streamable HTTP on /mcp (one "
        "process per session), so a gateway route with protocol=mcp records its calls.",
    )
    bridging.add_argument(
        "--listen", default="127.0.0.1:8000", help="HOST:PORT (default %(default)s)"
    )
    bridging.add_argument(
        "--max-sessions", type=int, default=16, help="processes at once (default %(default)s)"
    )
    bridging.add_argument(
        "--timeout", type=float, default=300.0, help="seconds one request may take (default 300)"
    )
    bridging.add_argument("server", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    mocking = sub.add_parser(
        "mock",
        help="serve a MockServer declared in a Python file",
        description="Serve the MockServer named NAME in the Python file FILE.py on /mcp.",
    )
    mocking.add_argument("target", metavar="FILE.py:NAME")
    mocking.add_argument(
        "--listen", default="127.0.0.1:8000", help="HOST:PORT (default %(default)s)"
    )
    listing = sub.add_parser(
        "tools",
        help="list the tools of MCP servers (tools/list), as JSON",
        description="Ask each MCP server (Streamable HTTP) its tools and print "
        '{"peers": {NAME: {"tools": [...]} or {"error": "..."}}} as one JSON object.',
    )
    listing.add_argument("servers", nargs="+", metavar="NAME=URL")
    listing.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per server (default %(default)s)"
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.kind == "tools":
        try:
            servers = _servers(args.servers)
        except errors.PeerConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        print(strictjson.dumps({"peers": asyncio.run(_tools(servers, args.timeout))}))
        return EXIT_OK
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        host, port = _listen(args.listen)
        token = streamable.cell_token()
        if args.kind == "bridge":
            command = args.server[1:] if args.server[:1] == ["--"] else args.server
            if not command:
                raise errors.PeerConfigError("give the server's command after --")
            asyncio.run(_bridge(command, args, host, port, token))
        else:
            asyncio.run(_mock(load(args.target), host, port, token))
    except errors.PeerError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _servers(given: list[str]) -> dict[str, str]:
    servers: dict[str, str] = {}
    for item in given:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise errors.PeerConfigError(f"{item!r} is not NAME=URL (an http:// or https:// URL)")
        servers[name] = url
    return servers


async def _tools(servers: dict[str, str], timeout: float) -> dict[str, dict[str, Any]]:
    """Each server's tools, or why it could not list them, asked all at once."""

    async def one(url: str) -> dict[str, Any]:
        try:
            return {"tools": await catalog.tools_of(url, timeout=timeout)}
        except errors.PeerError as err:
            return {"error": str(err)}

    found = await asyncio.gather(*(one(url) for url in servers.values()))
    return dict(zip(servers, found, strict=True))


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise errors.PeerConfigError(f"--listen {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def load(target: str) -> mock.MockServer:
    """The :class:`~agent_health.peers.mock.MockServer` a ``FILE.py:NAME`` names."""
    file, sep, name = target.rpartition(":")
    if not sep or not file or not name:
        raise errors.PeerConfigError(f"{target!r} is not FILE.py:NAME")
    path = Path(file)
    if not path.is_file():
        raise errors.PeerConfigError(f"{target}: no file {file}")
    spec = importlib.util.spec_from_file_location(f"_agent_health_mock_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise errors.PeerConfigError(f"{target}: {file} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # as a test file is imported: beside itself
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise errors.PeerConfigError(f"{target}: importing {file} failed: {err}") from err
    found = getattr(module, name, None)
    if not isinstance(found, mock.MockServer):
        raise errors.PeerConfigError(
            f"{target}: {name} is {type(found).__name__ if found is not None else 'not defined'}, "
            "not a MockServer"
        )
    return found


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def _bridge(
    command: list[str], args: argparse.Namespace, host: str, port: int, token: str | None
) -> None:
    served = bridge.Bridge(
        command, max_sessions=args.max_sessions, timeout=args.timeout, token=token
    )
    url = await served.start(host, port)
    log.info("mcp bridge: %s on %s", " ".join(command), url)
    try:
        await _until_stopped()
    finally:
        await served.stop()


async def _mock(server: mock.MockServer, host: str, port: int, token: str | None) -> None:
    running = await server.serve(host, port, token=token)
    log.info("mock MCP server %s (%d tools) on %s", server.name, len(server.tools), running.url)
    try:
        await _until_stopped()
    finally:
        await running.stop()
