"""The summary's two tables, made to fit the terminal (80 columns and up): the results, one
row per test, and the breakdown by label.

In the results only the title wraps; every other cell keeps to one line, and a column no
test has a value for is left out. The label table leaves out a count that is zero for every
label; where it still does not fit, the intervals, then shortens the counts' heads, then
cuts labels in the middle, keeping their ends so that two labels never read the same. Its
``scored`` column says how many results the score is the mean of: errored and skipped tests
have no score, so a label whose tests mostly errored may show a low pass rate beside a high
score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from agent_health.engine import reports, visible
from agent_health.engine.reporters import terminal_style as style

MIN_LABEL = 12  # a label is never cut shorter than this (it wraps instead)
MIN_TITLE = 30  # below this, a results row's notes move under its title
LONG: dict[str, str] = {}
SHORT = {"passed": "pass", "failed": "fail", "errored": "error", "skipped": "skip"}
"""The count columns' heads when the long ones leave a label too little room."""


def _table(title: str | None = None) -> Table:
    """A table drawn with a rule under its head and no frame, two spaces between columns:
    little of the width goes to borders."""
    return Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0)
    )


def results(console: Console, shown: list[dict[str, Any]], repeats: int, title: str) -> None:
    """One row per (test, repeat): status, title, score, time, tokens, cost, tools, a
    conversation's turns and why it ended, notes."""
    rows: list[dict[str, Text | str]] = []
    for t in shown:
        metrics = t["metrics"] or {}
        label = reports.repeat_label(t["repeat"], repeats)
        name = f"{t['file']} › {t['name']}" + (f" {label}" if label else "")
        name += f" [{t['agent']}]" if t.get("agent") else ""
        status = t["status"]
        rows.append(
            {
                "status": Text(
                    f"{style.MARK[status]} {status}"
                    + (f" ({visible.line(t['cause'])})" if t.get("cause") else ""),
                    style=style.COLOR[status],
                ),
                "test": Text(visible.line(name)),
                "score": "" if t["score"] is None else f"{t['score']:.2f}",
                "time": f"{t['duration_ms'] / 1000:.2f}s",
                "tokens": _count(metrics, "total_tokens"),
                "cost": style.money(metrics.get("cost_usd")),
                "tools": _count(metrics, "tool_calls"),
                "turns": _turns(t),
                "notes": _notes(metrics),
            }
        )
    always = ("status", "test", "score", "time")
    columns = [c for c in rows[0] if c in always or any(_has(r[c]) for r in rows)]
    table = _results_table(title, rows, columns)
    if "notes" in columns and _title_room(console, title, rows, columns) < MIN_TITLE:
        # too narrow for a notes column: each test's notes go under its title instead
        for r in rows:
            if r["notes"]:
                r["test"] = Text.assemble(r["test"], "\n", (str(r["notes"]), "dim"))
        table = _results_table(title, rows, [c for c in columns if c != "notes"])
    console.print(table)


def _results_table(title: str, rows: list[dict[str, Text | str]], columns: list[str]) -> Table:
    table = _table(title)
    for column in columns:
        if column == "test":
            table.add_column(column, overflow="fold", ratio=1)
        else:
            right = column not in ("status", "turns", "notes")
            table.add_column(column, justify="right" if right else "left", no_wrap=True)
    for r in rows:
        table.add_row(*(r[c] for c in columns))
    return table


def _title_room(
    console: Console, title: str, rows: list[dict[str, Text | str]], columns: list[str]
) -> int:
    """The width the titles would get: what the other columns leave of the console's."""
    untitled = [{**r, "test": ""} for r in rows]
    return console.width - _natural_width(console, _results_table(title, untitled, columns))


def _has(cell: Any) -> bool:
    """Whether a cell tells something: a value, not a blank or "not reported"."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return text not in ("", "n/a")


def _count(metrics: dict[str, Any], key: str) -> str:
    """A metric for the table: blank when the agent never ran, ``n/a`` when not reported."""
    if key not in metrics:
        return ""
    value = metrics[key]
    return "n/a" if value is None else str(value)


def _turns(test: dict[str, Any]) -> str:
    """A conversation's turns and why it ended, ``3 goal-met``; blank for a single run."""
    turns = test.get("turns") or []
    if not turns:
        return ""
    reason = (test.get("ended") or {}).get("reason")
    return visible.line(f"{len(turns)} {reason}" if reason else str(len(turns)))


def _notes(metrics: dict[str, Any]) -> str:
    """The tool-use smells worth a glance: duplicates, retries, ignored errors."""
    notes = []
    for key, word in (
        ("redundant_tool_calls", "redundant"),
        ("retries", "retried"),
        ("ignored_tool_errors", "ignored errors"),
    ):
        if metrics.get(key):
            notes.append(f"{metrics[key]} {word}")
    return ", ".join(notes)


def labels(console: Console, report: reports.RunReport) -> None:
    """How the tests of each label did; fitted to the console's width (see the module)."""
    stats = report.summary.labels
    if not stats:
        return
    counts = [
        c
        for c in ("passed", "failed", "errored", "skipped")
        if c in ("passed", "failed") or any(getattr(s, c) for s in stats.values())
    ]
    names = [visible.line(name) for name in stats]
    both, rate_only, none = ("pass rate", "score"), ("pass rate",), ()
    for intervals, heads in ((both, LONG), (rate_only, LONG), (none, LONG), (none, SHORT)):
        table = _label_table(report, names, counts, intervals, heads)
        if _natural_width(console, table) <= console.width:
            break
    else:
        others = _label_table(report, [""] * len(names), counts, intervals, heads)
        room = max(MIN_LABEL, console.width - _natural_width(console, others))
        table = _label_table(report, cut(names, room), counts, intervals, heads)
    console.print(table)
    console.print(
        "[dim]score: the mean over the scored results only; errored and skipped tests have none[/]",
        highlight=False,
    )


def _natural_width(console: Console, table: Table) -> int:
    """How wide ``table`` is with room to spare (a measure within the console is capped)."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


def _label_table(
    report: reports.RunReport,
    names: Sequence[str],
    counts: Sequence[str],
    intervals: Sequence[str],
    heads: dict[str, str],
) -> Table:
    table = _table("by label")
    table.add_column("label", overflow="fold")
    for column in (*counts, "pass rate", "score", "scored"):
        table.add_column(heads.get(column, column), justify="right", no_wrap=True)
    for name, s in zip(names, report.summary.labels.values(), strict=True):
        rate = style.pct(s.pass_rate)
        score = style.score(s.score)
        if "pass rate" in intervals:
            rate += style.ci(s.pass_rate_interval)
        if "score" in intervals:
            score += style.ci(s.score_interval, ".2f")
        results = s.passed + s.failed + s.errored + s.skipped + s.flaky
        table.add_row(
            Text(name),
            *(str(getattr(s, c)) for c in counts),
            rate,
            score,
            f"{s.scored}/{results}",
        )
    return table


def cut(names: Sequence[str], width: int) -> list[str]:
    """``names`` cut to ``width`` cells in the middle (``difficu…y:hard``), keeping more of
    the end (where labels that share a prefix differ); a name whose cut would read the same
    as another's is kept whole (its cell wraps)."""

    def one(name: str) -> str:
        if cell_len(name) <= width:
            return name
        tail = (width - 1) - (width - 1) // 3
        head = (width - 1) - tail
        return name[:head] + "…" + name[len(name) - tail :]

    short = [one(n) for n in names]
    seen: dict[str, int] = {}
    for s in short:
        seen[s] = seen.get(s, 0) + 1
    return [s if seen[s] == 1 else n for s, n in zip(short, names, strict=True)]
