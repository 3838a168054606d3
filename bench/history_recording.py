"""What recording the history costs one run, stage by stage, in this process: deterministic.

The history's part of ``agent-health run`` — SQLAlchemy's import, opening the history,
``prepare`` (the run's tests written ahead and the run it will be compared with read),
``record`` (the run's row, its results, its trend) and the history line the run prints — done
here, in this thread, on the same calls the run makes (``cli/run/archive.py``), against a
SQLite history that already holds ``--previous`` runs of the same ``--tests`` tests (the
calls row of ``defaults.py`` reuses its suite, and so its history, across rounds). Every stage is
timed on this thread's CPU clock (``time.thread_time``: what the run's loop loses to the
history's thread on two busy cores), each over ``--rounds`` fresh copies of that history,
and its SQL statements counted (SQLAlchemy's ``before_cursor_execute``: an ``executemany``
is one). The import is timed once, first (a fresh interpreter pays it once).

The first round is printed apart: it is what a run pays (a fresh process compiles each
statement and builds each model it uses once); the others are the same work warm.
``--profile FILE`` also writes cProfile's figures of the first round's stages to ``FILE``
(``pstats``), and prints their top functions by own time.

    python bench/history_recording.py                   # 400 tests, 4 previous runs, 9 rounds
    python bench/history_recording.py --tests 2000 --profile /tmp/rec.prof
    python bench/history_recording.py --package-root /tmp/main/operator   # another tree

Instructions (valgrind's callgrind, the same on a busy machine as on an idle one): the
stages of one round are what ``--rounds 1`` executes beyond ``--rounds 1 --no-stages`` (the
import, the history filled and the round set up, nothing recorded).

Figures, never a verdict (exit 0; 1 when a stage failed its work, 2 for bad options).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

STAGES = ("open", "prepare", "record", "line", "close")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tests", type=int, default=400, help="tests of the run (default 400)")
    p.add_argument("--previous", type=int, default=4, help="runs the history holds already")
    p.add_argument("--rounds", type=int, default=9, help="recordings timed (the first apart)")
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="set each round up but record nothing (what the stages add is the difference)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="record the previous runs in a child process, so that this process's first round "
        "pays every first build and compile a fresh `agent-health run` pays (else the setup's "
        "recordings have paid some of them)",
    )
    p.add_argument(
        "--upto",
        choices=STAGES,
        help="stop each round after this stage (instruction counts of each stage: the "
        "differences between --upto runs)",
    )
    p.add_argument("--fill", type=Path, help=argparse.SUPPRESS)  # --fresh's child
    p.add_argument("--profile", type=Path, help="write cProfile's figures here (pstats)")
    p.add_argument("--top", type=int, default=25, help="functions printed with --profile")
    p.add_argument(
        "--package-root",
        type=Path,
        help="import agent_health from this directory (a checkout's operator/)",
    )
    return p


def report_shape(n: int, run: int, started: datetime) -> dict[str, Any]:
    """A run's JSON report as ``agent-health run`` writes it for ``n`` passing tests, each
    one POST to a REST agent (the calls row's suite: 100 tests a file), ``run`` its number."""
    tests = []
    for i in range(n):
        name = f"ping {i}"
        file = f"test_ping_{i // 100:04d}.py"
        tests.append(
            {
                "id": f"{file}::{name}",
                "name": name,
                "file": file,
                "line": 4 + 5 * (i % 100),
                "labels": [],
                "repeat": 0,
                "status": "passed",
                "score": 1.0,
                "error": None,
                "cause": None,
                "skip_reason": None,
                "output": "pong",
                "turns": [],
                "ended": None,
                "agent": None,
                "quarantined": False,
                "duration_ms": 50.0 + (i * 7 + run) % 40,
                "content_hash": f"{i:016x}",
                "metrics": {"total_tokens": 2, "cost_usd": None},
                "signals": [
                    {"kind": "deterministic", "role": "gate", "name": "to_equal('pong')",
                     "passed": True, "score": 1.0},
                ],
            }
        )  # fmt: skip
    ended = started + timedelta(seconds=2)
    return {
        "version": 2,
        "summary": {
            "total": n,
            "passed": n,
            "failed": 0,
            "errored": 0,
            "skipped": 0,
            "flaky_count": 0,
            "not_run": 0,
            "errored_by_cause": {"agent": 0, "judge": 0, "test": 0, "infra": 0},
            "pass_rate": 1.0,
            "pass_rate_interval": {"low": 0.990488, "high": 1.0, "method": "wilson", "n": n},
            "score": 1.0,
            "score_interval": {"low": 0.990488, "high": 1.0, "method": "wilson", "n": n},
            "tokens": 2 * n,
            "cost_usd": None,
            "duration_ms": 2000.0,
            "repeats": 1,
            "interrupted": False,
        },
        "provenance": {
            "run_id": f"bench-{run:04d}",
            "agent": {
                "name": "rest+http://127.0.0.1:40000/run",
                "connector": "rest",
                "url": "http://127.0.0.1:40000/run",
                "command": None,
                "image": None,
            },
            "agents": [],
            "judge": {"provider": None, "model": None, "skipped": False},
            "agent_health_version": "0.1.0",
            "suite": {
                "paths": ["."],
                "git_commit": None,
                "git_dirty": None,
                "git_branch": None,
                "name": "/tmp/suite",
            },
            "config_hash": None,
            "ledger": "file://.agent-health/ledger/bench",
            "started_at": started.isoformat().replace("+00:00", "Z"),
            "ended_at": ended.isoformat().replace("+00:00", "Z"),
            "selection": {"grep": [], "labels": [], "shard": None},
        },
        "tests": tests,
        "matrix": None,
    }


class Case:
    """What ``archive._prepare`` reads of a loaded test."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.id = entry["id"]
        self.title = entry["name"]
        self.file = entry["file"]
        self.line = entry["line"]
        self.labels = tuple(entry["labels"])
        self.content_hash = entry["content_hash"]


@contextmanager
def counted(engine: Any, into: list[str]) -> Iterator[None]:
    """Each SQL statement ``engine`` runs meanwhile, appended to ``into``."""
    import sqlalchemy as sa

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        verb = statement.split(None, 1)[0].upper()
        table = re.search(r"\b(?:FROM|INTO|UPDATE)\s+(\w+)", statement, re.IGNORECASE)
        into.append(f"{verb} {table.group(1) if table else ''}".strip())

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        yield
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # As users run it: the package's bytecode cached (PYTHONDONTWRITEBYTECODE aside), or every
    # round of this script would time compiling our modules' sources as part of the import.
    sys.dont_write_bytecode = False
    if args.package_root is not None:
        sys.path.insert(0, str(args.package_root.resolve()))
    import agent_health
    from agent_health.engine import reports  # what a run has imported when it records

    print(f"agent_health from {Path(agent_health.__file__).parent}")
    began = time.thread_time()
    from agent_health import history
    from agent_health.cli.run import archive
    from agent_health.engine import statistics as stats_mod

    archive._import()  # what the run's history thread imports first: SQLAlchemy, our modules
    stats_mod.pair_runs  # noqa: B018  # as archive._prepare loads it
    import_s = time.thread_time() - began

    start = datetime(2026, 1, 1, tzinfo=UTC)
    if args.fill is not None:
        _fill(history, args.fill, args.tests, args.previous, start)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.db"
        if args.fresh:
            child = [sys.executable, __file__, "--fill", str(base)]
            child += ["--tests", str(args.tests), "--previous", str(args.previous)]
            if args.package_root is not None:
                child += ["--package-root", str(args.package_root)]
            subprocess.run(child, check=True, stdout=subprocess.DEVNULL)
        else:
            _fill(history, base, args.tests, args.previous, start)
        cpu: dict[str, list[float]] = {stage: [] for stage in STAGES}
        said: dict[str, list[str]] = {}
        lines: set[str] = set()
        profiler = cProfile.Profile(time.thread_time) if args.profile else None
        for round_ in range(args.rounds):
            where = Path(tmp) / f"r{round_}.db"
            shutil.copy(base, where)
            run = args.previous + round_
            started = start + timedelta(minutes=args.previous + 1)
            shape = report_shape(args.tests, run, started)
            report = reports.RunReport.model_validate(shape)
            # What the run's reporters did before it is recorded (its models' serialisers
            # built): not the history's cost.
            report.summary.model_dump(mode="json")
            assert report.provenance is not None
            report.provenance.model_dump(mode="json")
            cases = [Case(t) for t in shape["tests"]]
            agent = shape["provenance"]["agent"]["name"]
            statements: list[str] = []
            suite_future: Any = _done(shape["provenance"]["suite"]["name"])
            line = archive.Upcoming(agent, suite_future, started)
            if args.no_stages:  # the round's setup alone (for instruction counts)
                continue

            watched = profiler if round_ == 0 else None

            def timed(stage: str, work: Callable[[], Any]) -> Any:
                if watched is not None:  # noqa: B023  # called in this round only
                    watched.enable()  # noqa: B023
                began = time.thread_time()
                value = work()
                cpu[stage].append(time.thread_time() - began)
                if watched is not None:  # noqa: B023
                    watched.disable()  # noqa: B023
                return value

            opened = timed("open", lambda: history.open_history(f"sqlite:///{where}"))  # noqa: B023
            if args.upto == "open":
                opened.close()
                continue
            with counted(opened.engine, statements):
                n = len(statements)
                known = timed("prepare", lambda: archive._prepare(_done(opened), cases, line))  # noqa: B023
                said["prepare"] = statements[n:]
                n = len(statements)
                if args.upto != "prepare":
                    context = history.RunContext(
                        source="local",
                        suite=shape["provenance"]["suite"]["name"],
                        exit_code=0,
                        report_path="/tmp/report.json",
                        ledger_verified=True,
                    )
                    recorded = timed("record", lambda: opened.record(report, context, known))  # noqa: B023
                    said["record"] = statements[n:]
                    n = len(statements)
                if args.upto not in ("prepare", "record"):
                    text = timed("line", lambda: archive._line(opened, recorded, context.suite))  # noqa: B023
                    said["line"] = statements[n:]
            if args.upto in ("prepare", "record", "line"):
                opened.close()
                continue
            timed("close", opened.close)
            if not recorded or not recorded[0].new or recorded[0].results != args.tests:
                print(f"round {round_}: the run was not recorded whole: {recorded}")
                return 1
            lines.add(text.split("; ", 1)[1])
        if args.no_stages:
            print(f"{args.rounds} rounds set up, none recorded (--no-stages)")
            return 0
        if args.upto is not None:
            print(f"{args.rounds} rounds up to {args.upto} (--upto)")
            if profiler is not None:
                profiler.dump_stats(str(args.profile))
            return 0
        print(
            f"{args.tests} tests, a history of {args.previous} previous runs, {args.rounds} "
            f"rounds; CPU ms of this thread: the first round (what a run pays), the median and "
            f"least of the others; Python {sys.version.split()[0]}, "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(f"  {'import':<8} {import_s * 1000:8.1f}  (once)")
        first_total = median_total = 0.0
        for stage in STAGES:
            first = cpu[stage][0] * 1000
            others = cpu[stage][1:] or cpu[stage]
            median = statistics.median(others) * 1000
            first_total += first
            median_total += median
            least = min(others) * 1000
            count = len(said.get(stage, []))
            shown = f"  {count} statements" if stage in said else ""
            print(f"  {stage:<8} {first:8.1f} {median:8.1f} {least:8.1f}{shown}")
        print(
            f"  {'stages':<8} {first_total:8.1f} {median_total:8.1f}  per test, the first "
            f"round: {first_total / args.tests:.3f} ms"
        )
        for stage, found in said.items():
            kinds: dict[str, int] = {}
            for text_ in found:
                kinds[text_] = kinds.get(text_, 0) + 1
            print(f"  {stage}: " + "; ".join(f"{k} ×{v}" for k, v in kinds.items()))
        print(f"  the line: {' | '.join(sorted(lines))}")
        if profiler is not None:
            profiler.dump_stats(str(args.profile))
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
            print(out.getvalue())
    return 0


def _fill(history: Any, where: Path, tests: int, previous: int, start: datetime) -> None:
    """The history every round starts from: ``previous`` runs of ``tests`` tests."""
    with history.open_history(f"sqlite:///{where}") as h:
        for run in range(previous):
            data = report_shape(tests, run, start + timedelta(minutes=run))
            h.record(data, history.RunContext(exit_code=0))


def _done(value: Any) -> Any:
    import concurrent.futures

    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(value)
    return future


if __name__ == "__main__":
    sys.exit(main())
