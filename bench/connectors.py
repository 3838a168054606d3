"""Harness CPU per agent call: each built-in HTTP connector next to a bare aiohttp client.

An agent (aiohttp, in a child process, so its CPU is not ours) answers at once: a REST
protocol v1 reply, an OpenAI chat completion, or an AG-UI event stream of six events. This
process makes ``--calls`` calls with ``--concurrency`` in flight through each connector's
``run()`` — request model to reply model, the way ``agent.run()`` uses it, observed for the
local ledger as a default run does — and through a bare aiohttp POST that only reads the
bytes (the baseline: what the client library alone costs). The figure is this process's CPU
time (``time.process_time``) per call, the median of ``--rounds`` interleaved rounds.

    python bench/connectors.py                # target: each connector <= 0.2 ms per call

The CPU includes the event loop's own work per call (socket reads and writes, wake-ups),
which the baseline pays too; the difference is what the connector adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
from agent_health import connectors
from agent_health.connectors.protocol import AgentRequest
from aiohttp import web

TARGET_MS = 0.2
REST = {
    "output": "pong",
    "trajectory": [{"type": "assistant", "content": "pong"}],
    "token_usage": {"prompt": 1, "completion": 1, "total": 2},
}
CHAT = {
    "choices": [{"message": {"role": "assistant", "content": "pong"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
AGUI_EVENTS = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "po"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "ng"},
    {"type": "TEXT_MESSAGE_END", "messageId": "m"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
]
AGUI = "".join(f"data: {json.dumps(e)}\n\n" for e in AGUI_EVENTS).encode()


# -- the agent (a child process) -----------------------------------------------------------


async def serve_agent(port: int) -> None:
    async def rest(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(REST)

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(CHAT)

    async def agui(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=AGUI, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/run", rest)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/agui", agui)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


# -- the bench ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def cpu_per_call(call: Callable[[int], Awaitable[None]], calls: int, inflight: int) -> float:
    """CPU milliseconds per call, ``inflight`` at a time."""
    for n in range(min(50, calls)):  # connections open, code paths warm
        await call(n)
    numbers = iter(range(calls))

    async def worker() -> None:
        for n in numbers:
            await call(n)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return (time.process_time() - started) * 1000 / calls


async def bench(args: argparse.Namespace, base: str) -> dict[str, list[float]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    body = json.dumps({"prompt": "ping", "context": [], "run_id": "r", "env": {}}).encode()

    async def bare(_n: int) -> None:
        async with session.post(
            base + "/run", data=body, headers={"content-type": "application/json"}
        ) as response:
            await response.read()

    seen: list[object] = []
    made = {
        kind: connectors.create(
            connectors.ConnectorSpec(connector=kind, url=base + path), observe=seen.append
        )
        for kind, path in (("rest", "/run"), ("openai", "/v1"), ("agui", "/agui"))
    }

    def through(kind: str) -> Callable[[int], Awaitable[None]]:
        connector = made[kind]

        async def call(n: int) -> None:
            reply = await connector.run(AgentRequest(prompt="ping", run_id=f"run-{n}"))
            if reply.output != "pong":
                raise SystemExit(f"the {kind} connector read {reply.output!r}, not 'pong'")

        return call

    sides: dict[str, Callable[[int], Awaitable[None]]] = {"bare aiohttp POST (baseline)": bare}
    sides.update({f"{kind} connector": through(kind) for kind in made})
    figures: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for _ in range(args.rounds):
            for name, call in sides.items():
                figures[name].append(await cpu_per_call(call, args.calls, args.concurrency))
                seen.clear()
    finally:
        await session.close()
        for connector in made.values():
            await connector.aclose()
    return figures


async def main_async(args: argparse.Namespace) -> int:
    port = free_port()
    agent = subprocess.Popen([sys.executable, __file__, "--serve-agent", str(port)])  # noqa: ASYNC220
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as probe:
            for _ in range(200):
                try:
                    async with probe.post(base + "/run", data=b"{}") as response:
                        await response.read()
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
        figures = await bench(args, base)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    print(
        f"harness CPU per agent call — Python {platform.python_version()}, {os.cpu_count()} "
        f"CPUs, load average {os.getloadavg()[0]:.1f}; {args.calls} calls, {args.concurrency} "
        f"in flight, median of {args.rounds} rounds"
    )
    baseline = statistics.median(figures["bare aiohttp POST (baseline)"])
    for name, values in figures.items():
        ms = statistics.median(values)
        if name.startswith("bare"):
            print(f"   {name:<32}{ms:7.3f} ms CPU per call")
            continue
        mark = "PASS" if round(ms, 2) <= TARGET_MS else "MISS"
        print(
            f"   {name:<32}{ms:7.3f} ms CPU per call  ({ms - baseline:+.3f} over the bare "
            f"client)   target <= {TARGET_MS:.2f}   {mark}"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per side and round")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median)")
    parser.add_argument("--serve-agent", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_agent is not None:
        asyncio.run(serve_agent(args.serve_agent))
        return 0
    if min(args.calls, args.concurrency, args.rounds) < 1:
        print("error: --calls, --concurrency and --rounds must be at least 1", file=sys.stderr)
        return 2
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
