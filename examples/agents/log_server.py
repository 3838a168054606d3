"""The triage agent's tool service on its own: a peer container for cluster runs.

It serves the same ``/search_logs`` and ``/service_status`` endpoints (and the same canned
incident data) that :mod:`triage_agent` serves in-process on a second port, so a RunSpec
can run it as a peer (``peers: [{name: logs, port: 9000}]``) whose calls the cell's gateway
records as ``peer:logs``.

    python log_server.py --host 0.0.0.0 --port 9000
    # GET http://127.0.0.1:9000/search_logs?service=payment&level=error
    # GET http://127.0.0.1:9000/service_status?name=db-primary

In a cell, the target shares the pod's loopback with its peers, so it could call the log
server's port directly and leave no exchange in the ledger. The cell gives this container
its own token (the file ``$AGENT_HEALTH_TOKEN_FILE``; in a pooled cell, whose tokens come
from its sandbox's Secret as environment variables, ``$AGENT_HEALTH_TOKEN`` itself) and the
gateway sends that token in ``X-Agent-Health-Via-Gateway`` with every call it forwards here;
the target holds no token. So when it has a token, every tool call without it is refused
(403) — only ``/healthz``, which the kubelet probes, stays open. Outside a cell there is no
token and nothing is checked.

With ``LOG_SERVER_PROTOCOL=mcp`` in its environment (a RunSpec peer's ``env``, beside its
``protocol: mcp``) it serves the same two tools as an MCP server instead, on ``/mcp``
(agent-health's :class:`~agent_health.peers.MockServer`, the tools its functions), and the
cell's gateway reads each call of them into the ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
from pathlib import Path

import triage_agent
from agent_health.peers import MockServer
from aiohttp import web

VIA_HEADER = "X-Agent-Health-Via-Gateway"
TOKEN_FILE_ENV = "AGENT_HEALTH_TOKEN_FILE"
TOKEN_ENV = "AGENT_HEALTH_TOKEN"


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def gateway_only(token: str) -> web.Middleware:
    """Refuse every call but ``/healthz`` that does not carry ``token`` in :data:`VIA_HEADER`."""
    expected = token.encode("utf-8")

    @web.middleware
    async def check(request: web.Request, handler: web.Handler) -> web.StreamResponse:
        presented = request.headers.get(VIA_HEADER, "").encode("utf-8")
        if request.path != "/healthz" and not hmac.compare_digest(presented, expected):
            return web.json_response(
                {"error": f"call the log server through the cell's gateway ({VIA_HEADER})"},
                status=403,
            )
        return await handler(request)

    return check


def own_token() -> str | None:
    """This container's token in a cell (``$AGENT_HEALTH_TOKEN_FILE``, else
    ``$AGENT_HEALTH_TOKEN``), else ``None``. A file named but empty, or a variable set but
    blank, is an error, never a reason to serve everyone."""
    path = os.environ.get(TOKEN_FILE_ENV)
    if not path:
        if TOKEN_ENV not in os.environ:
            return None
        token = os.environ[TOKEN_ENV].strip()
        if not token:
            raise SystemExit(f"log server: ${TOKEN_ENV} is set but empty")
        return token
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise SystemExit(f"log server: ${TOKEN_FILE_ENV} names {path}, which is empty")
    return token


def app(fault: str | None = None, token: str | None = None) -> web.Application:
    """The tool endpoints plus ``/healthz`` for the peer's readiness probe; with ``token``,
    only calls the gateway forwarded are served."""
    served = triage_agent.tools_app(fault)
    served.router.add_get("/healthz", healthz)
    if token is not None:
        served.middlewares.append(gateway_only(token))
    return served


async def start(
    host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> tuple[web.AppRunner, str]:
    """Serve the tools on ``host:port`` (0 = a free port); return the runner and base URL."""
    runner = web.AppRunner(app(token=token))
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}"


PROTOCOL_ENV = "LOG_SERVER_PROTOCOL"


def mcp_tools() -> MockServer:
    """The two tools as an MCP server's (an unknown service answers ``isError``)."""
    server = MockServer("logs")

    @server.tool(description="Log lines of a service, optionally of one level")
    def search_logs(service: str, level: str = "") -> dict[str, object]:
        if service not in triage_agent.LOGS:
            raise LookupError(f"unknown service {service!r}")
        lines = [e for e in triage_agent.LOGS[service] if not level or e["level"] == level]
        return {"service": service, "lines": lines}

    @server.tool(description="The status of a dependency")
    def service_status(name: str) -> dict[str, object]:
        return {"name": name, "status": triage_agent.STATUS.get(name, "unknown")}

    return server


async def _serve_mcp(host: str, port: int) -> None:
    running = await mcp_tools().serve(host, port, token=own_token())
    print(f"log server (MCP) listening on {running.url}", flush=True)
    try:
        await triage_agent.until_terminated()
    finally:
        await running.stop()


async def _main(host: str, port: int) -> None:
    if os.environ.get(PROTOCOL_ENV) == "mcp":
        await _serve_mcp(host, port)
        return
    runner, url = await start(host, port, own_token())
    print(f"log server listening on {url}", flush=True)
    try:
        await triage_agent.until_terminated()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port))


if __name__ == "__main__":
    main()
