"""How much the gateway adds: the same load to an upstream on loopback, direct and proxied.

The upstream (aiohttp) and the gateway (``python -m agent_health.gateway``, recording every
exchange to a file ledger) each run in their own process, as the sidecar does in a pod; this
process is the client. Prints the added latency (p50/p99, one request at a time), the
throughput ratio proxied / direct (``--concurrency`` requests at once), and the time to the
first server-sent event through the gateway vs direct.

    python bench/gateway_overhead.py                 # targets: p50 added <= 1 ms,
    python bench/gateway_overhead.py --requests 200  # ratio >= 0.7, first event <= +5 ms
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

BODY = b'{"output": "ok", "trajectory": [], "token_usage": {"prompt": 3, "completion": 4}}'
SSE_PAUSE_S = 0.02
TOKEN = "bench-controller-token-0123456789"


# -- the upstream (a child process) ---------------------------------------------------------


async def small(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json")


async def sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'data: {"type": "RUN_STARTED"}\n\n')
    for n in range(3):
        await asyncio.sleep(SSE_PAUSE_S)  # a model thinking between tokens
        await response.write(f'data: {{"delta": "{n}"}}\n\n'.encode())
    await response.write_eof()
    return response


async def serve_upstream(port: int) -> None:
    app = web.Application()
    app.router.add_post("/run", small)
    app.router.add_get("/sse", sse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
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


async def wait_ready(
    client: aiohttp.ClientSession, url: str, proc: asyncio.subprocess.Process
) -> None:
    while True:
        if proc.returncode is not None:
            raise SystemExit(f"a bench process exited with {proc.returncode} before {url} answered")
        try:
            async with client.get(url) as response:
                await response.read()
                return
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def processes(ledger: Path | None) -> AsyncIterator[tuple[str, str]]:
    """Start the upstream and the gateway; yield (direct URL, gateway URL)."""
    up_port, gw_port, admin_port = free_port(), free_port(), free_port()
    upstream = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-upstream", str(up_port)
    )
    command = [
        sys.executable, "-m", "agent_health.gateway",
        "--route", f"principal=controller,listen=127.0.0.1:{gw_port},"
        f"upstream=http://127.0.0.1:{up_port}",
        "--admin", f"127.0.0.1:{admin_port}",
        "--run-id", "bench",
    ]  # fmt: skip
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as scratch:
        token_file = Path(scratch) / "token"
        token_file.write_text(TOKEN)
        command += ["--token", f"controller={token_file}"]
        if ledger is not None:
            env["AGENT_HEALTH_LEDGER_KEY"] = "bench-key-" + "k" * 32
            command += ["--ledger", f"file://{ledger}", "--cell", "bench"]
        gateway = await asyncio.create_subprocess_exec(*command, env=env, stderr=subprocess.DEVNULL)
        try:
            async with aiohttp.ClientSession() as client:
                await wait_ready(client, f"http://127.0.0.1:{up_port}/sse", upstream)
                await wait_ready(client, f"http://127.0.0.1:{admin_port}/healthz", gateway)
            yield f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{gw_port}"
        finally:
            for proc in (gateway, upstream):
                proc.send_signal(signal.SIGTERM)
            for proc in (gateway, upstream):
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def one(client: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    headers = {"X-Agent-Health-Token": TOKEN}
    async with client.post(url, data=b'{"prompt": "hi"}', headers=headers) as r:
        await r.read()
        if r.status != 200:
            raise SystemExit(f"{url} answered {r.status}")
    return (time.perf_counter() - started) * 1000


async def latencies(
    client: aiohttp.ClientSession, base: dict[str, str], n: int
) -> dict[str, list[float]]:
    """One request at a time, alternating direct and proxied in blocks so drift hits both."""
    samples: dict[str, list[float]] = {name: [] for name in base}
    block = max(1, min(50, n // 10))
    for _ in range(max(1, n // block)):
        for name, url in base.items():
            for _ in range(block):
                samples[name].append(await one(client, url + "/run"))
    return samples


async def throughput(client: aiohttp.ClientSession, url: str, n: int, concurrency: int) -> float:
    queue = iter(range(n))

    async def worker() -> None:
        for _ in queue:
            await one(client, url + "/run")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - started)


async def first_event(client: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with client.get(url + "/sse", headers={"X-Agent-Health-Token": TOKEN}) as r:
        await r.content.readuntil(b"\n\n")
        elapsed = (time.perf_counter() - started) * 1000
        await r.read()
    return elapsed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        ledger = None if args.no_ledger else Path(scratch) / "ledger"
        async with processes(ledger) as (direct, proxied):
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as client:
                base = {"direct": direct, "gateway": proxied}
                for url in base.values():  # warm up connections and code paths
                    await latencies(client, {"w": url}, min(100, args.requests))
                lat = await latencies(client, base, args.requests)
                # Alternating rounds, median per side: a busy neighbour on the machine then
                # slows both sides alike instead of deciding the ratio.
                rounds: dict[str, list[float]] = {name: [] for name in base}
                for _ in range(args.rounds):
                    for name, url in base.items():
                        rate = await throughput(client, url, args.requests, args.concurrency)
                        rounds[name].append(rate)
                rates = {name: statistics.median(values) for name, values in rounds.items()}
                ttfe: dict[str, list[float]] = {name: [] for name in base}
                for _ in range(args.sse_runs):
                    for name, url in base.items():
                        ttfe[name].append(await first_event(client, url))
        recorded = sum(1 for _ in (ledger / "bench.jsonl").open()) - 1 if ledger else 0
    d50, d99 = pct(lat["direct"], 0.5), pct(lat["direct"], 0.99)
    g50, g99 = pct(lat["gateway"], 0.5), pct(lat["gateway"], 0.99)
    f_direct, f_gateway = statistics.median(ttfe["direct"]), statistics.median(ttfe["gateway"])
    ratio = rates["gateway"] / rates["direct"]
    ratios = sorted(g / d for g, d in zip(rounds["gateway"], rounds["direct"], strict=True))
    where = "no ledger" if ledger is None else f"recording {recorded} exchanges to a file ledger"
    print(f"gateway overhead: {args.requests} requests, concurrency {args.concurrency}, {where}")
    print(f"latency direct    p50 {d50:.3f} ms  p99 {d99:.3f} ms")
    print(f"latency gateway   p50 {g50:.3f} ms  p99 {g99:.3f} ms")
    print(f"added latency     p50 {g50 - d50:.3f} ms  p99 {g99 - d99:.3f} ms  (target p50 <= 1 ms)")
    print(
        f"throughput        direct {rates['direct']:.0f} req/s  gateway {rates['gateway']:.0f} "
        f"req/s  ratio {ratio:.2f}  (target >= 0.7; rounds {ratios[0]:.2f}..{ratios[-1]:.2f})"
    )
    print(
        f"sse first event   direct p50 {f_direct:.3f} ms  gateway p50 {f_gateway:.3f} ms  "
        f"added {f_gateway - f_direct:.3f} ms  (target <= 5 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="for the throughput run")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds per side")
    parser.add_argument("--sse-runs", type=int, default=50, help="streams per side")
    parser.add_argument("--no-ledger", action="store_true", help="proxy without recording")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream is not None:
        asyncio.run(serve_upstream(args.serve_upstream))
        return
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
