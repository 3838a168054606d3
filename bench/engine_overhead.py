"""How much the agent-health engine costs, next to pytest, and how well it overlaps agents.

Two measurements, one invocation (``make bench``):

1. Engine overhead: the same N trivial tests (call an instant in-process agent, check its
   answer) through ``agent-health run`` and through pytest with pytest-asyncio. Each side
   runs as a fresh subprocess; we take the wall time of the whole command (discovery, run,
   report) and its peak RSS (``os.wait4``), the median of ``--rounds`` runs, and print
   ours / pytest. Ours runs at ``-j 1`` (pytest is sequential) and at the default ``-j``.
2. Concurrency efficiency: 200 tests against a real HTTP agent on 127.0.0.1 that takes
   100 ms per answer, at ``-j 50``. Ideal is ceil(200 / 50) x 100 ms; we print the run's
   own duration (the JSON report's ``summary.duration_ms``) over ideal, and the whole
   command's wall time. It runs through the built-in REST connector (the figure that
   counts) and, as a diagnostic, through a minimal aiohttp connector registered in the
   suite's config, which tells the engine's own cost from its HTTP client's. Beside them,
   the floor: the same calls from a bare aiohttp script (``plain_client.py --aiohttp``), its
   requests timed after its imports — what the client alone achieves on this machine.

Every command runs as users run it, with bytecode caching allowed (``PYTHONDONTWRITEBYTECODE``
is taken out of its environment; an unmeasured warm-up round writes the caches first).

Targets: overhead ratio <= 1.0, concurrency efficiency <= 1.1. The benchmark reports; it
does not gate: it exits 0 whatever the figures, and 1 only when a side crashed or a test
did not pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import slow_agent
import suites

_PASSED = re.compile(r"(\d+) passed")
_TOOK = re.compile(r"passed in ([0-9.]+) s")
HERE = Path(__file__).resolve().parent
FLOOR = "bare aiohttp script, no harness"
OVERHEAD_TARGET = 1.0
EFFICIENCY_TARGET = 1.1


class BenchError(Exception):
    """A side crashed or did not pass every test: the figures would mean nothing."""


@dataclass(frozen=True)
class Sample:
    """One subprocess run: wall seconds, peak RSS in MiB, exit code, output, CPU seconds."""

    wall_s: float
    rss_mib: float
    code: int
    output: str
    cpu_s: float = 0.0  # user + system time of the command itself (from wait4)


@dataclass(frozen=True)
class Figures:
    """The median of several samples of one side."""

    label: str
    wall_s: float
    rss_mib: float
    walls: tuple[float, ...]


# Left out of every measured command's environment. PYTHONDONTWRITEBYTECODE: users run with
# bytecode caching on (the warm-up round writes the caches), so a command that compiled
# every module from source on every start would measure nobody.
UNSET = ("FORCE_COLOR", "PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE")


def measure(argv: list[str], cwd: Path) -> Sample:
    """Run ``argv`` to completion; its wall time and its own peak RSS (from ``wait4``).

    The command runs with bytecode caching allowed (``UNSET``), as users run it.
    """
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        output = out.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    return Sample(wall, usage.ru_maxrss / 1024, proc.returncode, output, cpu)  # ru_maxrss: KiB


def check(label: str, sample: Sample, n: int, passed: re.Pattern[str]) -> None:
    """Refuse figures from a run that crashed or did not pass all ``n`` tests."""
    found = passed.search(sample.output)
    if sample.code != 0 or found is None or int(found.group(1)) != n:
        tail = "\n".join(sample.output.strip().splitlines()[-15:])
        raise BenchError(f"{label} exited {sample.code}, expected {n} passed tests:\n{tail}")


@dataclass(frozen=True)
class Side:
    """One command to compare: what it is called, what it runs, where."""

    label: str
    argv: list[str]
    cwd: Path


def medians(sides: list[Side], args: argparse.Namespace) -> list[Figures]:
    """Median wall time and peak RSS of each side.

    Rounds are interleaved (A, B, C, A, B, C, ...) so that load from elsewhere on the
    machine falls on every side alike instead of on whichever side ran during it.
    """
    passed = re.compile(r"(\d+) passed")
    for _ in range(args.warmup):  # writes bytecode caches, warms the page cache
        for side in sides:
            check(side.label, measure(side.argv, side.cwd), args.n, passed)
    samples: dict[str, list[Sample]] = {side.label: [] for side in sides}
    for _ in range(args.rounds):
        for side in sides:
            sample = measure(side.argv, side.cwd)
            check(side.label, sample, args.n, passed)
            samples[side.label].append(sample)
    return [
        Figures(
            label=label,
            wall_s=statistics.median(s.wall_s for s in taken),
            rss_mib=statistics.median(s.rss_mib for s in taken),
            walls=tuple(round(s.wall_s, 3) for s in taken),
        )
        for label, taken in samples.items()
    ]


def overhead(work: Path, args: argparse.Namespace) -> list[Figures]:
    ours_dir = suites.write_ours(work / "ours", args.n, args.per_file)
    pytest_dir = suites.write_pytest(work / "pytest", args.n, args.per_file)
    ours = [sys.executable, "-m", "agent_health.cli", "run", "."]
    theirs = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "."]
    return medians(
        [
            Side("pytest + pytest-asyncio", theirs, pytest_dir),
            Side("agent-health -j 1", [*ours, "-j", "1"], ours_dir),
            Side("agent-health (default -j)", ours, ours_dir),
        ],
        args,
    )


@dataclass(frozen=True)
class Concurrency:
    """Part 2 through one connector: the run's own duration and the whole command's."""

    connector: str
    tests: int
    j: int
    latency_s: float
    ideal_s: float
    session_s: float
    command_s: float

    @property
    def efficiency(self) -> float:
        return self.session_s / self.ideal_s


def concurrency(work: Path, args: argparse.Namespace) -> list[Concurrency]:
    """The built-in REST connector without recording (the engine's figure), the same with the
    default local ledger (what recording every exchange costs), then the diagnostic one."""
    n = args.concurrency_tests
    builtin = suites.write_ours(work / "concurrency", n, args.per_file, config=False)
    diagnostic = suites.write_ours(work / "concurrency-aiohttp", n, args.per_file, config=False)
    report = work / "concurrency-report.json"
    base = [sys.executable, "-m", "agent_health.cli", "run", ".", "-j", str(args.j)]
    base += ["--reporter", f"json:{report}"]
    with slow_agent.serving(args.latency) as url:
        suites.write_aiohttp_config(diagnostic, url)
        runs = [
            ("built-in rest connector", [*base, "--agent", f"rest+{url}", "--no-ledger"], builtin),
            (
                "built-in rest connector, recording the ledger (the default)",
                [*base, "--agent", f"rest+{url}"],
                builtin,
            ),
            ("aiohttp connector from the config", [*base, "--no-ledger"], diagnostic),
        ]
        # The floor: the same calls from a bare aiohttp script, no harness; it prints how long
        # its requests took after its imports, the counterpart of a run's own duration.
        floor = [sys.executable, str(HERE / "plain_client.py"), url, str(n), str(args.j)]
        runs.append((FLOOR, [*floor, "--aiohttp"], builtin))
        for _ in range(args.warmup):  # writes bytecode caches, warms the page cache
            for name, argv, cwd in runs:
                check(f"concurrency run ({name})", measure(argv, cwd), n, _PASSED)
        sessions: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        commands: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        for _ in range(args.rounds):
            for name, argv, cwd in runs:
                sample = measure(argv, cwd)
                check(f"concurrency run ({name})", sample, n, _PASSED)
                if name == FLOOR:
                    took = _TOOK.search(sample.output)
                    if took is None:
                        raise BenchError(f"{name} printed no time:\n{sample.output}")
                    sessions[name].append(float(took.group(1)))
                else:
                    summary = json.loads(report.read_text())["summary"]
                    sessions[name].append(summary["duration_ms"] / 1000)
                commands[name].append(sample.wall_s)
    return [
        Concurrency(
            connector=name,
            tests=n,
            j=args.j,
            latency_s=args.latency,
            ideal_s=math.ceil(n / args.j) * args.latency,
            session_s=statistics.median(sessions[name]),
            command_s=statistics.median(commands[name]),
        )
        for name, _, _ in runs
    ]


def _verdict(label: str, value: float, target: float) -> str:
    """One figure with its target and a PASS/MISS marker, aligned with the other rows."""
    mark = "PASS" if round(value, 2) <= target else "MISS"  # as printed
    return f"   {label:<44}{value:8.2f}   target <= {target:.2f}   {mark}"


def _row(label: str, seconds: float) -> str:
    return f"   {label:<44}{seconds:8.3f} s"


def render(
    args: argparse.Namespace, sides: list[Figures] | None, conc: list[Concurrency] | None
) -> str:
    lines = [
        f"agent-health engine benchmark — Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, "
        f"median of {args.rounds} round(s) after {args.warmup} warm-up",
    ]
    if sides is not None:
        lines += _render_overhead(args, sides)
    if conc is not None:
        lines += _render_concurrency(conc)
    return "\n".join(lines)


def _render_overhead(args: argparse.Namespace, sides: list[Figures]) -> list[str]:
    pytest_side, ours_j1, ours_default = sides
    lines = [
        "",
        f"1. engine overhead: {args.n} trivial tests, instant in-process agent, "
        f"{args.per_file} tests per file",
        "   (each side: the whole command — discovery, run, report — in a fresh subprocess)",
        f"   {'side':<32}{'wall s':>9}{'peak RSS MiB':>15}   rounds (wall s)",
    ]
    for side in sides:
        walls = ", ".join(f"{w:.2f}" for w in side.walls)
        lines.append(f"   {side.label:<32}{side.wall_s:>9.3f}{side.rss_mib:>15.1f}   {walls}")
    lines.append("")
    for name, ours in (("-j 1", ours_j1), ("default -j", ours_default)):
        wall = ours.wall_s / pytest_side.wall_s
        rss = ours.rss_mib / pytest_side.rss_mib
        lines.append(_verdict(f"ratio wall (ours {name} / pytest)", wall, OVERHEAD_TARGET))
        lines.append(_verdict(f"ratio peak RSS (ours {name} / pytest)", rss, OVERHEAD_TARGET))
    return lines


def _render_concurrency(runs: list[Concurrency]) -> list[str]:
    first = runs[0]
    lines = [
        "",
        f"2. concurrency: {first.tests} tests, agent latency {first.latency_s * 1000:.0f} ms "
        f"over HTTP on 127.0.0.1, -j {first.j}",
        _row(f"ideal = ceil({first.tests}/{first.j}) x {first.latency_s:g} s", first.ideal_s),
    ]
    for i, conc in enumerate(runs):
        if conc.connector == FLOOR:
            lines += [
                f"   {FLOOR} (the floor: the built-in connectors' client with nothing around it)",
                _row("  its requests (after its imports)", conc.session_s),
                _row("  whole command", conc.command_s),
                f"   {'  floor efficiency (requests / ideal)':<44}{conc.efficiency:8.2f}",
            ]
            continue
        role = " (diagnostic: the engine without the built-in client)" if i == 2 else ""
        lines += [
            f"   via the {conc.connector}{role}",
            _row("  session (report summary.duration_ms)", conc.session_s),
            _row("  whole command", conc.command_s),
            _verdict(
                "  concurrency efficiency (session / ideal)", conc.efficiency, EFFICIENCY_TARGET
            ),
        ]
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="tests per side (default 2000)")
    p.add_argument("--per-file", type=int, default=100, help="tests per file (default 100)")
    p.add_argument("--rounds", type=int, default=3, help="measured runs per side (median)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs per side first")
    p.add_argument("--concurrency-tests", type=int, default=200, help="tests in part 2")
    p.add_argument("-j", type=int, default=50, help="concurrency in part 2 (default 50)")
    p.add_argument("--latency", type=float, default=0.1, help="agent latency in part 2 (s)")
    p.add_argument(
        "--part",
        choices=("all", "overhead", "concurrency"),
        default="all",
        help="run both parts (default) or one",
    )
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    flags = {"n": "--n", "per_file": "--per-file", "rounds": "--rounds", "j": "-j"}
    flags["concurrency_tests"] = "--concurrency-tests"
    for name, flag in flags.items():
        if getattr(args, name) < 1:
            print(f"error: {flag} must be at least 1", file=sys.stderr)
            return 2
    if args.warmup < 0 or args.latency <= 0:
        print("error: --warmup must be >= 0 and --latency > 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="agent-health-bench-") as tmp:
        try:
            sides = overhead(Path(tmp), args) if args.part != "concurrency" else None
            conc = concurrency(Path(tmp), args) if args.part != "overhead" else None
        except BenchError as err:
            print(f"benchmark crashed: {err}", file=sys.stderr)
            return 1
    print(render(args, sides, conc))
    if args.json:
        payload = {
            "n": args.n,
            "sides": [asdict(s) for s in sides or ()],
            "concurrency": [{**asdict(c), "efficiency": c.efficiency} for c in conc or ()],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
