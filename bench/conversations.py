"""What a conversation's turns cost the harness, next to the agent's own time per turn.

The same number of agent calls two ways, each the whole ``agent-health run`` command in a
fresh subprocess at ``-j 32`` against a REST v1 agent on 127.0.0.1 (aiohttp, in a thread
of this process) that answers after ``--latency`` (default 20 ms):

* ``--tests`` conversations of ``--turns`` turns each (``agent.run("ping", turns=[...])``);
* ``--tests x --turns`` single runs (``agent.run("ping")``).

A lane of ``-j`` runs its tests one after another, so the agent's own time is
``ceil(tests / j) x turns x latency`` for the conversations and ``ceil(tests x turns / j)
x latency`` for the single runs (equal when ``tests`` is a multiple of ``j``). What the
harness adds per turn is the run's own duration (the JSON report's ``summary.duration_ms``)
less that, divided by every turn of the run (the figure the target is for); divided by the
turns one lane took instead, it is what each turn of a conversation waits (about ``j``
turns' harness work, since one event loop serves every lane). The figures are the
median of ``--rounds`` interleaved rounds after ``--warmup`` unmeasured ones, without the
ledger (the engine's figure) and, as a diagnostic, with the default local ledger.

    python bench/conversations.py    # target: under 1 ms added per turn at -j 32

It reports; it does not gate: it exits 0 whatever the figures, 1 only when a run crashed or
a test did not pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import engine_overhead
import slow_agent

TARGET_MS = 1.0
"""The harness's added time per turn, at ``-j 32``."""
_PASSED = re.compile(r"(\d+) passed")

TALK_TEST = """

@test("talk {i}")
async def talk_{i}(agent, expect):
    result = await agent.run("ping", turns=["ping"] * {follow_ups})
    expect(result.output).to_equal("pong")
    assert len(result.turns) == {turns}
"""
SINGLE_TEST = """

@test("ping {i}")
async def ping_{i}(agent, expect):
    result = await agent.run("ping")
    expect(result.output).to_equal("pong")
"""


def write(root: Path, body: str, n: int, per_file: int, **fields: int) -> Path:
    root.mkdir(parents=True)
    for start in range(0, n, per_file):
        tests = "".join(body.format(i=i, **fields) for i in range(start, min(n, start + per_file)))
        (root / f"test_{start // per_file:04d}.py").write_text(
            "from agent_health import test\n" + tests
        )
    return root


@dataclass(frozen=True)
class Figure:
    """One way of making the calls: its run's own duration and what the harness added."""

    label: str
    tests: int
    turns_per_test: int
    j: int
    latency_s: float
    agent_s: float
    session_s: float
    command_s: float
    cpu_s: float

    @property
    def lane_turns(self) -> int:
        """Turns one lane took, one after another."""
        return math.ceil(self.tests / self.j) * self.turns_per_test

    @property
    def added_ms_per_turn(self) -> float:
        """The harness's time beyond the agent's, per agent call of the run."""
        return (self.session_s - self.agent_s) / (self.tests * self.turns_per_test) * 1000

    @property
    def lane_ms_per_turn(self) -> float:
        """What a turn waits beyond the agent, along one lane (all lanes share a loop)."""
        return (self.session_s - self.agent_s) / self.lane_turns * 1000

    @property
    def cpu_ms_per_turn(self) -> float:
        """The whole command's CPU (start-up included) per agent call."""
        return self.cpu_s / (self.tests * self.turns_per_test) * 1000


def run(work: Path, args: argparse.Namespace) -> list[Figure]:
    talks = write(
        work / "talks",
        TALK_TEST,
        args.tests,
        args.per_file,
        follow_ups=args.turns - 1,
        turns=args.turns,
    )
    singles = write(work / "singles", SINGLE_TEST, args.tests * args.turns, args.per_file)
    report = work / "report.json"
    ways: list[tuple[str, Path, int, int, list[str]]] = [
        (f"{args.tests} conversations of {args.turns} turns", talks, args.tests, args.turns, []),
        (f"{args.tests * args.turns} single runs", singles, args.tests * args.turns, 1, []),
        (
            f"{args.tests} conversations of {args.turns} turns, recording the ledger",
            talks,
            args.tests,
            args.turns,
            ["ledger"],
        ),
    ]
    with slow_agent.serving(args.latency) as url:
        base = [sys.executable, "-m", "agent_health.cli", "run", ".", "-j", str(args.j)]
        base += ["--agent", f"rest+{url}", "--reporter", f"json:{report}"]

        def argv(extra: list[str]) -> list[str]:
            return base if "ledger" in extra else [*base, "--no-ledger"]

        for _ in range(args.warmup):
            for label, cwd, n, _, extra in ways:
                engine_overhead.check(label, engine_overhead.measure(argv(extra), cwd), n, _PASSED)
        sessions: dict[str, list[float]] = {w[0]: [] for w in ways}
        commands: dict[str, list[float]] = {w[0]: [] for w in ways}
        cpus: dict[str, list[float]] = {w[0]: [] for w in ways}
        for _ in range(args.rounds):  # interleaved: load from elsewhere falls on every way
            for label, cwd, n, _, extra in ways:
                sample = engine_overhead.measure(argv(extra), cwd)
                engine_overhead.check(label, sample, n, _PASSED)
                sessions[label].append(json.loads(report.read_text())["summary"]["duration_ms"])
                commands[label].append(sample.wall_s)
                cpus[label].append(sample.cpu_s)
    return [
        Figure(
            label=label,
            tests=n,
            turns_per_test=turns,
            j=args.j,
            latency_s=args.latency,
            agent_s=math.ceil(n / args.j) * turns * args.latency,
            session_s=statistics.median(sessions[label]) / 1000,
            command_s=statistics.median(commands[label]),
            cpu_s=statistics.median(cpus[label]),
        )
        for label, _, n, turns, _ in ways
    ]


def render(args: argparse.Namespace, figures: list[Figure]) -> str:
    lines = [
        f"agent-health conversation benchmark — Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, "
        f"median of {args.rounds} round(s) after {args.warmup} warm-up; -j {args.j}, the "
        f"agent answers in {args.latency * 1000:g} ms",
    ]
    for f in figures:
        mark = "PASS" if round(f.added_ms_per_turn, 2) <= TARGET_MS else "MISS"
        lines += [
            f" {f.label}",
            f"   {'agent time along a lane':<44}{f.agent_s:8.3f} s",
            f"   {'session (report summary.duration_ms)':<44}{f.session_s:8.3f} s",
            f"   {'whole command':<44}{f.command_s:8.3f} s",
            f"   {'harness added per turn':<44}{f.added_ms_per_turn:8.3f} ms"
            f"   target < {TARGET_MS:.2f} ms   {mark}",
            f"   {'ratio added / agent time per turn':<44}"
            f"{f.added_ms_per_turn / (f.latency_s * 1000):8.3f}",
            f"   {'added per turn along one lane':<44}{f.lane_ms_per_turn:8.3f} ms",
            f"   {'command CPU per turn (start-up included)':<44}{f.cpu_ms_per_turn:8.3f} ms",
        ]
    talk, single = figures[0], figures[1]
    lines += [
        " conversations next to single runs (the same agent calls)",
        f"   {'ratio session (conversations / singles)':<44}"
        f"{talk.session_s / single.session_s:8.3f}",
        f"   {'ratio CPU (conversations / singles)':<44}{talk.cpu_s / single.cpu_s:8.3f}",
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", type=int, default=64, help="conversations (default 64)")
    p.add_argument("--turns", type=int, default=10, help="turns per conversation (default 10)")
    p.add_argument("--per-file", type=int, default=100, help="tests per file (default 100)")
    p.add_argument("-j", type=int, default=32, help="concurrency (default 32)")
    p.add_argument("--latency", type=float, default=0.02, help="agent latency, s (0.02)")
    p.add_argument("--rounds", type=int, default=3, help="measured runs per way (median)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured runs per way first")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name, flag in {"tests": "--tests", "per_file": "--per-file", "j": "-j"}.items():
        if getattr(args, name) < 1:
            print(f"error: {flag} must be at least 1", file=sys.stderr)
            return 2
    if args.turns < 2 or args.rounds < 1 or args.warmup < 0 or args.latency <= 0:
        print(
            "error: --turns must be >= 2, --rounds >= 1, --warmup >= 0 and --latency > 0",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="agent-health-bench-talk-") as tmp:
        try:
            figures = run(Path(tmp), args)
        except engine_overhead.BenchError as err:
            print(f"benchmark crashed: {err}", file=sys.stderr)
            return 1
    print(render(args, figures))
    if args.json:
        payload = [
            {
                **asdict(f),
                "added_ms_per_turn": f.added_ms_per_turn,
                "lane_ms_per_turn": f.lane_ms_per_turn,
                "cpu_ms_per_turn": f.cpu_ms_per_turn,
            }
            for f in figures
        ]
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
