"""agent-health serve's speed: the API's page of a 2,000-test run read from PostgreSQL, and
live followers of a run that finishes 1,000 results a second.

1. **Page** — a PostgreSQL history (a server the benchmark starts itself,
   ``tests/support/postgres_support.py``; skipped without root or the server) of ``--runs`` runs of
   ``--tests`` tests, filled through ``History.record``; ``agent-health serve`` started on
   it as a process of its own; ``GET /api/runs/RUN/results?limit=TESTS`` asked ``--repeat``
   times after a warm-up: its p50 and p95 (target p95 <= 50 ms). Beside it, back to back
   with each request, the baseline in this process: the same page as the query alone
   (``History.results_json``, what the server runs for it, without HTTP), and the ratio.
2. **Live** — the server as a process; ``--followers`` clients follow ``/api/events`` (what
   a page's EventSource does: the same stream, read line by line) while a poster sends a
   run's results at ``--rate`` a second for ``--seconds`` seconds, in the batches ``run
   --serve`` posts. Reported: whether every follower got every result, the p95 lag from a
   result's post to its arrival, and the server's CPU (its process's user + system time over
   the wall time: target under one core). The baseline, in the same process: the same posts
   with no follower, and the ratio of the two CPU figures (what the followers cost).

The script reports, it never gates: exit 0 whatever the figures, 1 when a side failed its
work, 2 for bad options.

    python bench/serve.py                                   # both parts
    python bench/serve.py --part live --followers 10 --rate 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

PARTS = ("page", "live")
CHANGE = {"X-Agent-Health": "1", "Content-Type": "application/json"}


def agent_health() -> list[str]:
    script = Path(sys.executable).parent / "agent-health"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent_health.cli"]


@contextlib.contextmanager
def server(history_url: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """``agent-health serve`` as a process of its own: its URL and pid."""
    process = subprocess.Popen(
        [*agent_health(), "serve", "--history", history_url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"at (http://\S+)/ ", line)
        if found is None:
            raise RuntimeError(f"the server did not start: {line}{process.stdout.read()}")
        yield found.group(1), process.pid
    finally:
        process.terminate()
        process.wait(30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# -- page ------------------------------------------------------------------------------------


def page(args: argparse.Namespace) -> list[str]:
    from agent_health import history
    from support import postgres_support
    from support.history_support import report

    why = postgres_support.unavailable()
    if why is not None:
        return [f"page: skipped ({why})"]
    lines = []
    with postgres_support.running() as pg:
        os.environ["PGPASSWORD"] = postgres_support.PASSWORD
        url = str(pg.url(pg.new_database()))
        statuses = ("passed",) * 17 + ("failed", "errored", "skipped")
        with history.open_history(url) as opened:
            for n in range(args.runs):
                tests = {f"suite/t{i // 100:02d}.py::test {i:04d}": statuses[(i * 7 + n) % 20]
                         for i in range(args.tests)}  # fmt: skip
                opened.record(report(tests, run_id=f"run-{n:04d}", at=n))
            uid = f"run-{args.runs - 1:04d}"
            with server(url) as (base, pid), httpx.Client(base_url=base, timeout=60) as client:
                path = f"/api/runs/{uid}/results?limit={args.tests}"
                for _ in range(10):
                    assert len(client.get(path).json()["results"]) == args.tests
                    opened.results_json(uid, limit=args.tests)
                # Back to back: a request, then the query alone in this process (what the
                # server runs for it: the page's JSON from PostgreSQL, no HTTP), so the
                # machine's load stretches both alike.
                # CPU as well as wall time: on two cores shared with other work the wall
                # time is mostly waiting for a core, the CPU time is what the page costs.
                timed, baseline, served_cpu, alone_cpu = [], [], 0.0, 0.0
                for _ in range(args.repeat):
                    cpu, started = cpu_seconds(pid), time.perf_counter()
                    answer = client.get(path)
                    timed.append((time.perf_counter() - started) * 1000)
                    served_cpu += cpu_seconds(pid) - cpu
                    assert answer.status_code == 200
                    cpu, started = time.thread_time(), time.perf_counter()
                    opened.results_json(uid, limit=args.tests)
                    baseline.append((time.perf_counter() - started) * 1000)
                    alone_cpu += time.thread_time() - cpu
        p95, base95 = percentile(timed, 0.95), percentile(baseline, 0.95)
        lines.append(
            f"page: GET a {args.tests}-test run's results from PostgreSQL ({args.runs} runs "
            f"in the history), {args.repeat} times: p50 {statistics.median(timed):.1f} ms, "
            f"p95 {p95:.1f} ms (target p95 <= 50 ms: {'PASS' if p95 <= 50 else 'MISS'}); "
            f"the query alone, back to back with it, p50 {statistics.median(baseline):.1f} ms, "
            f"p95 {base95:.1f} ms; ratio p95 {p95 / base95:.2f}; CPU a page: the server "
            f"{served_cpu / args.repeat * 1000:.1f} ms, the query alone "
            f"{alone_cpu / args.repeat * 1000:.1f} ms; load average {os.getloadavg()[0]:.1f}"
        )
    return lines


# -- live ------------------------------------------------------------------------------------


def live(args: argparse.Namespace) -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as work:
        url = f"sqlite:///{Path(work) / 'h.db'}"
        quiet = _live_round(url, args, followers=0)
        loaded = _live_round(url, args, followers=args.followers)
    total = int(args.rate * args.seconds)
    ratio = loaded["cores"] / max(quiet["cores"], 1e-9)
    lines.append(
        f"live: {total} results posted at {args.rate:g}/s for {args.seconds:g} s; "
        f"{args.followers} followers got {loaded['received']} of "
        f"{args.followers * total} ({'all' if loaded['complete'] else 'NOT ALL'}), lag p50 "
        f"{loaded['lag50']:.0f} ms, p95 {loaded['lag95']:.0f} ms; server CPU "
        f"{loaded['cores']:.2f} cores (target < 1: {'PASS' if loaded['cores'] < 1 else 'MISS'})"
        f"; with no follower {quiet['cores']:.2f} cores; ratio {ratio:.2f}"
    )
    return lines


def _live_round(url: str, args: argparse.Namespace, *, followers: int) -> dict[str, Any]:
    total = int(args.rate * args.seconds)
    run = f"bench-{followers}-{time.time_ns()}"
    lags: list[list[float]] = [[] for _ in range(followers)]
    ready = threading.Barrier(followers + 1)

    def follow(n: int, base: str, after: int) -> None:
        with httpx.stream(
            "GET", f"{base}/api/events", params={"run": run, "after": str(after)}, timeout=120
        ) as answer:
            ready.wait()
            kind = ""
            for line in answer.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind == "result":
                    sent = float(json.loads(line[6:])["result"]["name"])
                    lags[n].append((time.time() - sent) * 1000)
                    if len(lags[n]) == total:
                        return

    with server(url) as (base, pid), httpx.Client(base_url=base, timeout=60) as client:
        after = client.get("/api/live").json()["last_event"]
        threads = [threading.Thread(target=follow, args=(n, base, after)) for n in range(followers)]
        for thread in threads:
            thread.start()
        if followers:
            ready.wait()
        begun = {"kind": "begun", "total": total, "started_at": "2025-01-01T00:00:00Z"}
        client.post("/api/live/events", json={"run": run, "events": [begun]}, headers=CHANGE)
        cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
        batch = max(1, int(args.rate * 0.05))  # what run --serve posts: a batch per ~50 ms
        sent = 0
        while sent < total:
            due = wall0 + sent / args.rate
            time.sleep(max(0.0, due - time.perf_counter()))
            now = repr(time.time())
            events = [
                {"kind": "finished", "result": {"id": f"t::{sent + i}", "name": now,
                                                "status": "passed"}}
                for i in range(min(batch, total - sent))
            ]  # fmt: skip
            client.post("/api/live/events", json={"run": run, "events": events}, headers=CHANGE)
            sent += len(events)
        for thread in threads:
            thread.join(60)
        wall = time.perf_counter() - wall0
        cores = (cpu_seconds(pid) - cpu0) / wall
    every = [lag for got in lags for lag in got]
    return {
        "received": len(every),
        "complete": all(len(got) == total for got in lags),
        "lag50": statistics.median(every) if every else 0.0,
        "lag95": percentile(every, 0.95) if every else 0.0,
        "cores": cores,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", choices=PARTS, help="default: both")
    parser.add_argument("--runs", type=int, default=20, help="runs in the history (page)")
    parser.add_argument("--tests", type=int, default=2000, help="tests per run (page)")
    parser.add_argument("--repeat", type=int, default=200, help="timed requests (page)")
    parser.add_argument("--followers", type=int, default=10, help="SSE followers (live)")
    parser.add_argument("--rate", type=float, default=1000.0, help="results a second (live)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long (live)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name, least in (("runs", 1), ("tests", 1), ("repeat", 1), ("followers", 0)):
        if getattr(args, name) < least:
            parser.error(f"--{name} must be at least {least}")
    if args.rate <= 0 or args.seconds <= 0:
        parser.error("--rate and --seconds must be above 0")
    try:
        for part in args.part or PARTS:
            for line in (page if part == "page" else live)(args):
                print(line, flush=True)
    except (AssertionError, RuntimeError, httpx.HTTPError) as err:
        print(f"failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
