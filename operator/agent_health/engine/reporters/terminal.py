"""Live progress while tests run, and the summary at the end.

On a terminal: a progress bar with counts. Elsewhere (CI logs, pipes): one plain line per
finished test. The summary's tables (:mod:`.terminal_tables`) fit 80 columns; under them,
every test that did not pass with its reasons, once per test, the failing repeats named
(:mod:`.terminal_failures`); then the totals and a legend of the numbers. With
``--repeat k`` every line names its repeat the same way: ``[2/3]``.

Every text that did not come from agent-health is shown with its control and
bidirectional-override characters made visible (:mod:`.terminal_style`): an agent cannot
move the cursor, erase a line, set the window title or write the clipboard.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

from agent_health import statuses
from agent_health.engine import outcome, reports, statistics, visible
from agent_health.engine.reporters import terminal_failures, terminal_tables
from agent_health.engine.reporters import terminal_style as style
from agent_health.sdk.results import TestResult

if TYPE_CHECKING:
    import asyncio

    from rich.progress import Progress

MARK, COLOR = style.MARK, style.COLOR
CAPTURE_LINES = terminal_failures.CAPTURE_LINES
FLUSH_EVERY_S = 0.1
"""Plain progress lines (CI logs, pipes) reach the reader at most this long after their
test ended: a line after a quiet spell is written at once, the lines of tests that end
faster than that go out together. (Written one by one, each line was a write to the file
and so a hand-over of the interpreter, which the event loop then waited up to a switch
interval to get back from the run's other threads: 400 quick tests, about 0.2 s.)"""


def _line(result: TestResult, repeats: int = 1) -> str:
    label = reports.repeat_label(result.repeat, repeats)
    repeat = f" {label}" if label else ""
    repeat += f" [{result.agent}]" if result.agent else ""
    extra = ""
    if result.status == "errored" and result.error:
        extra = f" — {style.cause_word(result.cause)}{visible.line(result.error)}"
    elif result.status == "failed" and result.error:  # a check failed, then this went wrong
        extra = f" — then: {visible.line(result.error)}"
    elif result.status == "skipped" and result.skip_reason:
        extra = f" — {visible.line(result.skip_reason)}"
    elif result.status == "flaky":
        extra = f" — passed on try {len(result.attempts)} of {len(result.attempts)}"
    replayed = " [replayed]" if result.replayed else ""
    if result.turns:  # a conversation's turns and why it ended; a single run has none
        ended = result.ended.model_dump() if result.ended is not None else None
        talk = reports.conversation_summary({"turns": result.turns, "ended": ended})
        replayed += f" {visible.line(talk)}" if talk else ""
    # One line per test whatever its title or error holds: a newline in either would start
    # a line of the agent's own, so it is shown as \n with the rest.
    return (
        f"{MARK[result.status]} {result.status:<7} {visible.line(result.file)} › "
        f"{visible.line(result.title)}{visible.line(repeat)} "
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
        self._flushed = float("-inf")  # when plain lines were last flushed (monotonic)
        self._later: asyncio.TimerHandle | None = None  # the flush waiting for its turn

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
        elif self._later is not None:
            self._flush(self.console.file)

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
            if result.status in statuses.TROUBLED:
                line = _line(result, self.repeats)
                self._progress.console.print(
                    line, style=COLOR[result.status], markup=False, highlight=False
                )
        else:
            # A plain line, as console.print(markup=False, highlight=False, soft_wrap=True)
            # would print it, without rendering it (a fifth of a trivial test's cost).
            out = self.console.file
            out.write(_line(result, self.repeats) + "\n")
            self._flush_soon(out)

    def _flush_soon(self, out: IO[str]) -> None:
        """Flush ``out`` now if it was not flushed within :data:`FLUSH_EVERY_S`, else once
        that long after it was (on the running event loop; without one, now)."""
        if self._later is not None:
            return
        waited = time.monotonic() - self._flushed
        if waited >= FLUSH_EVERY_S:
            self._flush(out)
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush(out)
            return
        self._later = loop.call_later(FLUSH_EVERY_S - waited, self._flush, out)

    def _flush(self, out: IO[str]) -> None:
        if self._later is not None:
            self._later.cancel()
            self._later = None
        self._flushed = time.monotonic()
        out.flush()


def summary(
    console: Console,
    report: reports.RunReport,
    *,
    hints: list[str] | None = None,
    close: bool = True,
) -> None:
    """The table of results, the reasons of what did not pass, what the numbers mean, and
    (unless ``close`` is false: the caller prints :func:`closing` after its own lines) the
    closing line with the totals."""
    tests = report.tests
    k = report.summary.repeats
    narrow = False
    if tests:
        replayed = report.provenance.replay if report.provenance else None
        title = "agent-health results" + (" (replayed)" if replayed else "")
        narrow = terminal_tables.results(console, tests, k, title)
    terminal_failures.failures(console, tests, k, details=narrow)
    # past a table's worth, only the insights of the tests that did not pass
    many = len(tests) > terminal_tables.TABLE_LIMIT
    terminal_failures.insights(
        console, [t for t in tests if t["status"] != "passed"] if many else tests, k
    )
    s = report.summary
    terminal_tables.labels(console, report)
    for error in s.load_errors:
        console.print(f"[red]load error[/] {style.shown_block(error, '  ')}", highlight=False)
    judge_only = [_judge_only_hint(s.judge_only)] if s.judge_only else []
    no_price = [unpriced_hint(s.unpriced_models)] if s.unpriced_models else []
    for hint in [*(hints or []), *judge_only, *no_price]:
        console.print(f"[dim]hint: {style.shown_block(hint, '  ')}[/]", highlight=False)
    if s.pass_at:
        console.print(", ".join(_pass_at(p, s.per_test) for p in s.pass_at), highlight=False)
    elif s.repeats > 1:
        console.print(
            f"pass@{s.repeats} {style.pct(s.pass_at_k)}, pass^{s.repeats} {style.pct(s.pass_hat_k)}"
        )
    talks = [(t, r.ended) for t, r in s.per_test.items() if r.ended]
    if talks:
        console.print(
            f"conversations over {s.repeats} repeats: "
            + "; ".join(f"{style.shown(t)} {_ended(e, s.repeats)}" for t, e in talks),
            highlight=False,
        )
    if s.flaky:
        console.print(f"[{COLOR['flaky']}]flaky[/] (passed only on a retry): {_titles(s.flaky)}")
    if s.mixed:
        console.print(f"passed in some repeats and not in others: {_titles(s.mixed)}")
    if s.total:
        console.print(f"[dim]{style.shown(legend(s.repeats))}[/]", highlight=False)
    if report.provenance is not None and report.provenance.replay:
        verified = report.provenance.replay_verified
        trust = {True: "verified with its key", False: "[bold]UNVERIFIED[/]: no key checked it"}
        console.print(
            f"[bold]replayed[/] from {style.shown(report.provenance.replay)} (recording "
            f"{trust[verified] if verified is not None else 'not checked'}): agent.run() "
            "was answered from the recording; the agent was not called",
            highlight=False,
        )
    if s.insights is not None:
        _rollup(console, s.insights)
    # An agent matrix's table and a budget's line: their modules only for a run that has one.
    if report.matrix is not None:
        from agent_health.engine.reporters import terminal_matrix

        terminal_matrix.show(console, report.matrix)
    if s.budget is not None:
        from agent_health.engine.reporters import terminal_budget

        console.print(terminal_budget.line(s.budget), highlight=False, markup=False)
    if s.interrupted:
        console.print(f"[yellow]interrupted[/]: {s.not_run} tests never started")
    elif s.budget is not None and s.budget.exhausted is not None:
        console.print(
            f"[yellow]stopped by the budget[/] ({style.shown(s.budget.reason or '')}); "
            f"{s.budget.skipped} tests skipped (reason budget)"
        )
    elif s.stopped:
        console.print(f"[yellow]{style.shown(s.stopped)}[/]: {s.not_run} tests never started")
    if close:
        closing(console, report)


def closing(
    console: Console, report: reports.RunReport, *, unwritten: int = 0, also: Sequence[str] = ()
) -> None:
    """The run's last line: what did not run first (files not loaded, tests never started,
    ``unwritten`` reports) and ``also`` (a regression from the baseline), then the totals.
    Whenever the exit code is not 0 this line says why, so a reader of its last line is
    never told that all passed."""
    s = report.summary
    causes = [f"{n} {cause}" for cause, n in s.errored_by_cause.items() if n]
    parts = [
        f"{s.passed} passed",
        *([f"{s.flaky_count} flaky"] if s.flaky_count else []),
        f"{s.failed} failed",
        f"{s.errored} errored" + (f" ({', '.join(causes)})" if causes else ""),
        f"{s.skipped} skipped" + (f" ({s.judge_only} judge only)" if s.judge_only else ""),
    ]
    if s.quarantined is not None:
        q = s.quarantined
        bad = [
            f"{n} {what}"
            for what, n in (("failed", q.failed + q.flaky), ("errored", q.errored))
            if n
        ]
        parts.append(
            f"{q.passed + q.failed + q.errored + q.skipped + q.flaky} quarantined"
            + (f" ({', '.join(bad)}: not counted)" if bad else "")
        )
    first = list(s.did_not_run)
    if s.load_errors and not (s.not_loaded or first):  # a report saved before these fields
        first.append(f"{len(s.load_errors)} load error{'s' if len(s.load_errors) != 1 else ''}")
    if unwritten:
        first.append(f"{unwritten} report{'s' if unwritten != 1 else ''} not written")
    first.extend(also)
    rate = "n/a" if s.pass_rate is None else f"{s.pass_rate:.0%}" + style.ci(s.pass_rate_interval)
    score = "n/a" if s.score is None else f"{s.score:.2f}" + style.ci(s.score_interval, ".2f")
    if s.score is not None and s.scored < s.total:
        # the two numbers count different tests: say so where they may disagree
        score += f" (over the {s.scored} scored of {s.total} results)"
    cost = "" if s.cost_usd is None else f", {style.money(s.cost_usd)}"
    unpriced = f" ({s.unpriced} runs unpriced)" if s.cost_usd is not None and s.unpriced else ""
    head = f"[bold red]{style.shown('; '.join(first))}[/]; " if first else ""
    console.print(
        f"\n{head}{', '.join(parts)} — pass rate {rate}, score {score}, "
        f"{_tokens(s.tokens, s.tokens_unreported)}{cost}{unpriced}, {s.duration_ms / 1000:.2f}s",
        highlight=False,
    )


def _ended(ended: dict[str, int], repeats: int) -> str:
    """``goal-met 2/3, gave-up 1/3``: how a conversation's repeats ended."""
    return ", ".join(f"{reason} {n}/{repeats}" for reason, n in ended.items())


def _judge_only_hint(count: int) -> str:
    tests = "1 test" if count == 1 else f"{count} tests"
    return (
        f"{tests} checked nothing but judge() calls, and judging was off: skipped "
        f"({outcome.JUDGE_ONLY}), left out of the pass rate"
    )


def unpriced_hint(models: list[reports.UnpricedModel]) -> str:
    """One line naming the models tokens were spent on that have no price."""
    named = []
    for u in models:
        what = style.shown(repr(u.model)) if u.model else "a model the agent did not name"
        tokens = "unknown tokens" if u.tokens is None else f"{u.tokens:,} tokens"
        named.append(f"{what} ({tokens}, {u.runs} run{'s' if u.runs != 1 else ''})")
    return (
        f"no price for {', '.join(named)}: that cost is unknown, not counted; add "
        'define_config(prices={"MODEL": ...}) (or a "default" price)'
    )


def _titles(titles: list[str]) -> str:
    """Test titles in a sentence, each quoted: a test titled "flaky" reads as a title."""
    return ", ".join(style.shown(repr(t)) for t in titles)


def _rollup(console: Console, insights: Any) -> None:
    """The run's insights across the suite: summary, recommendations, patterns, error."""
    how = "the judge model's synthesis" if insights.source == "llm" else "grouped"
    summary = style.shown_block(insights.summary, "  ")
    console.print(f"across the suite ({how}): {summary}", highlight=False)
    for rec in insights.recommendations:
        console.print(
            f"  {len(rec.tests)} tests: {style.shown_block(rec.text, '    ')}", highlight=False
        )
    for pattern in insights.patterns:
        console.print(f"  • {style.shown_block(pattern, '    ')}", highlight=False)
    if insights.error:
        console.print(f"  [yellow]{style.shown_block(insights.error, '    ')}[/]", highlight=False)


def _pass_at(p: statistics.PassAtK, per_test: dict[str, Any]) -> str:
    """``pass@3 80% [55%, 95%], pass^3 60% [...]`` and how many tests had too few repeats."""
    text = (
        f"pass@{p.k} {style.pct(p.pass_at_k)}{style.ci(p.pass_at_k_interval)}, "
        f"pass^{p.k} {style.pct(p.pass_hat_k)}{style.ci(p.pass_hat_k_interval)}"
    )
    tests = len(per_test)
    if tests and p.tests < tests:
        text += f" (over {p.tests} of {tests} tests: the others had fewer than {p.k} decided)"
    return text


def _tokens(tokens: int | None, unreported: int) -> str:
    """``1234 tokens``, saying how many runs reported none (their tokens are unknown)."""
    if tokens is None:
        return "tokens not reported" if unreported else "0 tokens"
    return f"{tokens} tokens" + (f" ({unreported} runs reported none)" if unreported else "")


def legend(repeats: int) -> str:
    """One line that says what the summary's numbers mean."""
    parts = [f"pass rate = {reports.LEGEND['pass_rate']}", f"score = {reports.LEGEND['score']}"]
    if repeats > 1:
        parts += [
            f"pass@{repeats} = " + reports.LEGEND["pass_at_k"].replace(" k ", f" {repeats} "),
            f"pass^{repeats} = " + reports.LEGEND["pass_hat_k"].replace(" k ", f" {repeats} "),
        ]
    parts.append(reports.LEGEND["interval"])
    return "legend: " + "; ".join(parts)
