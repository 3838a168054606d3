"""The history's commands: ``history`` (the last runs), ``history TEST`` (one test across
runs), ``history import REPORT.json…``, ``history prune``, and ``flaky``.

``history`` takes a test or a subcommand in the same place (``history import a.json``,
``history 'payment RCA'``), so :func:`command` parses its own argv (``app.main`` hands it
over, as it does the operator's); ``flaky`` is an ordinary command. Each prints for a reader
at 80 columns (rich), or ``--json``. Every command opens the history the config names
(``--history``, ``$AGENT_HEALTH_HISTORY``, ``history=``, the default beside the config);
a history that is not there, cannot be read, or holds no such test is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.cli import common

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health import history

SUBCOMMANDS = ("import", "prune")
STATUS_MARKS = {"passed": "✓", "failed": "✗", "errored": "!", "skipped": "-", "flaky": "~"}
STATUS_STYLE = {
    "passed": "green",
    "failed": "red",
    "errored": "yellow",
    "skipped": "dim",
    "flaky": "magenta",
}
LIMIT = 20
"""Runs ``history`` lists, and outcomes ``history TEST`` shows, unless told."""
HTML_RUNS = 100
"""Runs the history page draws unless told (``agent_health.history.page.RUNS``, named here
so that ``--help`` loads no SQLAlchemy)."""
UNREADABLE_SHOWN = 3
"""Reports that could not be read named one a line; the rest counted."""
SPARKS = "▁▂▃▄▅▆▇█"
STRIP = 60
"""Outcomes shown in a test's status strip (the newest)."""


def add_commands(sub: Any) -> None:
    # `history` parses its own argv (app.main hands it over): listed here for --help.
    sub.add_parser(
        "history",
        help="the last runs; history TEST: one test across runs; history import|prune",
        add_help=False,
    )
    flaky = sub.add_parser(
        "flaky",
        help="tests whose outcome flips while neither the agent nor the test changed",
        description="Tests whose outcome flipped (pass ↔ fail) across the last runs while "
        "neither the agent's identity nor the test's content hash changed, ranked by flips, "
        "with the failure rate and its Wilson 95%% interval.",
    )
    flaky.add_argument(
        "--runs", type=int, default=50, metavar="N", help="over the last N runs (default 50)"
    )
    flaky.add_argument(
        "--quarantine",
        metavar="FILE",
        help="write these tests to FILE, which `run --quarantine FILE` (or quarantine= in the "
        "config) reads to report them apart and never gate on them",
    )
    _query_flags(flaky, limit=None)
    flaky.set_defaults(handler=flaky_command)


def _query_flags(
    parser: argparse.ArgumentParser, *, limit: int | None, limit_help: str | None = None
) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--agent", metavar="NAME", help="only runs of this agent")
    parser.add_argument("--label", metavar="LABEL", help="only tests carrying this label")
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only runs since then: a date (2025-01-31), a time (2025-01-31T12:00) or an age "
        "(7d, 12h, 30m, 2w)",
    )
    shown = f" (default {limit})" if limit is not None else " (default: all)"
    parser.add_argument(
        "--limit", type=int, default=limit, metavar="N", help=limit_help or f"at most N{shown}"
    )
    parser.add_argument("--config", help="config file (default: agent-health.config.py upward)")
    common.history_flag(parser)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    query = argparse.ArgumentParser(
        prog="agent-health history",
        description="The last runs, newest first (when, agent, pass rate [95% interval] with "
        "▲/▼ where the paired test finds a significant change from the agent's previous run, "
        "counts, cost, duration); with TEST (an id, or a regular expression of ids and "
        "titles), that test across runs and what differed at its latest break. Also: "
        "`agent-health history import REPORT.json...`, `agent-health history prune`.",
    )
    query.add_argument("test", nargs="?", help="a test's id, or a pattern of ids and titles")
    query.add_argument(
        "--html",
        metavar="DIR",
        help="write the history page DIR/index.html: the pass-rate trend, cost, tokens and "
        "latency, every test run by run, flaky tests, recent regressions (self-contained; "
        "opens from file://)",
    )
    _query_flags(
        query,
        limit=None,
        limit_help=f"at most N runs (default 20; with --html {HTML_RUNS}), or N outcomes "
        "of a TEST (default 20)",
    )
    imports = argparse.ArgumentParser(
        prog="agent-health history import",
        description="Record saved JSON reports (version 1 or 2) in the history; a report "
        "already there is left as it is.",
    )
    imports.add_argument("reports", nargs="+", metavar="REPORT.json")
    imports.add_argument(
        "--suite", help="which suite the reports are of (default: unknown, any suite's baseline)"
    )
    imports.add_argument("--config", help="config file (default: agent-health.config.py upward)")
    common.history_flag(imports)
    prune = argparse.ArgumentParser(
        prog="agent-health history prune",
        description="Delete old runs and their results from the history.",
    )
    prune.add_argument("--keep-days", type=float, metavar="N", help="delete runs older than N days")
    prune.add_argument("--keep-runs", type=int, metavar="N", help="keep only the newest N runs")
    prune.add_argument("--config", help="config file (default: agent-health.config.py upward)")
    common.history_flag(prune)
    return {"query": query, "import": imports, "prune": prune}


def command(argv: list[str], consoles: common.Consoles) -> int:
    """``agent-health history ...``: the subcommand's parser, then its handler."""
    parsers = _parsers()
    which = argv[0] if argv and argv[0] in SUBCOMMANDS else "query"
    args = parsers[which].parse_args(argv[1:] if which != "query" else argv)
    handler = {"query": _query, "import": _import, "prune": _prune}[which]
    return _reading(lambda: handler(args, consoles))


def _reading(body: Any) -> int:
    """Run ``body``; the history's errors become usage errors (one line, exit 2)."""
    from agent_health.history import errors

    try:
        code: int = body()
    except errors.HistoryError as err:
        raise common.UsageError(str(err)) from err
    return code


def _open(args: argparse.Namespace, *, create: bool = False) -> history.History:
    from agent_health import history

    return history.open_history(common.history_to_read(args), create=create)


def since(text: str | None, now: datetime | None = None) -> datetime | None:
    """``--since``: a date, an ISO time (UTC unless it says), or an age such as ``7d``."""
    if not text:
        return None
    age = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text)
    if age:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[age.group(2)]
        return (now or datetime.now(UTC)) - timedelta(**{unit: float(age.group(1))})
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise common.UsageError(
            f"--since {text!r}: give a date (2025-01-31), a time (2025-01-31T12:00) or an age "
            "(7d, 12h, 30m, 2w)"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _limit(value: int | None) -> None:
    if value is not None and value < 1:
        raise common.UsageError("--limit must be at least 1")


def _query(args: argparse.Namespace, consoles: common.Consoles) -> int:
    _limit(args.limit)
    after = since(args.since)
    if args.html is not None:
        return _page(args, after, consoles)
    if args.limit is None:
        args.limit = LIMIT
    with _open(args) as opened:
        if args.test:
            found = opened.timeline(
                args.test, agent=args.agent, label=args.label, since=after, limit=args.limit
            )
            if args.json:
                return _json([t.model_dump(mode="json") for t in found])
            for i, one in enumerate(found):
                if i:
                    consoles.out.print()
                show_test(consoles.out, one)
            return common.EXIT_OK
        runs = opened.runs(agent=args.agent, label=args.label, since=after, limit=args.limit)
        where = opened.location
    if args.json:
        return _json([r.model_dump(mode="json") for r in runs])
    show_runs(consoles.out, runs, where.shown)
    return common.EXIT_OK


def _page(args: argparse.Namespace, after: datetime | None, consoles: common.Consoles) -> int:
    """``history --html DIR``: the history page, and where it is."""
    from agent_health import history
    from agent_health.engine import visible

    if args.test:
        raise common.UsageError(
            f"--html draws every test; drop {args.test!r} (--label narrows the page to the tests "
            "carrying a label)"
        )
    if args.json:
        raise common.UsageError("--html writes a page and --json prints JSON: pass one")
    folder = Path(args.html)
    if folder.exists() and not folder.is_dir():
        raise common.UsageError(f"--html {folder}: a file is there; name a folder")
    with _open(args) as opened:
        try:
            written = history.write_page(
                folder,
                opened,
                runs=args.limit or HTML_RUNS,
                agent=args.agent,
                label=args.label,
                since=after,
            )
        except OSError as err:
            raise common.UsageError(
                f"--html {folder}: cannot write the page ({err.strerror or err})"
            ) from err
    for why in written.unreadable[:UNREADABLE_SHOWN]:
        consoles.err.print(
            visible.line(f"warning: a run's report is not linked: {why}"), markup=False
        )
    more = len(written.unreadable) - UNREADABLE_SHOWN
    if more > 0:
        consoles.err.print(f"warning: {more} more runs' reports are not linked", markup=False)
    at_hand = f"; {written.reports} with their report at hand" if written.reports else ""
    consoles.out.print(
        visible.line(
            f"history page: {written.path} ({_many(written.runs, 'run')} × "
            f"{_many(written.tests, 'test')}{at_hand})"
        ),
        markup=False,
    )
    consoles.out.print(visible.line(f"open it: {written.path.resolve().as_uri()}"), markup=False)
    return common.EXIT_OK


def _many(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _json(value: Any) -> int:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    return common.EXIT_OK


def short(uid: str) -> str:
    """A run's uid as the tables show it (:func:`agent_health.history.short`)."""
    from agent_health import history

    return history.short(uid)


def show_runs(console: Console, runs: list[history.Run], where: str) -> None:
    """The last runs as a table of 80 columns, newest first."""
    from rich.markup import escape
    from rich.table import Table

    from agent_health.engine import visible

    if not runs:
        console.print(f"no runs in the history {escape(where)} match", highlight=False)
        return
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name, justify in (
        ("when (UTC)", "left"),
        ("agent", "left"),
        ("pass rate", "left"),
        ("✓", "right"),
        ("✗", "right"),
        ("!", "right"),
        ("cost", "right"),
        ("time", "right"),
        ("run", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "agent")  # type: ignore[arg-type]
    for run in runs:
        agent = run.agent.label if run.agent is not None else "-"
        table.add_row(
            run.started_at.strftime("%m-%d %H:%M"),
            escape(visible.line(agent)),
            _rate(run),
            str(run.passed),
            str(run.failed + run.flaky),
            str(run.errored),
            _cost(run.cost_usd),
            _duration(run.duration_ms),
            short(run.uid) + (" *" if run.incomplete else ""),
        )
    console.print(table)
    notes = ["✓ passed, ✗ failed or flaky, ! errored"]
    if any(r.trend is not None and r.trend.mark for r in runs):
        notes.append("▲/▼ a significant change from the agent's previous run (paired test)")
    if any(r.incomplete for r in runs):
        notes.append("* interrupted or stopped by a budget")
    console.print(f"[dim]{escape('; '.join(notes))}[/]", highlight=False)


def _rate(run: history.Run) -> str:
    if run.pass_rate is None:
        return "n/a"
    text = f"{run.pass_rate:.0%}"
    interval = run.pass_rate_interval
    if interval is not None:
        text += f" [{interval.low:.0%}, {interval.high:.0%}]"
    trend = run.trend
    if trend is not None and trend.mark == "better":
        text += " [green]▲[/]"
    elif trend is not None and trend.mark == "worse":
        text += " [red]▼[/]"
    return text


def _cost(cost: float | None) -> str:
    if cost is None:
        return "-"
    return f"${cost:.2f}" if cost >= 0.01 else f"${cost:.4f}"


def _duration(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def spark(values: list[float | None]) -> str:
    """A line of block characters, one per value (``·`` for none), scaled to their range."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    step = (high - low) / (len(SPARKS) - 1) if high > low else 0
    return "".join(
        "·" if v is None else SPARKS[round((v - low) / step) if step else 0] for v in values
    )


def show_test(console: Console, found: history.TestHistory) -> None:
    """One test across runs: a status strip, durations and cost over time, its latest break
    and what differed."""
    from rich.markup import escape

    from agent_health.engine import visible

    def text(value: str) -> str:
        return escape(visible.line(value))

    labels = f"  [dim]{text(', '.join(found.labels))}[/]" if found.labels else ""
    console.print(f"[bold]{text(found.id)}[/]  ({text(found.file)}:{found.line}){labels}")
    outcomes = found.outcomes[-STRIP:]
    if not outcomes:
        console.print("  no outcome in the runs chosen", highlight=False)
        return
    strip = "".join(
        f"[{STATUS_STYLE.get(o.status, 'white')}]{STATUS_MARKS.get(o.status, '?')}[/]"
        for o in outcomes
    )
    more = (
        f" (newest {len(outcomes)} of {len(found.outcomes)})" if len(found.outcomes) > STRIP else ""
    )
    console.print(f"  outcomes, oldest → newest{more}: {strip}", highlight=False)
    counts = {s: sum(o.status == s for o in found.outcomes) for s in STATUS_MARKS}
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    console.print(f"  [dim]{said} over {len({o.run for o in found.outcomes})} runs[/]")
    durations = [float(o.duration_ms) for o in outcomes]
    console.print(
        f"  duration  {spark(list(durations))}  "
        f"{_duration(durations[0])} → {_duration(durations[-1])} "
        f"(min {_duration(min(durations))}, max {_duration(max(durations))})",
        highlight=False,
    )
    costs = [o.cost_usd for o in outcomes]
    if any(c is not None for c in costs):
        known = [c for c in costs if c is not None]
        console.print(
            f"  cost      {spark(costs)}  {_cost(known[0])} → {_cost(known[-1])}",
            highlight=False,
        )
    broke = found.broke
    if broke is None:
        last = found.outcomes[-1]
        console.print(f"  newest: {last.status} in run {short(last.run)}", highlight=False)
        return
    good, bad = broke.last_pass, broke.first_fail
    console.print(
        f"  [red]broke[/]: last passed in run {short(good.run)} "
        f"({good.started_at:%Y-%m-%d %H:%M}), first failed in run {short(bad.run)} "
        f"({bad.started_at:%Y-%m-%d %H:%M}, {bad.status})",
        highlight=False,
    )
    if broke.differences:
        console.print("  what differed:", highlight=False)
        for d in broke.differences:
            console.print(
                f"    {d.what}: {text(d.before or '-')} → {text(d.after or '-')}", highlight=False
            )
    else:
        console.print(
            "  nothing recorded differed (agent image and version, suite commit, the test's "
            "content, judge model): the agent answered otherwise",
            highlight=False,
        )
    for message in bad.messages:
        console.print(f"    {text(message)}", highlight=False)


def _import(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health import history
    from agent_health.engine import reports

    read = []
    for name in args.reports:
        path = Path(name)
        try:
            data = reports.read_report(path)
        except reports.ReportFileError as err:
            raise common.UsageError(str(err)) from err
        started = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        read.append((path, data, started))
    added = kept = 0
    with _open(args, create=True) as opened:
        for path, data, started in read:
            context = history.RunContext(
                source="local",
                suite=args.suite,
                report_path=str(path.resolve()),
                started_at=started,
            )
            for one in opened.record(data, context):
                added += one.new
                kept += not one.new
        where = opened.location.shown
    again = f", {kept} already there" if kept else ""
    consoles.out.print(
        f"imported {added} runs from {len(read)} reports into {where}{again}", markup=False
    )
    return common.EXIT_OK


def _prune(args: argparse.Namespace, consoles: common.Consoles) -> int:
    if args.keep_days is None and args.keep_runs is None:
        raise common.UsageError("history prune needs --keep-days N or --keep-runs N (or both)")
    if (args.keep_days is not None and args.keep_days < 0) or (
        args.keep_runs is not None and args.keep_runs < 0
    ):
        raise common.UsageError("--keep-days and --keep-runs must not be negative")
    with _open(args) as opened:
        gone = opened.prune(keep_days=args.keep_days, keep_runs=args.keep_runs)
        left, results = opened.count()
        where = opened.location.shown
    consoles.out.print(
        f"pruned {gone} runs from {where}; {left} runs ({results} results) left", markup=False
    )
    return common.EXIT_OK


def flaky_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    if args.runs < 2:
        raise common.UsageError("--runs must be at least 2 (a flip needs two runs)")
    _limit(args.limit)
    after = since(args.since)

    def body() -> int:
        with _open(args) as opened:
            found = opened.flaky(
                runs=args.runs, agent=args.agent, label=args.label, since=after, limit=args.limit
            )
        if args.quarantine:
            _write_quarantine(Path(args.quarantine), found, consoles)
        if args.json:
            return _json([f.model_dump(mode="json") for f in found])
        show_flaky(consoles.out, found, args.runs)
        return common.EXIT_OK

    return _reading(body)


def show_flaky(console: Console, found: list[history.Flaky], runs: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from agent_health.engine import visible

    if not found:
        console.print(f"no flaky test over the last {runs} runs", highlight=False)
        return
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("flips", justify="right", no_wrap=True)
    table.add_column("fail rate [95%]", no_wrap=True)
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("now", no_wrap=True)
    table.add_column("test")
    table.add_column("agent")
    for f in found:
        interval = f.failure_rate_interval
        table.add_row(
            str(f.flips),
            f"{f.failure_rate:.0%} [{interval.low:.0%}, {interval.high:.0%}]",
            str(f.runs),
            STATUS_MARKS.get(f.last_status, "?"),
            escape(visible.line(f.id)),
            escape(visible.line(f.agent.label if f.agent else "-")),
        )
    console.print(table)
    console.print(
        f"[dim]flips between pass and fail over the last {runs} runs, per agent identity and "
        "test content (neither changed); fail rate with its Wilson interval[/]"
    )


def _write_quarantine(path: Path, found: list[history.Flaky], consoles: common.Consoles) -> None:
    from agent_health.engine import loading

    try:
        written = loading.write_quarantine(
            path,
            [
                loading.QuarantineEntry(
                    id=f.id,
                    flips=f.flips,
                    failure_rate=f.failure_rate,
                    agent=f.agent.label if f.agent else None,
                )
                for f in found
            ],
        )
    except OSError as err:
        raise common.UsageError(f"cannot write the quarantine file {path}: {err}") from err
    consoles.err.print(
        f"quarantine: {len(found)} tests written to {written}; `agent-health run --quarantine "
        f"{path}` reports them apart",
        markup=False,
    )
