"""A REST protocol v1 agent on 127.0.0.1 that takes a fixed time to answer (or never does).

It runs on its own event loop in a background thread of the benchmark process, so the
engine under test (a subprocess) reaches it over real loopback HTTP. ``latency=None`` is an
agent that hangs: it reads the request and never answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from aiohttp import web


def _app(latency: float | None) -> web.Application:
    shutdown = asyncio.Event()

    async def run(request: web.Request) -> web.Response:
        body = await request.json()
        if latency is None:
            await shutdown.wait()  # hangs until the server shuts down
            return web.Response(status=503)
        else:
            await asyncio.sleep(latency)
        return web.json_response(
            {
                "output": "pong" if body.get("prompt") == "ping" else "?",
                "trajectory": [{"type": "assistant", "content": "pong"}],
                "token_usage": {"prompt": 1, "completion": 1, "total": 2},
            }
        )

    async def on_shutdown(_app: web.Application) -> None:
        shutdown.set()

    app = web.Application()
    app.router.add_post("/run", run)
    app.on_shutdown.append(on_shutdown)
    return app


@contextlib.contextmanager
def serving(latency: float | None) -> Iterator[str]:
    """Serve the slow agent for the duration of the block; yields its ``/run`` URL."""
    loop = asyncio.new_event_loop()
    # A short shutdown: a hanging agent's handlers are cut, not waited for.
    runner = web.AppRunner(_app(latency), access_log=None, shutdown_timeout=0.5)
    ready = threading.Event()
    url: list[str] = []

    async def start() -> None:
        await runner.setup()
        # A wide backlog: the engine opens dozens of connections at once.
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        url.append(f"http://127.0.0.1:{port}/run")

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        finally:
            ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, name="slow-agent", daemon=True)
    thread.start()
    ready.wait()
    if not url:
        raise RuntimeError("the slow agent did not start on 127.0.0.1")
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
