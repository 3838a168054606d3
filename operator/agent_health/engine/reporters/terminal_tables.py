"""The summary's two tables, made to fit the terminal (80 columns and up): the results and
the breakdown by label.

The results keep one line per row at any width, a title too long for its room cut with an
ellipsis. When the titles have room beside the details (tokens, cost, tools, turns, notes),
each (test, repeat) is a row of its own; a column no test has a value for is left out.
Otherwise (a CI log's 80 columns) each test is one row: its title first, its repeats folded
into one cell (``2/3 passed ●●○``), its mean score and time; the details go under the
failures (:mod:`.terminal_failures`) and are in every report.

The label table leaves out a count that is zero for every label; where it still does not
fit, the intervals, then shortens the counts' heads, then cuts labels in the middle, keeping
their ends so that two labels never read the same. Its ``scored`` column says how many
results the score is the mean of: errored and skipped tests have no score, so a label whose
tests mostly errored may show a low pass rate beside a high score.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment, SegmentLines
from rich.table import Table
from rich.text import Text

from agent_health import statuses
from agent_health.engine import reports, visible
from agent_health.engine.reporters import terminal_style as style

MIN_LABEL = 12  # a label is never cut shorter than this (it wraps instead)
LONG: dict[str, str] = {}
SHORT = {"passed": "pass", "failed": "fail", "errored": "error", "skipped": "skip"}
"""The count columns' heads when the long ones leave a label too little room."""

ALWAYS_SHOWN = ("passed", "failed")
"""The count columns shown even at zero; the others only when a row has one."""


def _table(title: str | None = None) -> Table:
    """A table drawn with a rule under its head and no frame, two spaces between columns:
    little of the width goes to borders."""
    return Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0)
    )


def results(console: Console, tests: list[dict[str, Any]], repeats: int, title: str) -> bool:
    """The results, in the layout the console's width allows; ``True`` when it was the
    narrow one (the details it leaves out then go under each failure).

    Wide: one row per (test, repeat) with its status, title, score, time, tokens, cost, tools,
    a conversation's turns and notes, used when the other cells leave the titles
    :data:`WIDE_TITLE` cells (or their longest whole). Narrow: one row per test, its repeats
    folded into one cell (``2/3 passed ●●○``), the title first, then score and time. Either
    way a title too long for its room is cut with an ellipsis, so each row is one line. Past
    :data:`TABLE_LIMIT` rows only those that did not all pass are listed.
    """
    # Past the limit only what did not pass is listed: no row is made for the rest.
    listed = tests if len(tests) <= TABLE_LIMIT else [t for t in tests if t["status"] != "passed"]
    wide = _wide_rows(listed, repeats)
    if not wide:  # past the limit, and all passed
        _not_listed(console, len(tests), "results")
        return False
    columns = _wide_columns(wide)
    names = [r["test"] for r in wide]
    label = max(cell_len(r["repeat"]) for r in wide)  # `` [2/3]``, after the title
    # One run a test (no repeat after a title): a table that fits with the titles whole is
    # what the measure below chooses (wide, nothing cut), so it is laid out once and printed.
    if not label:
        laid, width = _laid(console, _wide_table(title, wide, columns, names))
        if width <= console.width:
            console.print(laid)
            _not_listed(console, len(tests) - len(wide), "results")
            return False
    # the blank titles' column is as wide as its head: that much is the titles' room too
    blank = [""] * len(wide)
    others = _natural_width(console, _wide_table(title, wide, columns, blank)) - len("test")
    room = console.width - others
    if room - label >= min(WIDE_TITLE, max(cell_len(n) for n in names)):
        cut = cut_titles(names, room - label)
        shown = [n + r["repeat"] for n, r in zip(cut, wide, strict=True)]
        console.print(_wide_table(title, wide, columns, shown))
        _not_listed(console, len(tests) - len(wide), "results")
        return False
    groups = _narrow_rows(tests)
    shown = _shown(groups, lambda g: g.passed == len(g.runs))
    console.print(_narrow_table(console, title, shown))
    marks = sorted({t["status"] for g in shown for t in g.runs}, key=list(DOT).index)
    if any(len(g.runs) > 1 for g in shown) and any(len(g.runs) <= MAX_DOTS for g in shown):
        key = "  ".join(f"{DOT[m]} {m}" for m in marks)
        console.print(f"[dim]each repeat in order: {key}[/]", highlight=False)
    _not_listed(console, len(groups) - len(shown), "tests")
    return True


TABLE_LIMIT = 50
"""Rows past which a table lists only what did not pass (the reports list everything)."""
DOT = {"passed": "●", "flaky": "◐", "failed": "○", "errored": "◌", "skipped": "·"}
"""A repeat's mark in a narrow row, in repeat order: ``●●○`` passed twice, then failed."""
MAX_DOTS = 10
"""Repeats past which a narrow row counts its outcomes instead of drawing a mark for each."""
WIDE_TITLE = 50
"""The wide layout is used when it leaves the titles this many cells (or their longest
whole); narrower, the narrow one."""
MIN_CUT = 16
"""A title is never cut shorter than this, however narrow the console."""


def _shown(rows: list[Any], passed: Any) -> list[Any]:
    return rows if len(rows) <= TABLE_LIMIT else [r for r in rows if not passed(r)]


def _not_listed(console: Console, count: int, what: str) -> None:
    if count:
        console.print(f"({count} passed {what} not listed)")


def _wide_rows(tests: list[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for t in tests:
        metrics = t["metrics"] or {}
        label = reports.repeat_label(t["repeat"], repeats)
        status = t["status"]
        rows.append(
            {
                "status": Text(
                    f"{style.MARK[status]} {status}"
                    + (f" ({visible.line(t['cause'])})" if t.get("cause") else ""),
                    style=style.COLOR[status],
                ),
                "test": visible.line(_name(t)),
                "repeat": f" {label}" if label else "",
                "score": "" if t["score"] is None else f"{t['score']:.2f}",
                "time": f"{t['duration_ms'] / 1000:.2f}s",
                "tokens": _count(metrics, "total_tokens"),
                "cost": style.money(metrics.get("cost_usd")),
                "tools": _count(metrics, "tool_calls"),
                "turns": _turns(t),
                "notes": notes(metrics),
            }
        )
    return rows


WIDE = ("status", "test", "score", "time", "tokens", "cost", "tools", "turns", "notes")
ALWAYS = ("status", "test", "score", "time")


def _wide_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The columns some row has a value for (status, test, score and time always)."""
    return [c for c in WIDE if c in ALWAYS or any(_has(r[c]) for r in rows)]


def _wide_table(
    title: str, rows: list[dict[str, Any]], columns: list[str], names: Sequence[str]
) -> Table:
    """The wide results, each row's title (and repeat) from ``names`` (blanks: to measure
    what the other columns take)."""
    table = _table(title)
    for column in columns:
        right = column not in ("status", "test", "turns", "notes")
        table.add_column(column, justify="right" if right else "left", no_wrap=True)
    for name, r in zip(names, rows, strict=True):
        table.add_row(*(Text(name) if c == "test" else r[c] for c in columns))
    return table


@dataclasses.dataclass(eq=False, repr=False)
class _Group:
    """One test's repeats, for a narrow row."""

    name: str
    runs: list[dict[str, Any]]

    @property
    def passed(self) -> int:
        return sum(t["status"] == "passed" for t in self.runs)


def _narrow_rows(tests: list[dict[str, Any]]) -> list[_Group]:
    """The tests, each with its repeats in order, named by title (and agent, in a matrix);
    ``file › title`` only where two files hold the same title."""
    groups: dict[str, _Group] = {}
    for t in tests:
        key = f"{t['id']}\0{t.get('agent') or ''}"
        if key not in groups:
            groups[key] = _Group(visible.line(_name(t, file=False)), [])
        groups[key].runs.append(t)
    seen = Counter(g.name for g in groups.values())
    for g in groups.values():
        g.runs.sort(key=lambda t: t["repeat"])
        if seen[g.name] > 1:
            g.name = visible.line(_name(g.runs[0]))
    return list(groups.values())


def _narrow_table(console: Console, title: str, groups: list[_Group]) -> Table:
    """One line per test: its title cut to the room the other cells leave, its outcome over
    its repeats, its mean score and time."""
    cells = [(_outcome(g), _mean_score(g), _mean_time(g)) for g in groups]
    time_head = "time" if all(len(g.runs) == 1 for g in groups) else "mean time"

    def build(names: Sequence[str]) -> Table:
        table = _table(title)
        table.add_column("test", no_wrap=True)
        table.add_column("result", no_wrap=True)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column(time_head, justify="right", no_wrap=True)
        for name, (outcome, score, time) in zip(names, cells, strict=True):
            table.add_row(Text(name), outcome, score, time)
        return table

    names = [g.name for g in groups]
    room = console.width - (_natural_width(console, build([""] * len(groups))) - len("test"))
    return build(cut_titles(names, max(MIN_CUT, room)))


def _outcome(group: _Group) -> Text:
    """``✓ passed`` for one run; ``2/3 passed ●●○`` (each repeat's mark, in order) for
    several; ``12/20 passed, 8 failed`` past :data:`MAX_DOTS` repeats."""
    runs = group.runs
    worst = next(
        (
            s
            for s in ("failed", "errored", "flaky", "skipped")
            if any(t["status"] == s for t in runs)
        ),
        "passed",
    )
    if len(runs) == 1:
        t = runs[0]
        cause = f" ({visible.line(t['cause'])})" if t.get("cause") else ""
        return Text(f"{style.MARK[t['status']]} {t['status']}{cause}", style=style.COLOR[worst])
    text = Text(f"{group.passed}/{len(runs)} passed", style=style.COLOR[worst])
    if len(runs) <= MAX_DOTS:
        text.append(" ")
        for t in runs:
            text.append(DOT[t["status"]], style=style.COLOR[t["status"]])
        return text
    counts = Counter(t["status"] for t in runs if t["status"] != "passed")
    for status in ("failed", "errored", "flaky", "skipped"):
        if counts[status]:
            text.append(f", {counts[status]} {status}")
    return text


def _mean_score(group: _Group) -> str:
    scores = [t["score"] for t in group.runs if t["score"] is not None]
    return f"{sum(scores) / len(scores):.2f}" if scores else ""


def _mean_time(group: _Group) -> str:
    return f"{sum(t['duration_ms'] for t in group.runs) / len(group.runs) / 1000:.2f}s"


def _name(test: dict[str, Any], *, file: bool = True) -> str:
    """``file › title`` (or the title alone), and its agent in an agent matrix."""
    name = f"{test['file']} › {test['name']}" if file else str(test["name"])
    return name + (f" [{test['agent']}]" if test.get("agent") else "")


def cut_titles(names: Sequence[str], width: int) -> list[str]:
    """``names`` cut to ``width`` cells with an ellipsis at the end; where two different names
    would then read the same, cut in the middle instead (keeping the end, where they differ),
    and where even that is the same, whole (a name repeated, a test's repeats, is one)."""

    def end(name: str) -> str:
        if cell_len(name) <= width:
            return name
        kept = ""
        for char in name:
            if cell_len(kept + char) > width - 1:
                break
            kept += char
        return kept + "…"

    distinct = list(dict.fromkeys(names))
    short = {n: end(n) for n in distinct}
    seen = Counter(short.values())
    middle = {n: s if seen[s] == 1 else cut([n], width)[0] for n, s in short.items()}
    again = Counter(middle.values())
    return [middle[n] if again[middle[n]] == 1 else n for n in names]


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


def notes(metrics: dict[str, Any]) -> str:
    """The tool-use smells worth a glance: duplicates, retries, ignored errors."""
    found = []
    for key, word in (
        ("redundant_tool_calls", "redundant"),
        ("retries", "retried"),
        ("ignored_tool_errors", "ignored errors"),
    ):
        if metrics.get(key):
            found.append(f"{metrics[key]} {word}")
    return ", ".join(found)


def details(test: dict[str, Any]) -> str:
    """What a wide row shows of one (test, repeat) besides its status, title and score, in
    words: ``0.42s, 1234 tokens, $0.0012, 5 tools, 3 turns goal-met, 2 redundant``."""
    metrics = test["metrics"] or {}
    tokens, tools = _count(metrics, "total_tokens"), _count(metrics, "tool_calls")
    turns = test.get("turns") or []
    reason = (test.get("ended") or {}).get("reason")
    parts = [
        f"{test['duration_ms'] / 1000:.2f}s",
        "" if not tokens else "tokens not reported" if tokens == "n/a" else f"{tokens} tokens",
        style.money(metrics.get("cost_usd")),
        "" if not tools else "tools not reported" if tools == "n/a" else f"{tools} tools",
        visible.line(f"{len(turns)} turns" + (f" {reason}" if reason else "")) if turns else "",
        notes(metrics),
    ]
    return ", ".join(p for p in parts if p)


def labels(console: Console, report: reports.RunReport) -> None:
    """How the tests of each label did; fitted to the console's width (see the module)."""
    stats = report.summary.labels
    if not stats:
        return
    counts = [
        c for c in statuses.ENDED if c in ALWAYS_SHOWN or any(getattr(s, c) for s in stats.values())
    ]
    names = [visible.line(name) for name in stats]
    both, rate_only, none = ("pass rate", "score"), ("pass rate",), ()
    for intervals, heads in ((both, LONG), (rate_only, LONG), (none, LONG), (none, SHORT)):
        laid, width = _laid(console, _label_table(report, names, counts, intervals, heads))
        if width <= console.width:
            console.print(laid)
            break
    else:
        others = _label_table(report, [""] * len(names), counts, intervals, heads)
        room = max(MIN_LABEL, console.width - _natural_width(console, others))
        console.print(_label_table(report, cut(names, room), counts, intervals, heads))
    console.print(
        "[dim]score: the mean over the scored results only; errored and skipped tests have none[/]",
        highlight=False,
    )


def _natural_width(console: Console, table: Table) -> int:
    """How wide ``table`` is with room to spare (a measure within the console is capped)."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


def _laid(console: Console, table: Table) -> tuple[SegmentLines, int]:
    """``table`` laid out once with the options ``console.print`` gives it (a soft-wrapping
    console's: no wrapping, no cropping), with room to spare, and how wide it is.

    A table that fits the console is laid out by ``print`` just so (its columns at their
    natural widths), so these lines are printed as they are: measuring the table to see that
    it fits, then printing it, measured its every cell twice more and laid it out again
    (about 4 M instructions a table, issue #40)."""
    soft = console.soft_wrap
    options = console.options.update(
        justify=None,
        overflow="ignore" if soft else None,
        no_wrap=True if soft else None,
        markup=None,
        highlight=None,
    )
    lines = console.render_lines(table, options.update_width(1 << 16), pad=False)
    width = max(Segment.get_line_length(line) for line in lines)
    return SegmentLines(lines, new_lines=True), width


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
