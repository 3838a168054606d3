"""The history's cost and speed: recording beside a run, the queries over a big history, and
the bytes a result takes.

1. **Recording** — a 2,000-test run as a whole command (the local ledger on: the defaults)
   against a REST agent on 127.0.0.1 answering in 20 ms at ``-j 8``, with the history (a
   SQLite file that grows by a run each round) and with ``--no-history``, rounds interleaved
   after a warm-up; medians and the ratio with / without. Target: <= 1.03. Beside it the
   worst case, the same tests against an instant in-process agent at ``-j 1``: nothing to
   wait for, so opening the history (SQLAlchemy's import) and writing the run ahead, which
   a real run does while it waits on its agent, are the run's own time.
2. **Queries** — a history of ``--runs`` runs x ``--tests`` tests (default 1,000 x 2,000: 2 M
   results; two agents, a test in twenty flipping at random, an image change every hundred
   runs), filled through ``History.record`` as runs are, then each query timed in this process
   (median of ``--repeat`` calls, each in its own transaction), on SQLite and on a PostgreSQL
   server the benchmark starts itself (``tests/support/postgres_support.py``; skipped without root
   or the server): ``history`` (the newest 20 runs, with their trends) <= 100 ms, ``history
   TEST`` (one test over its newest 50 runs, its break) <= 100 ms, ``flaky`` over the newest
   50 runs <= 1 s. Beside each, the ratio to a bare ``SELECT 1`` through the same engine (the
   floor of any query here).
3. **Size** — the SQLite file's bytes (its WAL folded in) per stored result. Target: <= 250.
4. **The page** — ``history --html`` over ``--page-runs`` runs x ``--tests`` tests (default 100 x
   2,000: 200,000 cells) in a SQLite history of its own: the seconds writing it takes and its
   size, then the time from navigation start until it is interactive (every plot, the grid
   and the lists drawn: the page's own ``agent-health-ready`` mark) in Debian's headless
   Chromium from ``file://``, the median of ``--rounds`` loads, against a bare page carrying
   the same JSON that only parses it, loaded the same way (the ratio is what drawing costs on
   top of reading the data). Target: interactive <= 2 s. Beside it: filtering the grid
   (typing until the count shows the match, with its 120 ms typing pause) and one grid
   redraw after scrolling to its last row.

The script reports, it never gates: exit 0 whatever the figures, 1 when a side failed its
work, 2 for bad options. ``tests/ship/test_bench_smoke.py`` runs it at tiny sizes.

    python bench/history.py                           # all four (fills 2 M results twice)
    python bench/history.py --part queries --runs 200 --backend sqlite
    python bench/history.py --part page               # the history page alone
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import engine_overhead
import slow_agent
import suites

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "scripts"))

PARTS = ("recording", "queries", "size", "page")
PAGE_TARGET_S = 2.0
BARE_PAGE = """<!doctype html><meta charset="utf-8"><title>bare</title><body>
<script id="history-data" type="application/json">{data}</script>
<script>JSON.parse(document.getElementById("history-data").textContent);
document.body.dataset.ready = "1"; performance.mark("agent-health-ready");</script>"""
BACKENDS = ("sqlite", "postgresql")


def agent_health() -> list[str]:
    script = Path(sys.executable).parent / "agent-health"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent_health.cli"]


def _verdict(value: float, target: float) -> str:
    return f"target <= {target:g}: {'PASS' if value <= target else 'MISS'}"


# -- 1. recording -----------------------------------------------------------------------------


def recording(work: Path, args: argparse.Namespace) -> list[str]:
    lines = []
    with slow_agent.serving(args.latency) as url:
        rest = suites.write_ours(work / "recording-rest", args.n, 100, config=False)
        lines += _recording_row(
            f"1. recording a {args.n:,}-test run against a REST agent answering in "
            f"{args.latency * 1000:g} ms, -j {args.j}",
            rest,
            ["-j", str(args.j), "--agent", f"rest+{url}"],
            work / "rest.db",
            args,
        )
    inproc = suites.write_ours(work / "recording-inproc", args.n, 100)
    lines += _recording_row(
        f"   the worst case: the same {args.n:,} tests against an instant in-process agent, "
        "-j 1 (every millisecond of the history is the run's own)",
        inproc,
        ["-j", "1"],
        work / "inproc.db",
        args,
    )
    return lines


def _recording_row(
    title: str, suite: Path, flags: list[str], db: Path, args: argparse.Namespace
) -> list[str]:
    """The run with the history (a file that grows by a run each round) and without, rounds
    interleaved after a warm-up; medians of wall and CPU time, the ratios."""
    cmd = [*agent_health(), "run", ".", *flags]
    sides = {
        "with the history (default)": [*cmd, "--history", f"sqlite:///{db}"],
        "--no-history": [*cmd, "--no-history"],
    }
    walls: dict[str, list[float]] = {label: [] for label in sides}
    cpus: dict[str, list[float]] = {label: [] for label in sides}
    for round_ in range(args.warmup + args.rounds):
        for label, argv in sides.items():
            sample = engine_overhead.measure(argv, suite)
            if sample.code != 0 or f"{args.n} passed" not in sample.output:
                tail = "\n".join(sample.output.strip().splitlines()[-10:])
                raise engine_overhead.BenchError(f"{label} exited {sample.code}:\n{tail}")
            if ("history: run" in sample.output) != (label != "--no-history"):
                tail = "\n".join(sample.output.strip().splitlines()[-3:])
                raise engine_overhead.BenchError(f"{label}: the history line is wrong:\n{tail}")
            if round_ >= args.warmup:
                walls[label].append(sample.wall_s)
                cpus[label].append(sample.cpu_s)
    with_, without = (statistics.median(walls[label]) for label in sides)
    cpu_with, cpu_without = (statistics.median(cpus[label]) for label in sides)
    lines = [f"{title} (medians of {args.rounds} rounds)"]
    for label in sides:
        lines.append(
            f"   {label:<28} wall {statistics.median(walls[label]):6.3f} s   "
            f"cpu {statistics.median(cpus[label]):6.3f} s"
        )
    ratio = with_ / without
    lines.append(f"   ratio wall (with / without)     {ratio:6.3f}   {_verdict(ratio, 1.03)}")
    lines.append(f"   ratio cpu  (with / without)     {cpu_with / cpu_without:6.3f}")
    wall, cpu = _verifying(suite)
    lines.append(
        f"   verifying the run's ledger again as it ends (what `ledger verify` does): wall "
        f"{wall:.3f} s, cpu {cpu:.3f} s: {cpu / cpu_with:.2f} of the run's cpu (the run's "
        "own seal is what the history records instead)"
    )
    return lines


def _verifying(suite: Path) -> tuple[float, float]:
    """Wall and CPU seconds of verifying the newest ledger the suite's runs wrote, in this
    process (every cell's chain and the run file's seal, as ``ledger verify`` does)."""
    import asyncio

    from agent_health import ledger

    folder = suite / ".agent-health" / "ledger"
    newest = max((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    key, _ = ledger.find_key(str(newest))
    cpu, wall = time.process_time(), time.perf_counter()
    checked = asyncio.run(ledger.verify_url(str(newest), key))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if not checked.ok:
        raise engine_overhead.BenchError(f"the run's ledger {newest} did not verify")
    return wall, cpu


# -- 2. and 3. a big history ------------------------------------------------------------------


def _reports(runs: int, tests: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``runs`` reports of ``tests`` tests: two agents taking turns, a test in twenty flipping
    at random, the agent's image changing every hundred runs."""
    rng = random.Random(seed)
    ids = [f"test_bench_{i // 100:03d}.py::ping {i:05d}" for i in range(tests)]
    wobbly = set(rng.sample(range(tests), max(1, tests // 20)))
    for r in range(runs):
        agent = ("alpha", "beta")[r % 2]
        entries = []
        for i, test_id in enumerate(ids):
            status = "failed" if i in wobbly and rng.random() < 0.4 else "passed"
            entries.append(
                {
                    "id": test_id,
                    "name": test_id.split("::")[1],
                    "file": test_id.split("::")[0],
                    "line": 10 + i % 100,
                    "labels": ["kind:bench"],
                    "repeat": 0,
                    "status": status,
                    "score": 1.0 if status == "passed" else 0.0,
                    "error": None,
                    "cause": None,
                    "duration_ms": 5.0 + rng.random() * 50,
                    "content_hash": f"{i:016x}",
                    "metrics": {"total_tokens": 120, "cost_usd": 0.00012},
                    "signals": []
                    if status == "passed"
                    else [
                        {"kind": "deterministic", "role": "gate", "name": "to_equal",
                         "passed": False, "evidence": {"expected": "pong", "actual": "pang"}}
                    ],
                }
            )  # fmt: skip
        passed = sum(e["status"] == "passed" for e in entries)
        yield {
            "version": 2,
            "summary": {
                "total": tests,
                "passed": passed,
                "failed": tests - passed,
                "errored": 0,
                "skipped": 0,
                "pass_rate": passed / tests,
                "score": passed / tests,
                "duration_ms": 60_000.0,
                "tokens": 120 * tests,
                "cost_usd": 0.00012 * tests,
                "repeats": 1,
            },
            "provenance": {
                "run_id": f"bench-{r:05d}",
                "agent": {"name": agent, "connector": "rest", "image": f"sha256:{r // 100:064x}"},
                "suite": {"git_commit": f"{r // 10:040x}", "name": "bench"},
                "started_at": _started(r),
                "ended_at": None,
            },
            "tests": entries,
        }


def _started(r: int) -> str:
    day, minute = divmod(r * 30, 24 * 60)
    return (
        f"2025-{1 + day // 28:02d}-{1 + day % 28:02d}T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
    )


def fill(opened: Any, runs: int, tests: int) -> float:
    """Record the reports; the seconds it took."""
    started = time.perf_counter()
    for r, data in enumerate(_reports(runs, tests)):
        opened.record(data)
        if r and r % 100 == 0:
            rate = r / (time.perf_counter() - started)
            print(f"   … {r} runs recorded ({rate:.1f} runs/s)", file=sys.stderr, flush=True)
    return time.perf_counter() - started


def _timed(call: Callable[[], Any], repeat: int) -> float:
    call()  # warm: the statements compiled, the pages cached
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def queries(opened: Any, args: argparse.Namespace) -> list[str]:
    import sqlalchemy as sa

    def bare() -> None:
        with opened.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1")).scalar()

    floor = _timed(bare, args.repeat)
    test_id = "test_bench_000.py::ping 00000"
    flaky_one = opened.flaky(runs=50, limit=1)
    wobbly = flaky_one[0].id if flaky_one else test_id
    rows = [
        ("history (newest 20 runs)", lambda: opened.runs(limit=20), 0.1),
        ("history TEST (a steady test, 50 runs)", lambda: opened.timeline(test_id, limit=50), 0.1),
        ("history TEST (a flaky test, 50 runs)", lambda: opened.timeline(wobbly, limit=50), 0.1),
        ("flaky (over the newest 50 runs)", lambda: opened.flaky(runs=50), 1.0),
    ]
    lines = [f"   bare SELECT 1 (the floor)              {floor * 1000:8.2f} ms"]
    for label, call, target in rows:
        took = _timed(call, args.repeat)
        lines.append(
            f"   {label:<38} {took * 1000:8.2f} ms  (x{took / floor:,.0f} the floor)  "
            f"target <= {target * 1000:g} ms: {'PASS' if took <= target else 'MISS'}"
        )
    return lines


@contextlib.contextmanager
def _backend(name: str, work: Path) -> Iterator[str | None]:
    """The URL of an empty history on ``name`` (None: cannot be had here, with why printed)."""
    if name == "sqlite":
        yield f"sqlite:///{work / 'big.db'}"
        return
    from support import postgres_support

    why = postgres_support.unavailable()
    if why is not None:
        print(f"   PostgreSQL skipped: {why}")
        yield None
        return
    with postgres_support.running() as server:
        os.environ["PGPASSWORD"] = postgres_support.PASSWORD
        yield server.url(server.new_database())


def big(work: Path, args: argparse.Namespace, parts: list[str]) -> list[str]:
    from agent_health import history
    from agent_health.history import database

    lines = []
    for name in args.backend:
        if "queries" not in parts and name != "sqlite":
            continue
        with _backend(name, work) as url:
            if url is None:
                continue
            with history.open_history(url) as opened:
                took = fill(opened, args.runs, args.tests)
                runs, results = opened.count()
                lines.append(
                    f"2. {name}: {runs:,} runs x {args.tests:,} tests = {results:,} results "
                    f"(filled in {took:.0f} s, {results / took:,.0f} results/s)"
                )
                if "queries" in parts:
                    lines += queries(opened, args)
                if name == "sqlite" and "size" in parts:
                    database.checkpoint(opened)
                    size = database.size_bytes(opened.location) or 0
                    per = size / results
                    lines.append(
                        f"3. size: {size / 2**20:,.1f} MiB for {results:,} results = "
                        f"{per:.1f} bytes per result   {_verdict(per, 250)}"
                    )
    return lines


# -- 4. the page ------------------------------------------------------------------------------


def page(work: Path, args: argparse.Namespace) -> list[str]:
    import re

    import browser
    from agent_health import history

    with history.open_history(f"sqlite:///{work / 'page.db'}") as opened:
        fill(opened, args.page_runs, args.tests)
        started = time.perf_counter()
        written = history.write_page(work / "page", opened, runs=args.page_runs)
        write_s = time.perf_counter() - started
    text = written.path.read_text(encoding="utf-8")
    found = re.search(r'<script id="history-data" type="application/json">(.*?)</script>', text)
    if found is None:
        raise engine_overhead.BenchError("the page carries no data element")
    bare = work / "bare.html"
    bare.write_text(BARE_PAGE.format(data=found.group(1)), encoding="utf-8")
    url = written.path.as_uri()
    page_ms: list[float] = []
    bare_ms: list[float] = []
    try:
        with browser.chromium() as chromium:
            for _ in range(args.rounds):  # interleaved: other load on the machine hits both
                bare_ms.append(_load(chromium, bare.as_uri()))
                page_ms.append(_load(chromium, url))
            filter_s, redraw_ms = _use(chromium, url)
    except browser.BrowserMissing as err:
        return [f"4. page: skipped: {err}"]
    load_s = statistics.median(page_ms) / 1000
    base_s = statistics.median(bare_ms) / 1000
    mib = written.path.stat().st_size / 2**20
    return [
        f"4. page: {written.runs} runs x {written.tests:,} tests = "
        f"{written.runs * written.tests:,} cells; written in {write_s:.2f} s, {mib:.2f} MiB",
        f"   bare page parsing the same JSON        {base_s:6.2f} s",
        f"   history page, interactive              {load_s:6.2f} s  "
        f"(x{load_s / base_s:.2f} the bare page)  target <= {PAGE_TARGET_S:g} s: "
        f"{'PASS' if load_s <= PAGE_TARGET_S else 'MISS'}",
        f"   filter the grid to one test            {filter_s:6.2f} s",
        f"   redraw the grid at its last row        {redraw_ms:6.1f} ms",
    ]


def _load(chromium: Any, url: str) -> float:
    """Open ``url`` in a fresh page; the ms from navigation start to its ready mark."""
    import browser

    with browser.watched_page(chromium) as seen:
        seen.page.goto(url)
        seen.page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        if seen.outside(url) or seen.errors:
            raise engine_overhead.BenchError(f"{url} misbehaved: {seen.outside(url)} {seen.errors}")
        mark: float = seen.page.evaluate(
            "performance.getEntriesByName('agent-health-ready')[0].startTime"
        )
        return mark


def _use(chromium: Any, url: str) -> tuple[float, float]:
    """Seconds to filter the grid to one test; ms of one redraw after a scroll to its end."""
    import browser

    with browser.watched_page(chromium) as seen:
        page = seen.page
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        started = time.perf_counter()
        page.fill("#grid-search", "ping 00007")
        page.wait_for_selector("#grid-count >> text=/^1 of /", timeout=60_000)
        filter_s = time.perf_counter() - started
        page.fill("#grid-search", "")
        page.wait_for_selector("#grid-count >> text=/^[0-9,]+ of [0-9,]+ tests$/")
        redraw: float = page.evaluate(
            """() => new Promise((done) => {
                const scroller = document.getElementById("grid-scroll");
                const started = performance.now();
                scroller.scrollTop = scroller.scrollHeight;
                requestAnimationFrame(() => requestAnimationFrame(
                    () => done(performance.now() - started)));
            })"""
        )
        if seen.outside(url) or seen.errors:
            raise engine_overhead.BenchError(f"{url} misbehaved: {seen.outside(url)} {seen.errors}")
    return filter_s, redraw


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", choices=PARTS, help="run only these parts")
    parser.add_argument("--n", type=int, default=2000, help="tests of the recorded run (1.)")
    parser.add_argument(
        "--latency", type=float, default=0.02, help="the REST agent's answer time, seconds (1.)"
    )
    parser.add_argument("-j", type=int, default=8, help="tests at once against it (1.)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1000, help="runs in the big history (2.)")
    parser.add_argument("--tests", type=int, default=2000, help="tests per run (2. and 4.)")
    parser.add_argument("--page-runs", type=int, default=100, help="runs the page draws (4.)")
    parser.add_argument("--repeat", type=int, default=15, help="calls per query timed")
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, help="default: sqlite and postgresql"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("n", "rounds", "runs", "tests", "repeat", "page_runs"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    parts = args.part or list(PARTS)
    args.backend = args.backend or list(BACKENDS)
    load = os.getloadavg()[0]
    print(f"history benchmark (load average {load:.1f}, {os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory(prefix="agent-health-bench-") as tmp:
        work = Path(tmp)
        try:
            if "recording" in parts:
                for line in recording(work, args):
                    print(line, flush=True)
            if "queries" in parts or "size" in parts:
                for line in big(work, args, parts):
                    print(line, flush=True)
            if "page" in parts:
                for line in page(work, args):
                    print(line, flush=True)
        except engine_overhead.BenchError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
