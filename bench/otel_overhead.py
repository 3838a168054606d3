"""What OTLP export costs a run: the 400-call row of ``defaults.py`` with export off and on.

400 tests, one POST each to a 50 ms agent on 127.0.0.1, ``-j 32``, each side the whole
``agent-health run`` command in a fresh subprocess (rounds interleaved, medians; wall and CPU
time from ``wait4``, as ``defaults.py`` measures):

* export off — the command as users run it today (the baseline);
* ``--otlp`` to a real OTLP/HTTP receiver on 127.0.0.1 (in this process, off the measured
  command's clock): every test's spans are sent, and counted, while the run goes on;
* ``--otlp`` to a port nobody listens on (a diagnostic: a collector that is down).

Target: export adds under 5 % to the run's wall time. Off, export costs nothing by
construction: no OpenTelemetry module is imported (``tests/cli/test_cli_imports.py`` checks it)
and the engine calls no exporter. The script reports, it never gates: exit 0 whatever the
figures, 1 when a side crashed, did not pass its tests or the receiver got no spans.

    python bench/otel_overhead.py                 # about a minute here
    python bench/otel_overhead.py --calls 100 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import os
import platform
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import defaults
import engine_overhead
import slow_agent
import suites

TARGET = 1.05


class _Receiver(http.server.ThreadingHTTPServer):
    """Accepts OTLP/HTTP posts and counts them (the bytes are read, as a collector reads)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts = 0
        self.bytes = 0
        self.lock = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            self.server.posts += 1
            self.server.bytes += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def receiving() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="measured runs per side (median)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs per side first")
    p.add_argument("--calls", type=int, default=400, help="agent calls (default 400)")
    p.add_argument("--calls-j", type=int, default=32, help="concurrency (default 32)")
    p.add_argument("--calls-latency", type=float, default=0.05, help="agent latency (s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.rounds < 1 or args.calls < 1 or args.calls_j < 1 or args.warmup < 0:
        print("error: --rounds, --calls, --calls-j must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="agent-health-bench-otel-") as tmp,
        slow_agent.serving(args.calls_latency) as url,
        receiving() as receiver,
    ):
        suite = suites.write_ours(Path(tmp) / "calls", args.calls, 100, config=False)
        cmd = [*defaults.agent_health(), "run", ".", "-j", str(args.calls_j)]
        cmd += ["--agent", f"rest+{url}"]
        done = defaults.passed(args.calls)
        receiver_url = f"http://127.0.0.1:{receiver.server_address[1]}"
        sides = [
            defaults.Side("export off", cmd, suite, done, "baseline"),
            defaults.Side(
                "--otlp to a local receiver", [*cmd, "--otlp", receiver_url], suite, done
            ),
            defaults.Side(
                "--otlp to a closed port",
                [*cmd, "--otlp", f"http://127.0.0.1:{_closed_port()}"],
                suite,
                done,
                "diagnostic",
            ),
        ]
        try:
            row = defaults.run_row("calls", "", TARGET, sides, args)
        except engine_overhead.BenchError as err:
            print(f"benchmark crashed: {err}", file=sys.stderr)
            return 1
        runs = (args.warmup + args.rounds) * 1
        posts, sent = receiver.posts, receiver.bytes
    if posts == 0:
        print("benchmark crashed: the receiver got no spans", file=sys.stderr)
        return 1
    print(
        f"OTLP export: {args.calls} tests, one POST each to a {args.calls_latency * 1000:.0f} ms "
        f"agent, -j {args.calls_j} — Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at the end; medians of {args.rounds} rounds "
        f"after {args.warmup} warm-up"
    )
    print(f"   {'side':<46}{'wall s':>9}{'CPU s':>9}   rounds (wall s)")
    for side in row.sides:
        role = defaults.ROLE_MARKS.get(side.role, "")
        rounds = ", ".join(f"{w:.2f}" for w in side.walls)
        print(f"   {side.label + role:<46}{side.wall_s:>9.3f}{side.cpu_s:>9.3f}   {rounds}")
    base = row.side("baseline")
    for side in row.sides[1:]:
        wall, cpu = side.wall_s / base.wall_s, side.cpu_s / max(base.cpu_s, 1e-9)
        mark = "PASS" if round(wall, 2) <= TARGET else "MISS"
        target = f"   target <= {TARGET:.2f}   {mark}" if side.role == "ours" else ""
        print(f"   {side.label} / export off: wall {wall:.2f} (CPU {cpu:.2f}){target}")
    print(
        f"   the receiver got {posts} export requests, {sent / 1024:.0f} KiB, over {runs} runs "
        "with export on"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
