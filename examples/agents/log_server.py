"""The triage agent's tool service on its own: a peer container for cluster runs.

It serves the same ``/search_logs`` and ``/service_status`` endpoints (and the same canned
incident data) that :mod:`triage_agent` serves in-process on a second port, so a RunSpec
can run it as a peer (``peers: [{name: logs, port: 9000}]``) whose calls the cell's gateway
records as ``peer:logs``.

    python log_server.py --host 0.0.0.0 --port 9000
    # GET http://127.0.0.1:9000/search_logs?service=payment&level=error
    # GET http://127.0.0.1:9000/service_status?name=db-primary
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import triage_agent
from aiohttp import web


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def app(fault: str | None = None) -> web.Application:
    """The tool endpoints plus ``/healthz`` for the peer's readiness probe."""
    served = triage_agent.tools_app(fault)
    served.router.add_get("/healthz", healthz)
    return served


async def start(host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve the tools on ``host:port`` (0 = a free port); return the runner and base URL."""
    runner = web.AppRunner(app())
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}"


async def _main(host: str, port: int) -> None:
    runner, url = await start(host, port)
    print(f"log server listening on {url}", flush=True)
    try:
        await asyncio.Event().wait()
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
