"""Live progress while tests run, and the summary at the end.

On a terminal: a progress bar with counts. Elsewhere (CI logs, pipes): one plain line per
finished test. The summary lists every test that did not pass with its reason.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent_health.engine.report import RunReport
from agent_health.sdk.results import TestResult

MARK = {"passed": "✓", "failed": "✗", "errored": "!", "skipped": "-", "flaky": "~"}
COLOR = {
    "passed": "green",
    "failed": "red",
    "errored": "yellow",
    "skipped": "dim",
    "flaky": "magenta",
}
CAPTURE_LINES = 40  # lines of a failed test's captured output shown (all are in the JSON)
TABLE_LIMIT = 50


def _line(result: TestResult) -> str:
    repeat = f" [repeat {result.repeat}]" if result.repeat else ""
    extra = ""
    if result.status == "errored" and result.error:
        extra = f" — {_cause_word(result.cause)}{result.error}"
    elif result.status == "skipped" and result.skip_reason:
        extra = f" — {result.skip_reason}"
    elif result.status == "flaky":
        extra = f" — passed on try {len(result.attempts)} of {len(result.attempts)}"
    return (
        f"{MARK[result.status]} {result.status:<7} {result.file} › {result.title}{repeat} "
        f"({result.duration_ms:.0f} ms){extra}"
    )


class LiveProgress:
    """Prints progress as tests finish."""

    def __init__(self, console: Console, total: int, *, list_lines: bool = False) -> None:
        self.console = console
        self.total = total
        self.counts: Counter[str] = Counter()
        self.live = console.is_terminal and not list_lines
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> LiveProgress:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]running"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self._counts(), total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _counts(self) -> str:
        return " ".join(
            f"[{COLOR[s]}]{self.counts[s]} {s}[/]"
            for s in ("passed", "flaky", "failed", "errored", "skipped")
            if self.counts[s]
        )

    def on_test_end(self, result: TestResult) -> None:
        self.counts[result.status] += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=self._counts())
            if result.status in ("failed", "errored", "flaky"):
                self._progress.console.print(f"[{COLOR[result.status]}]{escape(_line(result))}")
        else:
            # A plain line, as console.print(markup=False, highlight=False, soft_wrap=True)
            # would print it, without rendering it (a fifth of a trivial test's cost).
            out = self.console.file
            out.write(_line(result) + "\n")
            out.flush()


def summary(console: Console, report: RunReport, *, hints: list[str] | None = None) -> None:
    """The table of results, the reasons of what did not pass, and the totals."""
    tests = report.tests
    shown = tests if len(tests) <= TABLE_LIMIT else [t for t in tests if t["status"] != "passed"]
    if shown:
        table = Table(title="agent-health results", show_lines=False)
        with_notes = any(_notes(t["metrics"] or {}) for t in shown)
        for column, justify in (
            ("status", "left"),
            ("test", "left"),
            ("score", "right"),
            ("time", "right"),
            ("tokens", "right"),
            ("cost", "right"),
            ("tools", "right"),
            *((("notes", "left"),) if with_notes else ()),
        ):
            table.add_column(column, justify=justify)
        for t in shown:
            metrics = t["metrics"] or {}
            title = f"{t['file']} › {t['name']}" + (f" [r{t['repeat']}]" if t["repeat"] else "")
            table.add_row(
                f"[{COLOR[t['status']]}]{MARK[t['status']]} {t['status']}[/]"
                + (f" ({t['cause']})" if t.get("cause") else ""),
                escape(title),
                "" if t["score"] is None else f"{t['score']:.2f}",
                f"{t['duration_ms'] / 1000:.2f}s",
                _count(metrics, "total_tokens"),
                _money(metrics.get("cost_usd")),
                _count(metrics, "tool_calls"),
                *((escape(_notes(metrics)),) if with_notes else ()),
            )
        console.print(table)
        if len(shown) < len(tests):
            console.print(f"({len(tests) - len(shown)} passed tests not listed)")
    for t in tests:
        if t["status"] not in ("failed", "errored", "flaky"):
            continue
        console.print(
            f"\n[{COLOR[t['status']]}]{t['status'].upper()}[/] {escape(t['id'])}"
            + (f" [repeat {t['repeat']}]" if t["repeat"] else "")
        )
        _attempts(console, t)
        if t["status"] == "flaky":
            continue
        if t["error"]:
            why = _cause_word(t.get("cause"))
            console.print(f"  error: {escape(why + t['error'])}", highlight=False)
        for s in t["signals"]:
            if s["role"] == "gate" and s["passed"] is False:
                detail = s["reasoning"] or json.dumps(s["evidence"], default=str)
                where = f" ({s['location']})" if s["location"] else ""
                console.print(f"  ✗ {escape(s['name'])}{where}: {escape(detail)}", highlight=False)
        _captured(console, t)
    _insights(console, shown)
    s = report.summary
    _labels(console, report)
    for error in s.load_errors:
        console.print(f"[red]load error[/] {escape(error)}", highlight=False)
    for hint in hints or []:
        console.print(f"[dim]hint: {escape(hint)}[/]")
    causes = [f"{n} {cause}" for cause, n in s.errored_by_cause.items() if n]
    parts = [
        f"{s.passed} passed",
        *([f"{s.flaky_count} flaky"] if s.flaky_count else []),
        f"{s.failed} failed",
        f"{s.errored} errored" + (f" ({', '.join(causes)})" if causes else ""),
        f"{s.skipped} skipped",
    ]
    rate = "n/a" if s.pass_rate is None else f"{s.pass_rate:.0%}"
    score = "n/a" if s.score is None else f"{s.score:.2f}"
    cost = "" if s.cost_usd is None else f", {_money(s.cost_usd)}"
    unpriced = f" ({s.unpriced} runs unpriced)" if s.cost_usd is not None and s.unpriced else ""
    console.print(
        f"\n{', '.join(parts)} — pass rate {rate}, score {score}, "
        f"{_tokens(s.tokens, s.tokens_unreported)}{cost}{unpriced}, {s.duration_ms / 1000:.2f}s"
    )
    if s.repeats > 1:
        console.print(
            f"pass@{s.repeats} {_pct(s.pass_at_k)}, pass^{s.repeats} {_pct(s.pass_hat_k)}"
            + (f"; flaky: {', '.join(s.flaky)}" if s.flaky else "")
        )
    if s.recommendations:
        console.print("across the suite:")
        for rec in s.recommendations:
            console.print(f"  {rec.tests} tests: {escape(rec.text)}", highlight=False)
    if s.interrupted:
        console.print(f"[yellow]interrupted[/]: {s.not_run} tests never started")
    elif s.stopped:
        console.print(f"[yellow]{escape(s.stopped)}[/]: {s.not_run} tests never started")


def _attempts(console: Console, test: dict[str, Any]) -> None:
    """The tries of a retried test: what each came to."""
    tries = test.get("attempts") or []
    for n, attempt in enumerate(tries, 1):
        reason = attempt.get("reason")
        why = f" — {_cause_word(attempt.get('cause'))}{reason}" if reason else ""
        console.print(
            f"  try {n} of {len(tries)}: {attempt['status']}{escape(why)}", highlight=False
        )


def _captured(console: Console, test: dict[str, Any]) -> None:
    """What the body printed, under its failure (the last lines; the JSON report has all)."""
    for stream in ("stdout", "stderr"):
        text = test.get(stream)
        if not text:
            continue
        lines = text.rstrip("\n").splitlines()
        many = len(lines) > CAPTURE_LINES
        shown = f" (last {CAPTURE_LINES} of {len(lines)} lines)" if many else ""
        console.print(f"  captured {stream}{shown}:", highlight=False)
        for line in lines[-CAPTURE_LINES:]:
            console.print(f"    {line}", markup=False, highlight=False)


def _count(metrics: dict[str, Any], key: str) -> str:
    """A metric for the table: blank when the agent never ran, ``n/a`` when not reported."""
    if key not in metrics:
        return ""
    value = metrics[key]
    return "n/a" if value is None else str(value)


def _tokens(tokens: int | None, unreported: int) -> str:
    """``1234 tokens``, saying how many runs reported none (their tokens are unknown)."""
    if tokens is None:
        return "tokens not reported" if unreported else "0 tokens"
    return f"{tokens} tokens" + (f" ({unreported} runs reported none)" if unreported else "")


def _cause_word(cause: str | None) -> str:
    """``agent error: `` before an error message — whom it blames (counts in the pass rate
    only when it is the agent)."""
    return f"{cause} error: " if cause else ""


def _money(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


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


def _insights(console: Console, tests: list[dict[str, Any]]) -> None:
    """Each test's insights: the summary, why, and what to change (or the insights error)."""
    for t in tests:
        found = t.get("insights")
        if not found:
            continue
        head = f"\n[bold]insights[/] {escape(t['id'])}" + (
            f" [repeat {t['repeat']}]" if t["repeat"] else ""
        )
        console.print(head)
        if found.get("error"):
            console.print(f"  [yellow]insights error:[/] {escape(str(found['error']))}")
            continue
        console.print(f"  {escape(str(found.get('summary', '')))}", highlight=False)
        if found.get("why"):
            console.print(f"  why: {escape(str(found['why']))}", highlight=False)
        for rec in found.get("recommendations") or []:
            console.print(f"  → {escape(str(rec))}", highlight=False)


def _labels(console: Console, report: RunReport) -> None:
    labels = report.summary.labels
    if not labels:
        return
    table = Table(title="by label", show_lines=False)
    for column in ("label", "passed", "failed", "errored", "skipped", "pass rate", "score"):
        table.add_column(column, justify="left" if column == "label" else "right")
    for name, stats in labels.items():
        table.add_row(
            escape(name),
            str(stats.passed),
            str(stats.failed),
            str(stats.errored),
            str(stats.skipped),
            _pct(stats.pass_rate),
            "n/a" if stats.score is None else f"{stats.score:.2f}",
        )
    console.print(table)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
