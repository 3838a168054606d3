"""The default path at the speed of a bare client: agent-health as users run it, next to no harness.

Every row runs agent-health with its defaults (the local ledger on, the built-in connectors)
and a baseline that does the same work without a harness, each as a whole command in a fresh
subprocess, rounds interleaved, and prints ours / baseline beside the target. Two rows
measure the harness with the history off (``--no-history``): ``run`` of one test and the
calls row. The history's cost has a row of its own (the last), and those two rows print the
run with the history on beside, and what it added, so no figure hides it: a fixed
0.1–0.2 s a run here, most of it SQLAlchemy's import, which the history's choice of library
brings and no placement in the run takes away:

==================================================  ====================================  ======
ours (defaults)                                     baseline in the same run              target
==================================================  ====================================  ======
2,000 trivial tests (instant in-process agent) -j1  pytest + pytest-asyncio, same tests   <= 0.5
400 tests, a POST each to a 50 ms agent, -j32 (*)  a bare aiohttp script (the floor)     <= 1.15
``agent-health list`` of one test                   python -c "import pydantic, httpx"    <= 1.2
``agent-health run`` of one trivial test (*)        python -c "import pydantic, httpx"    <= 1.5
a hanging agent, ``--timeout 2``                    the same run with ``--no-ledger``     <= 1.2
2,000 tests, one POST each to a 20 ms agent, -j 8   the same run with ``--no-history``    <= 1.03
==================================================  ====================================  ======

(*) with ``--no-history``; the defaults beside, marked ``[the history on]``.

Each command runs with bytecode caching allowed, as users run it: ``PYTHONDONTWRITEBYTECODE``
is taken out of its environment and the unmeasured warm-up round writes the caches.

The verdict is on wall time (what a user waits for). The CPU time of each command (user +
system, from ``wait4``) is printed too: on a machine shared with other work it moves much
less than wall time, so it tells a real change from a noisy round. ``--no-ledger`` and
``--no-history`` runs are printed as diagnostics where they explain a figure.

The calls row's baseline is the *floor*: the same calls from a bare script on aiohttp (the
built-in connectors' client) with no harness, its import included; a plain 32-thread
``http.client`` script is printed beside it for reference, and so is the floor's script
importing pydantic and rich first (``plain_client.py --imports``), with its ratio to the
floor: what the two libraries agent-health is built on cost before any code of its own. The
row also prints the CPU the harness adds per test, two ways: ``(ours - floor) / N``
(start-up included), and with each side's start-up taken out — ``((ours - ours of one test)
- (floor - floor of one call)) / (N - 1)`` — the harness's own cost per test, whose target
is <= 0.5 ms (start-up has rows of its own: ``list`` and ``run`` of one test).

The script reports, it never gates: exit 0 whatever the figures, 1 when a side crashed or
did not pass its work, 2 for bad options.

To measure another tree's package with this script — the code before a change, say — give
``--package-root`` the directory that holds its ``agent_health/`` (a checkout's
``operator/``): every side, baselines included, then runs with that directory first on
``PYTHONPATH``, and the script refuses a directory ``agent_health`` does not import from.
The installed dependencies stay this environment's.

    python bench/defaults.py                      # every row (about four minutes here)
    python bench/defaults.py --row list --rounds 20
    git worktree add /tmp/before 8649b96
    python bench/defaults.py --package-root /tmp/before/operator
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import engine_overhead
import slow_agent
import suites

HERE = Path(__file__).resolve().parent
ROWS = ("trivial", "calls", "list", "run", "hang", "history")
ROLE_MARKS = {
    "baseline": " [baseline]",
    "diagnostic": " [diagnostic]",
    "reference": " [reference]",
    "imports": " [reference]",
    "one": " [start-up]",
    "floor-one": " [start-up]",
    "history": " [the history on]",
}
CPU_PER_TEST_TARGET_MS = 0.5
"""The harness's own CPU per test in the calls row, start-up taken out (issue #40)."""
INPROC_CONFIG = suites.INPROC_CONFIG
ONE_TEST = """\
from agent_health import test


@test("one", labels=["kind:smoke"], default_prompt="ping")
async def one(agent, expect):
    result = await agent.run()
    expect(result.output).to_equal("pong")
"""


@dataclass(frozen=True)
class Side:
    """One command of a row, and how to tell it did its work."""

    label: str
    argv: list[str]
    cwd: Path
    expect: Callable[[engine_overhead.Sample], str | None]  # None when the work was done
    role: str = "ours"  # "ours" (the figure), "baseline", or one of ROLE_MARKS' others


@dataclass
class Measured:
    label: str
    role: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu_s(self) -> float:
        return statistics.median(self.cpus)


@dataclass(frozen=True)
class RowResult:
    name: str
    title: str
    target: float
    sides: list[Measured]

    n: int = 0  # tests of the row's "ours" side, where CPU per test is worked out

    def side(self, role: str) -> Measured:
        return next(s for s in self.sides if s.role == role)

    def has(self, role: str) -> bool:
        return any(s.role == role for s in self.sides)

    @property
    def cpu_per_test_ms(self) -> float | None:
        """CPU ours adds per test over the baseline, start-up included: (ours - base) / N."""
        if not self.n:
            return None
        return (self.side("ours").cpu_s - self.side("baseline").cpu_s) / self.n * 1000

    @property
    def own_cpu_per_test_ms(self) -> float | None:
        """The same with each side's start-up taken out (its one-test run): the harness's
        own CPU per test."""
        if not self.n or self.n < 2 or not (self.has("one") and self.has("floor-one")):
            return None
        ours = self.side("ours").cpu_s - self.side("one").cpu_s
        floor = self.side("baseline").cpu_s - self.side("floor-one").cpu_s
        return (ours - floor) / (self.n - 1) * 1000

    @property
    def history_cost_s(self) -> tuple[float, float] | None:
        """What the history added to the run (wall s, CPU s), where the row measures ours
        with it off and runs the defaults beside."""
        if not self.has("history"):
            return None
        on, off = self.side("history"), self.side("ours")
        return on.wall_s - off.wall_s, on.cpu_s - off.cpu_s

    @property
    def ratio(self) -> float:
        return self.side("ours").wall_s / self.side("baseline").wall_s

    @property
    def cpu_ratio(self) -> float:
        return self.side("ours").cpu_s / max(self.side("baseline").cpu_s, 1e-9)


def passed(
    n: int, word: str = "passed", code: int = 0
) -> Callable[[engine_overhead.Sample], str | None]:
    pattern = re.compile(rf"(\d+) {word}")

    def check(sample: engine_overhead.Sample) -> str | None:
        found = pattern.search(sample.output)
        if sample.code == code and found is not None and int(found.group(1)) == n:
            return None
        return f"expected exit {code} and {n} {word}"

    return check


def exits_0(sample: engine_overhead.Sample) -> str | None:
    return None if sample.code == 0 else "expected exit 0"


def agent_health() -> list[str]:
    """The installed ``agent-health`` command, as users run it (else ``python -m``)."""
    script = Path(sys.executable).parent / "agent-health"
    return [str(script)] if script.exists() else [sys.executable, "-m", "agent_health.cli"]


def run_row(
    name: str,
    title: str,
    target: float,
    sides: list[Side],
    args: argparse.Namespace,
    n: int = 0,
) -> RowResult:
    """Interleaved rounds (A, B, C, A, B, C, ...) after warm-up; medians per side."""
    rounds = args.list_rounds if name in ("list", "run") else args.rounds
    for _ in range(args.warmup):
        for side in sides:
            _checked(side)
    measured = {side.label: Measured(side.label, side.role) for side in sides}
    for _ in range(rounds):
        for side in sides:
            sample = _checked(side)
            measured[side.label].walls.append(sample.wall_s)
            measured[side.label].cpus.append(sample.cpu_s)
    return RowResult(name, title, target, list(measured.values()), n)


def _checked(side: Side) -> engine_overhead.Sample:
    sample = engine_overhead.measure(side.argv, side.cwd)
    problem = side.expect(sample)
    if problem is not None:
        tail = "\n".join(sample.output.strip().splitlines()[-15:])
        raise engine_overhead.BenchError(f"{side.label} exited {sample.code}: {problem}:\n{tail}")
    return sample


def trivial(work: Path, args: argparse.Namespace) -> RowResult:
    ours = suites.write_ours(work / "trivial-ours", args.n, 100)
    theirs = suites.write_pytest(work / "trivial-pytest", args.n, 100)
    cmd = [*agent_health(), "run", ".", "-j", "1"]
    return run_row(
        "trivial",
        f"{args.n} trivial tests (instant in-process agent), -j 1",
        0.5,
        [
            Side(
                "pytest + pytest-asyncio",
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "."],
                theirs,
                passed(args.n),
                "baseline",
            ),
            Side("agent-health (defaults)", cmd, ours, passed(args.n)),
            Side(
                "agent-health --no-ledger",
                [*cmd, "--no-ledger"],
                ours,
                passed(args.n),
                "diagnostic",
            ),
        ],
        args,
    )


def calls(work: Path, args: argparse.Namespace, url: str) -> RowResult:
    suite = suites.write_ours(work / "calls", args.calls, 100, config=False)
    one = suites.write_ours(work / "calls-one", 1, 100, config=False)
    cmd = [*agent_health(), "run", ".", "-j", str(args.calls_j), "--agent", f"rest+{url}"]
    harness = [*cmd, "--no-history"]
    plain = [sys.executable, str(HERE / "plain_client.py"), url, str(args.calls), str(args.calls_j)]
    bare = [*plain, "--aiohttp"]
    return run_row(
        "calls",
        f"{args.calls} tests, one POST each to a {args.calls_latency * 1000:.0f} ms agent, "
        f"-j {args.calls_j}",
        1.15,
        [
            Side("bare aiohttp script, no harness", bare, suite, passed(args.calls), "baseline"),
            Side("agent-health --no-history", harness, suite, passed(args.calls)),
            Side(
                "agent-health --no-history --no-ledger",
                [*harness, "--no-ledger"],
                suite,
                passed(args.calls),
                "diagnostic",
            ),
            Side("agent-health (defaults)", cmd, suite, recorded(args.calls), "history"),
            Side(
                f"plain {args.calls_j}-thread client",
                plain,
                suite,
                passed(args.calls),
                "reference",
            ),
            Side(
                "bare aiohttp script importing pydantic and rich",
                [*bare, "--imports"],
                suite,
                passed(args.calls),
                "imports",
            ),
            Side("agent-health --no-history, one test", harness, one, passed(1), "one"),
            Side(
                "bare aiohttp script, one call",
                [sys.executable, str(HERE / "plain_client.py"), url, "1", "1", "--aiohttp"],
                one,
                passed(1),
                "floor-one",
            ),
        ],
        args,
        n=args.calls,
    )


def listing(work: Path, args: argparse.Namespace) -> RowResult:
    suite = work / "list"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_one.py").write_text(ONE_TEST)
    return run_row(
        "list",
        "`agent-health list` of one test",
        1.2,
        [
            Side(
                'python -c "import pydantic, httpx"',
                [sys.executable, "-c", "import pydantic, httpx"],
                suite,
                exits_0,
                "baseline",
            ),
            Side("agent-health list", [*agent_health(), "list", "."], suite, passed(1, "tests in")),
        ],
        args,
    )


def run_one(work: Path, args: argparse.Namespace) -> RowResult:
    suite = work / "run-one"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_one.py").write_text(ONE_TEST)
    (suite / "agent-health.config.py").write_text(INPROC_CONFIG)
    cmd = [*agent_health(), "run", "."]
    return run_row(
        "run",
        "`agent-health run` of one trivial test (instant in-process agent)",
        1.5,
        [
            Side(
                'python -c "import pydantic, httpx"',
                [sys.executable, "-c", "import pydantic, httpx"],
                suite,
                exits_0,
                "baseline",
            ),
            Side("agent-health run --no-history", [*cmd, "--no-history"], suite, passed(1)),
            Side("agent-health run (defaults)", cmd, suite, recorded(1), "history"),
        ],
        args,
    )


def hang(work: Path, args: argparse.Namespace, url: str) -> RowResult:
    suite = work / "hang"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_one.py").write_text(ONE_TEST)
    cmd = [*agent_health(), "run", ".", "--timeout", str(args.timeout), "--agent", f"rest+{url}"]
    errored = passed(1, "errored", code=3)
    return run_row(
        "hang",
        f"a hanging agent, --timeout {args.timeout:g}",
        1.2,
        [
            Side("agent-health --no-ledger", [*cmd, "--no-ledger"], suite, errored, "baseline"),
            Side("agent-health (defaults)", cmd, suite, errored),
        ],
        args,
    )


def history(work: Path, args: argparse.Namespace, url: str) -> RowResult:
    suite = suites.write_ours(work / "history", args.history_n, 100, config=False)
    cmd = [*agent_health(), "run", ".", "-j", str(args.history_j), "--agent", f"rest+{url}"]
    return run_row(
        "history",
        f"{args.history_n} tests, one POST each to a {args.history_latency * 1000:.0f} ms agent, "
        f"-j {args.history_j}: recording the history",
        1.03,
        [
            Side("agent-health --no-history", [*cmd, "--no-history"], suite, passed(args.history_n),
                 "baseline"),
            Side("agent-health (defaults: the history recorded)", cmd, suite,
                 recorded(args.history_n)),
        ],
        args,
    )  # fmt: skip


def recorded(n: int) -> Callable[[engine_overhead.Sample], str | None]:
    """``n`` passed and the run said where the history recorded it."""
    tests = passed(n)

    def check(sample: engine_overhead.Sample) -> str | None:
        wrong = tests(sample)
        if wrong is None and "history: run" not in sample.output:
            return "expected the history line (history: run ... recorded in ...)"
        return wrong

    return check


@contextmanager
def _agents(rows: list[str], args: argparse.Namespace) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        urls = {}
        if "calls" in rows:
            urls["calls"] = stack.enter_context(slow_agent.serving(args.calls_latency))
        if "hang" in rows:
            urls["hang"] = stack.enter_context(slow_agent.serving(None))
        if "history" in rows:
            urls["history"] = stack.enter_context(slow_agent.serving(args.history_latency))
        yield urls


def use_package_root(root: Path) -> str | None:
    """Put ``root`` first on ``PYTHONPATH`` for every side; a problem, or None when
    ``agent_health`` then imports from ``root``.

    Checked in a subprocess as the sides run, so a root the import system passes over (no
    ``agent_health/`` there, a typo) is refused instead of measuring this tree's package under
    another name.
    """
    if not (root / "agent_health" / "__init__.py").is_file():
        return (
            f"--package-root {root}: no agent_health/__init__.py there; give the directory "
            "that holds the package (a checkout's operator/)"
        )
    paths = [str(root.resolve()), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    probe = subprocess.run(
        [sys.executable, "-c", "import agent_health; print(agent_health.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    found = Path(probe.stdout.strip() or "?").resolve()
    if probe.returncode != 0 or not found.is_relative_to(root.resolve()):
        why = probe.stderr.strip().splitlines()[-1:] or [f"it imports from {found}"]
        return f"--package-root {root}: agent_health does not import from there ({why[0]})"
    return None


def render(results: list[RowResult], args: argparse.Namespace) -> str:
    where = f"; agent_health from {args.package_root}" if args.package_root else ""
    lines = [
        f"agent-health defaults vs no harness{where} — Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
        f"medians of {args.rounds} rounds ({args.list_rounds} for list and run) after "
        f"{args.warmup} "
        "warm-up; each side a whole command in a fresh subprocess",
    ]
    for n, row in enumerate(results, 1):
        lines += [
            "",
            f"{n}. {row.title}",
            f"   {'side':<46}{'wall s':>9}{'CPU s':>9}   rounds (wall s)",
        ]
        for side in row.sides:
            role = ROLE_MARKS.get(side.role, "")
            rounds = ", ".join(f"{w:.2f}" for w in side.walls)
            lines.append(
                f"   {side.label + role:<46}{side.wall_s:>9.3f}{side.cpu_s:>9.3f}   {rounds}"
            )
        mark = "PASS" if round(row.ratio, 2) <= row.target else "MISS"
        lines.append(
            f"   ratio ours / baseline: wall {row.ratio:.2f} (CPU {row.cpu_ratio:.2f})"
            f"   target <= {row.target:.2f}   {mark}"
        )
        if row.has("imports"):
            alone = row.side("imports").wall_s / row.side("baseline").wall_s
            lines.append(
                f"   the floor importing pydantic and rich, no harness code: wall {alone:.2f} "
                "x the floor (where a harness on those two libraries starts)"
            )
        lines += _per_test(row)
        added = row.history_cost_s
        if added is not None:
            lines.append(
                f"   the history on added {added[0]:+.3f} s wall ({added[1]:+.3f} s CPU) "
                "to this run; its cost at scale is the history row"
            )
    lines += ["", "summary", f"   {'figure':<70}{'ratio':>7}   target"]
    for row in results:
        mark = "PASS" if round(row.ratio, 2) <= row.target else "MISS"
        lines.append(f"   {row.title:<70}{row.ratio:>7.2f}   <= {row.target:.2f} {mark}")
        own = row.own_cpu_per_test_ms
        if own is not None:
            mark = "PASS" if round(own, 2) <= CPU_PER_TEST_TARGET_MS else "MISS"
            title = "   the harness's own CPU per test (start-up taken out), ms"
            lines.append(f"{title:<73}{own:>7.2f}   <= {CPU_PER_TEST_TARGET_MS:.2f} {mark}")
    return "\n".join(lines)


def _per_test(row: RowResult) -> list[str]:
    """The CPU ours adds per test over the baseline (the calls row): start-up included, and
    each side's start-up (its run of one test) taken out."""
    every, own = row.cpu_per_test_ms, row.own_cpu_per_test_ms
    if every is None:
        return []
    lines = [f"   CPU added per test, start-up included ((ours - baseline) / N): {every:.3f} ms"]
    if own is not None:
        mark = "PASS" if round(own, 2) <= CPU_PER_TEST_TARGET_MS else "MISS"
        lines.append(
            f"   the harness's own CPU per test (each side's start-up taken out): {own:.3f} ms"
            f"   target <= {CPU_PER_TEST_TARGET_MS:.2f}   {mark}"
        )
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", action="append", choices=ROWS, help="run only this row (repeatable)")
    p.add_argument("--rounds", type=int, default=3, help="measured runs per side (median)")
    p.add_argument(
        "--list-rounds",
        type=int,
        default=15,
        help="measured runs per side of the start-up rows (list, run)",
    )
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs per side first")
    p.add_argument("--n", type=int, default=2000, help="trivial tests (default 2000)")
    p.add_argument("--calls", type=int, default=400, help="agent calls (default 400)")
    p.add_argument("--calls-j", type=int, default=32, help="concurrency of the calls row")
    p.add_argument("--calls-latency", type=float, default=0.05, help="agent latency (s)")
    p.add_argument("--timeout", type=float, default=2.0, help="--timeout of the hang row")
    p.add_argument("--history-n", type=int, default=2000, help="tests of the history row")
    p.add_argument("--history-j", type=int, default=8, help="concurrency of the history row")
    p.add_argument(
        "--history-latency", type=float, default=0.02, help="agent latency of the history row (s)"
    )
    p.add_argument(
        "--package-root",
        type=Path,
        help="measure the agent_health package in this directory (e.g. an older commit's "
        "operator/, from git worktree add) instead of the installed one",
    )
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("rounds", "list_rounds", "n", "calls", "calls_j", "history_n", "history_j"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if args.warmup < 0 or min(args.calls_latency, args.history_latency, args.timeout) <= 0:
        print(
            "error: --warmup must be >= 0, --calls-latency, --history-latency and --timeout > 0",
            file=sys.stderr,
        )
        return 2
    if args.package_root is not None:
        problem = use_package_root(args.package_root)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    rows = args.row or list(ROWS)
    results: list[RowResult] = []
    with (
        tempfile.TemporaryDirectory(prefix="agent-health-bench-") as tmp,
        _agents(rows, args) as urls,
    ):
        work = Path(tmp)
        try:
            for name in rows:
                if name == "trivial":
                    results.append(trivial(work, args))
                elif name == "calls":
                    results.append(calls(work, args, urls["calls"]))
                elif name == "list":
                    results.append(listing(work, args))
                elif name == "run":
                    results.append(run_one(work, args))
                elif name == "hang":
                    results.append(hang(work, args, urls["hang"]))
                else:
                    results.append(history(work, args, urls["history"]))
        except engine_overhead.BenchError as err:
            print(f"benchmark crashed: {err}", file=sys.stderr)
            return 1
    print(render(results, args))
    if args.json:
        payload = [
            {
                **asdict(r),
                "ratio": r.ratio,
                "cpu_ratio": r.cpu_ratio,
                "cpu_per_test_ms": r.cpu_per_test_ms,
                "own_cpu_per_test_ms": r.own_cpu_per_test_ms,
            }
            for r in results
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
