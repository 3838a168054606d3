"""What a busy thread beside the event loop costs each of the loop's waits, by switch interval.

A run's event loop shares the interpreter with threads that work beside it (the ledger's
writer, the history's). When an answer wakes the loop while such a thread runs, the loop
waits for the thread to let go of the interpreter: at most the switch interval, which
CPython sets at 5 ms and ``agent-health`` sets at 0.5 ms while a command runs
(``agent_health.cli.app``). This measures it without a harness: a round trip over a socket
pair to an echo that takes ``--think`` ms, alone and beside a thread that never waits, at
each interval; the median round trip and its ratio to the loop alone. All in this process.

    python bench/handover.py
    python bench/handover.py --trips 500 --think 5
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import threading
import time

INTERVALS = (0.005, 0.001, 0.0005)


def _busy(stop: threading.Event) -> None:
    """Pure Python work that never waits: it lets go of the interpreter only when asked."""
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i * i


async def _round_trips(trips: int, think: float) -> float:
    """The median seconds of ``trips`` round trips to an echo that thinks ``think`` s."""
    near, far = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=near)
    echo_reader, echo_writer = await asyncio.open_connection(sock=far)

    async def echo() -> None:
        while data := await echo_reader.read(100):
            await asyncio.sleep(think)
            echo_writer.write(data)
            await echo_writer.drain()

    task = asyncio.create_task(echo())
    took = []
    for _ in range(trips):
        started = time.perf_counter()
        writer.write(b"x")
        await writer.drain()
        await reader.read(100)
        took.append(time.perf_counter() - started)
    writer.close()
    echo_writer.close()
    task.cancel()
    return statistics.median(took)


def measure(interval: float, trips: int, think: float) -> tuple[float, float]:
    """(round trip beside a busy thread, round trip alone) at switch interval ``interval``."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        alone = asyncio.run(_round_trips(trips, think))
        stop = threading.Event()
        thread = threading.Thread(target=_busy, args=(stop,), daemon=True)
        thread.start()
        try:
            beside = asyncio.run(_round_trips(trips, think))
        finally:
            stop.set()
            thread.join()
    finally:
        sys.setswitchinterval(before)
    return beside, alone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, default=200, help="round trips per side")
    parser.add_argument("--think", type=float, default=2.0, help="the echo's wait, ms")
    args = parser.parse_args(argv)
    if args.trips < 1 or args.think < 0:
        print("error: --trips must be at least 1 and --think at least 0", file=sys.stderr)
        return 2
    print(f"a {args.think:g} ms round trip, median of {args.trips}: beside a busy thread / alone")
    for interval in INTERVALS:
        beside, alone = measure(interval, args.trips, args.think / 1000)
        print(
            f"   switch interval {interval * 1000:>4.1f} ms   beside {beside * 1000:6.2f} ms   "
            f"alone {alone * 1000:6.2f} ms   ratio {beside / alone:5.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
