# Over 350 lines: everything the terminal prints (progress, table, failures with their tries and
# printed output, legend, labels, insights) reads in one place, in the order it is printed.
"""Live progress while tests run, and the summary at the end.

On a terminal: a progress bar with counts. Elsewhere (CI logs, pipes): one plain line per
finished test. The summary lists every test that did not pass with its reasons, once per
test (the failing repeats named), and ends with the totals and a legend of the numbers.
With ``--repeat k`` every line names its repeat the same way: ``[2/3]``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent_health.engine import entries, uncertainty
from agent_health.engine.report import LEGEND, RunReport
from agent_health.engine.reporters import terminal_budget, terminal_matrix
from agent_health.sdk.results import TestResult

if TYPE_CHECKING:
    from rich.progress import Progress

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


def _line(result: TestResult, repeats: int = 1) -> str:
    label = entries.repeat_label(result.repeat, repeats)
    repeat = f" {label}" if label else ""
    repeat += f" [{result.agent}]" if result.agent else ""
    extra = ""
    if result.status == "errored" and result.error:
        extra = f" — {_cause_word(result.cause)}{result.error}"
    elif result.status == "skipped" and result.skip_reason:
        extra = f" — {result.skip_reason}"
    elif result.status == "flaky":
        extra = f" — passed on try {len(result.attempts)} of {len(result.attempts)}"
    replayed = " [replayed]" if result.replayed else ""
    return (
        f"{MARK[result.status]} {result.status:<7} {result.file} › {result.title}{repeat} "
        f"({result.duration_ms:.0f} ms){replayed}{extra}"
    )


class LiveProgress:
    """Prints progress as tests finish."""

    def __init__(
        self, console: Console, total: int, *, list_lines: bool = False, repeats: int = 1
    ) -> None:
        self.console = console
        self.total = total
        self.repeats = repeats
        self.counts: Counter[str] = Counter()
        self.live = console.is_terminal and not list_lines
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> LiveProgress:
        if self.live:
            # Only a terminal shows the bar: CI logs and pipes never load it.
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

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
                line = escape(_line(result, self.repeats))
                self._progress.console.print(f"[{COLOR[result.status]}]{line}")
        else:
            # A plain line, as console.print(markup=False, highlight=False, soft_wrap=True)
            # would print it, without rendering it (a fifth of a trivial test's cost).
            out = self.console.file
            out.write(_line(result, self.repeats) + "\n")
            out.flush()


def summary(console: Console, report: RunReport, *, hints: list[str] | None = None) -> None:
    """The table of results, the reasons of what did not pass, and the totals."""
    tests = report.tests
    k = report.summary.repeats
    shown = tests if len(tests) <= TABLE_LIMIT else [t for t in tests if t["status"] != "passed"]
    if shown:
        replayed = report.provenance.replay if report.provenance else None
        title = "agent-health results" + (" (replayed)" if replayed else "")
        table = Table(title=title, show_lines=False)
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
            label = entries.repeat_label(t["repeat"], k)
            title = f"{t['file']} › {t['name']}" + (f" {label}" if label else "")
            title += f" [{t['agent']}]" if t.get("agent") else ""
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
    _failures(console, tests, k)
    _insights(console, shown, k)
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
    rate = "n/a" if s.pass_rate is None else f"{s.pass_rate:.0%}" + _ci(s.pass_rate_interval)
    score = "n/a" if s.score is None else f"{s.score:.2f}" + _ci(s.score_interval, ".2f")
    cost = "" if s.cost_usd is None else f", {_money(s.cost_usd)}"
    unpriced = f" ({s.unpriced} runs unpriced)" if s.cost_usd is not None and s.unpriced else ""
    console.print(
        f"\n{', '.join(parts)} — pass rate {rate}, score {score}, "
        f"{_tokens(s.tokens, s.tokens_unreported)}{cost}{unpriced}, {s.duration_ms / 1000:.2f}s"
    )
    if s.pass_at:
        console.print(
            ", ".join(_pass_at(p, s.per_test) for p in s.pass_at)
            + (f"; flaky: {', '.join(s.flaky)}" if s.flaky else ""),
            highlight=False,
        )
    elif s.repeats > 1:
        console.print(
            f"pass@{s.repeats} {_pct(s.pass_at_k)}, pass^{s.repeats} {_pct(s.pass_hat_k)}"
            + (f"; flaky: {', '.join(s.flaky)}" if s.flaky else "")
        )
    if s.total:
        console.print(f"[dim]{escape(legend(s.repeats))}[/]", highlight=False)
    if report.provenance is not None and report.provenance.replay:
        verified = report.provenance.replay_verified
        trust = {True: "verified with its key", False: "[bold]UNVERIFIED[/]: no key checked it"}
        console.print(
            f"[bold]replayed[/] from {escape(report.provenance.replay)} (recording "
            f"{trust[verified] if verified is not None else 'not checked'}): agent.run() "
            "was answered from the recording; the agent was not called",
            highlight=False,
        )
    if s.insights is not None:
        how = "the judge model's synthesis" if s.insights.source == "llm" else "grouped"
        console.print(f"across the suite ({how}): {escape(s.insights.summary)}", highlight=False)
        for rec in s.insights.recommendations:
            console.print(f"  {len(rec.tests)} tests: {escape(rec.text)}", highlight=False)
        for pattern in s.insights.patterns:
            console.print(f"  • {escape(pattern)}", highlight=False)
        if s.insights.error:
            console.print(f"  [yellow]{escape(s.insights.error)}[/]", highlight=False)
    if report.matrix is not None:
        terminal_matrix.show(console, report.matrix)
    if s.budget is not None:
        console.print(terminal_budget.line(s.budget), highlight=False, markup=False)
    if s.interrupted:
        console.print(f"[yellow]interrupted[/]: {s.not_run} tests never started")
    elif s.budget is not None and s.budget.exhausted is not None:
        console.print(
            f"[yellow]stopped by the budget[/] ({escape(s.budget.reason or '')}); "
            f"{s.budget.skipped} tests skipped (reason budget)"
        )
    elif s.stopped:
        console.print(f"[yellow]{escape(s.stopped)}[/]: {s.not_run} tests never started")


def _attempts(console: Console, test: dict[str, Any], label: str = "") -> None:
    """The tries of a retried test: what each came to."""
    tries = test.get("attempts") or []
    where = f" {label}" if label else ""
    for n, attempt in enumerate(tries, 1):
        reason = attempt.get("reason")
        why = f" — {_cause_word(attempt.get('cause'))}{reason}" if reason else ""
        console.print(
            f"  try {n} of {len(tries)}{escape(where)}: {attempt['status']}{escape(why)}",
            highlight=False,
        )


def _captured(console: Console, test: dict[str, Any], label: str = "") -> None:
    """What the body printed, under its failure (the last lines; the JSON report has all)."""
    for stream in ("stdout", "stderr"):
        text = test.get(stream)
        if not text:
            continue
        lines = text.rstrip("\n").splitlines()
        many = len(lines) > CAPTURE_LINES
        shown = f" (last {CAPTURE_LINES} of {len(lines)} lines)" if many else ""
        where = f" {label}" if label else ""
        console.print(f"  captured {stream}{escape(where)}{shown}:", highlight=False)
        for line in lines[-CAPTURE_LINES:]:
            console.print(f"    {line}", markup=False, highlight=False)


def _ci(interval: uncertainty.Interval | None, fmt: str = ".0%") -> str:
    """`` [62%, 91%]`` after a number: its 95% interval (nothing when there is none)."""
    return "" if interval is None else " " + interval.text(fmt)


def _pass_at(p: uncertainty.PassAtK, per_test: dict[str, Any]) -> str:
    """``pass@3 80% [55%, 95%], pass^3 60% [...]`` and how many tests had too few repeats."""
    text = (
        f"pass@{p.k} {_pct(p.pass_at_k)}{_ci(p.pass_at_k_interval)}, "
        f"pass^{p.k} {_pct(p.pass_hat_k)}{_ci(p.pass_hat_k_interval)}"
    )
    tests = len(per_test)
    if tests and p.tests < tests:
        text += f" (over {p.tests} of {tests} tests: the others had fewer than {p.k} decided)"
    return text


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


def legend(repeats: int) -> str:
    """One line that says what the summary's numbers mean."""
    parts = [f"pass rate = {LEGEND['pass_rate']}", f"score = {LEGEND['score']}"]
    if repeats > 1:
        parts += [
            f"pass@{repeats} = " + LEGEND["pass_at_k"].replace(" k ", f" {repeats} "),
            f"pass^{repeats} = " + LEGEND["pass_hat_k"].replace(" k ", f" {repeats} "),
        ]
    parts.append(LEGEND["interval"])
    return "legend: " + "; ".join(parts)


def _failures(console: Console, tests: list[dict[str, Any]], repeats: int) -> None:
    """Each test that did not pass, once: its failing repeats and each distinct reason."""
    runs: dict[str, int] = Counter(_key(t) for t in tests)
    bad: dict[str, list[dict[str, Any]]] = {}
    for t in tests:
        if t["status"] in ("failed", "errored", "flaky"):
            bad.setdefault(_key(t), []).append(t)
    for test_id, failing in bad.items():
        statuses = {t["status"] for t in failing}
        status = next(s for s in ("failed", "errored", "flaky") if s in statuses)
        head = f"\n[{COLOR[status]}]{status.upper()}[/] {escape(test_id)}"
        if repeats > 1:
            head += escape(f" — {_which(failing, runs[test_id], repeats)}")
        console.print(head, highlight=False)
        reasons: dict[str, list[int]] = {}
        for t in failing:
            for reason in _reasons(t):
                reasons.setdefault(reason, []).append(t["repeat"])
        for reason, where in reasons.items():
            labels = ""
            if repeats > 1 and len(where) < len(failing):
                labels = " " + " ".join(entries.repeat_label(r, repeats) for r in where)
            console.print(f"  {escape(reason)}{escape(labels)}", highlight=False)
        for t in failing:
            label = entries.repeat_label(t["repeat"], repeats) if repeats > 1 else ""
            _attempts(console, t, label)
            _captured(console, t, label)


def _key(t: dict[str, Any]) -> str:
    """A test's id, and its agent in an agent matrix."""
    return f"{t['id']} [{t['agent']}]" if t.get("agent") else str(t["id"])


def _which(failing: list[dict[str, Any]], runs: int, repeats: int) -> str:
    """``failed in all 3 repeats`` or ``failed in [1/3] [3/3], errored in [2/3]``."""
    statuses = {t["status"] for t in failing}
    if len(failing) == runs and len(statuses) == 1:
        return f"{failing[0]['status']} in all {runs} repeats"
    by_status: dict[str, list[str]] = {}
    for t in failing:
        by_status.setdefault(t["status"], []).append(entries.repeat_label(t["repeat"], repeats))
    return ", ".join(f"{status} in {' '.join(labels)}" for status, labels in by_status.items())


def _reasons(t: dict[str, Any]) -> list[str]:
    """Why one (test, repeat) did not pass: its error and each failed gate with evidence."""
    found = [f"error: {_cause_word(t.get('cause'))}{t['error']}"] if t["error"] else []
    for s in t["signals"]:
        if s["role"] == "gate" and s["passed"] is False:
            detail = s["reasoning"] or json.dumps(s["evidence"], default=str)
            where = f" ({s['location']})" if s["location"] else ""
            found.append(f"✗ {s['name']}{where}: {detail}")
    return found


def _insights(console: Console, tests: list[dict[str, Any]], repeats: int) -> None:
    """Each test's insights, once per distinct answer: summary, why, what to change."""
    found: dict[str, dict[str, tuple[dict[str, Any], list[int]]]] = {}
    for t in tests:
        if t.get("insights"):
            key = json.dumps(t["insights"], sort_keys=True, default=str)
            seen = found.setdefault(t["id"], {})
            seen.setdefault(key, (t["insights"], []))[1].append(t["repeat"])
    for test_id, answers in found.items():
        for insight, where in answers.values():
            labels = ""
            if repeats > 1 and (len(answers) > 1 or len(where) < repeats):
                labels = " " + " ".join(entries.repeat_label(r, repeats) for r in where)
            console.print(f"\n[bold]insights[/] {escape(test_id + labels)}")
            if insight.get("error"):
                console.print(f"  [yellow]insights error:[/] {escape(str(insight['error']))}")
                continue
            console.print(f"  {escape(str(insight.get('summary', '')))}", highlight=False)
            if insight.get("why"):
                console.print(f"  why: {escape(str(insight['why']))}", highlight=False)
            for rec in insight.get("recommendations") or []:
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
            _pct(stats.pass_rate) + _ci(stats.pass_rate_interval),
            _score(stats.score) + _ci(stats.score_interval, ".2f"),
        )
    console.print(table)


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
