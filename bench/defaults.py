"""The default path at the speed of a bare client: agent-health as users run it, next to no harness.

Every row runs agent-health with its defaults (the local ledger on, the built-in connectors)
and a baseline that does the same work without a harness, each as a whole command in a fresh
subprocess, rounds interleaved, and prints ours / baseline beside the target:

==================================================  ====================================  ======
ours (defaults)                                     baseline in the same run              target
==================================================  ====================================  ======
2,000 trivial tests (instant in-process agent) -j1  pytest + pytest-asyncio, same tests   <= 0.5
400 tests, one POST each to a 50 ms agent, -j 32    a plain 32-thread http.client script  <= 1.3
``agent-health list`` of one test                   python -c "import pydantic, httpx"    <= 1.3
a hanging agent, ``--timeout 2``                    the same run with ``--no-ledger``     <= 1.2
==================================================  ====================================  ======

Each command runs with bytecode caching allowed, as users run it: ``PYTHONDONTWRITEBYTECODE``
is taken out of its environment and the unmeasured warm-up round writes the caches.

The verdict is on wall time (what a user waits for). The CPU time of each command (user +
system, from ``wait4``) is printed too: on a machine shared with other work it moves much
less than wall time, so it tells a real change from a noisy round. ``--no-ledger`` runs are
printed as diagnostics where they explain a figure. The calls row also runs a *floor*: the
same calls from a bare script on aiohttp (the built-in connectors' client) with no harness, so
what the client itself costs here — its import included — is measured beside the target.
The script reports, it never gates: exit 0 whatever the figures, 1 when a side crashed or
did not pass its work, 2 for bad options.

    python bench/defaults.py                      # every row (about two minutes here)
    python bench/defaults.py --row list --rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
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
ROWS = ("trivial", "calls", "list", "hang")
ROLE_MARKS = {"baseline": " [baseline]", "diagnostic": " [diagnostic]", "floor": " [floor]"}
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
    role: str = "ours"  # "ours" (the figure), "baseline", "diagnostic" or "floor"


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

    def side(self, role: str) -> Measured:
        return next(s for s in self.sides if s.role == role)

    @property
    def floor(self) -> float | None:
        """The floor side's wall time over the baseline's, when the row has one."""
        floor = next((s for s in self.sides if s.role == "floor"), None)
        return None if floor is None else floor.wall_s / self.side("baseline").wall_s

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
    name: str, title: str, target: float, sides: list[Side], args: argparse.Namespace
) -> RowResult:
    """Interleaved rounds (A, B, C, A, B, C, ...) after warm-up; medians per side."""
    rounds = args.list_rounds if name == "list" else args.rounds
    for _ in range(args.warmup):
        for side in sides:
            _checked(side)
    measured = {side.label: Measured(side.label, side.role) for side in sides}
    for _ in range(rounds):
        for side in sides:
            sample = _checked(side)
            measured[side.label].walls.append(sample.wall_s)
            measured[side.label].cpus.append(sample.cpu_s)
    return RowResult(name, title, target, list(measured.values()))


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
    cmd = [*agent_health(), "run", ".", "-j", str(args.calls_j), "--agent", f"rest+{url}"]
    plain = [sys.executable, str(HERE / "plain_client.py"), url, str(args.calls), str(args.calls_j)]
    return run_row(
        "calls",
        f"{args.calls} tests, one POST each to a {args.calls_latency * 1000:.0f} ms agent, "
        f"-j {args.calls_j}",
        1.3,
        [
            Side(
                f"plain {args.calls_j}-thread client", plain, suite, passed(args.calls), "baseline"
            ),
            Side("agent-health (defaults)", cmd, suite, passed(args.calls)),
            Side(
                "agent-health --no-ledger",
                [*cmd, "--no-ledger"],
                suite,
                passed(args.calls),
                "diagnostic",
            ),
            Side(
                "bare aiohttp script, no harness",
                [*plain, "--aiohttp"],
                suite,
                passed(args.calls),
                "floor",
            ),
        ],
        args,
    )


def listing(work: Path, args: argparse.Namespace) -> RowResult:
    suite = work / "list"
    suite.mkdir(parents=True, exist_ok=True)
    (suite / "test_one.py").write_text(ONE_TEST)
    return run_row(
        "list",
        "`agent-health list` of one test",
        1.3,
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


@contextmanager
def _agents(rows: list[str], args: argparse.Namespace) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        urls = {}
        if "calls" in rows:
            urls["calls"] = stack.enter_context(slow_agent.serving(args.calls_latency))
        if "hang" in rows:
            urls["hang"] = stack.enter_context(slow_agent.serving(None))
        yield urls


def render(results: list[RowResult], args: argparse.Namespace) -> str:
    lines = [
        f"agent-health defaults vs no harness — Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
        f"medians of {args.rounds} rounds ({args.list_rounds} for list) after {args.warmup} "
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
        if row.floor is not None:
            lines.append(
                f"   floor / baseline: wall {row.floor:.2f} (the connectors' client alone, "
                "imported and driven from one event loop: no harness on it does better)"
            )
    lines += ["", "summary", f"   {'figure':<58}{'ratio':>7}   target"]
    for row in results:
        mark = "PASS" if round(row.ratio, 2) <= row.target else "MISS"
        lines.append(f"   {row.title:<58}{row.ratio:>7.2f}   <= {row.target:.2f} {mark}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", action="append", choices=ROWS, help="run only this row (repeatable)")
    p.add_argument("--rounds", type=int, default=3, help="measured runs per side (median)")
    p.add_argument("--list-rounds", type=int, default=15, help="measured runs per side for list")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs per side first")
    p.add_argument("--n", type=int, default=2000, help="trivial tests (default 2000)")
    p.add_argument("--calls", type=int, default=400, help="agent calls (default 400)")
    p.add_argument("--calls-j", type=int, default=32, help="concurrency of the calls row")
    p.add_argument("--calls-latency", type=float, default=0.05, help="agent latency (s)")
    p.add_argument("--timeout", type=float, default=2.0, help="--timeout of the hang row")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("rounds", "list_rounds", "n", "calls", "calls_j"):
        if getattr(args, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if args.warmup < 0 or args.calls_latency <= 0 or args.timeout <= 0:
        print("error: --warmup must be >= 0, --calls-latency and --timeout > 0", file=sys.stderr)
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
                else:
                    results.append(hang(work, args, urls["hang"]))
        except engine_overhead.BenchError as err:
            print(f"benchmark crashed: {err}", file=sys.stderr)
            return 1
    print(render(results, args))
    if args.json:
        payload = [
            {**asdict(r), "ratio": r.ratio, "cpu_ratio": r.cpu_ratio, "floor": r.floor}
            for r in results
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
