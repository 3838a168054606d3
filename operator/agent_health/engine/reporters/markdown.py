"""The run as Markdown: a CI job's summary and the body of a pull request's comment.

``--reporter markdown[:PATH]`` writes it to ``PATH`` (default ``agent-health-summary.md``)
and, when ``$GITHUB_STEP_SUMMARY`` names a file (GitHub Actions), appends it there too, so
the job's page shows it. What it says, top down: the verdict and the counts, the pass rate
and score with their 95% intervals, the comparison with a baseline (newly failing, newly
passing, what the paired test found significant, the gate's word), the tests the history
knows to be flaky, the cost, and the tests that did not pass.

The baseline and the flaky tests come from the history, which the engine never imports:
``agent-health run`` reads them and hands them over as a :class:`Context` (without one —
``agent-health report``, ``--no-history`` — the summary says what it can from the report).

Written to be read as raw text too (a terminal, a log): tables are padded into columns,
ids and messages sit in code spans (nothing in a test's name or an agent's error is read as
Markdown or HTML), and every line stands on its own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health import statuses
from agent_health.engine import reports, visible

if TYPE_CHECKING:
    from agent_health.engine import comparing, reports

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
"""The variable GitHub Actions names its job summary's file in."""
LISTED = 25
"""Tests listed under each heading before "and N more"."""
MESSAGE_CHARS = 200


@dataclass(frozen=True)
class FlakyTest:
    """A test the history found flaky (``agent_health.history.Flaky``, in the engine's
    terms)."""

    id: str
    title: str
    flips: int
    runs: int
    failure_rate: float
    low: float
    high: float
    agent: str | None = None


@dataclass(frozen=True)
class Context:
    """What the history adds to a run's summary. Each part is ``None`` when it could not be
    had, and the matching ``*_note`` says why in one line."""

    history: str | None = None
    """where the history is, as shown; ``None`` when the run has none (``--no-history``)"""
    baseline: str | None = None
    """the baseline, named: ``last-green = run 3f9a… of triage (2025-01-31 12:00 UTC, …)``"""
    comparison: comparing.Comparison | None = None
    gating: bool = False
    """whether the comparison gates the run (``--baseline``); else it is for information"""
    comparison_note: str | None = None
    flaky: Sequence[FlakyTest] | None = None
    flaky_runs: int = 50
    flaky_note: str | None = None
    notes: Sequence[str] = field(default_factory=tuple)


def write(path: Path, report: reports.RunReport, context: Context | None = None) -> Path:
    """Write the summary to ``path`` (atomically) and append it to ``$GITHUB_STEP_SUMMARY``
    when that names a file; ``path``."""
    text = render(report, context)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    step = os.environ.get(STEP_SUMMARY)
    if step and Path(step).resolve() != path.resolve():
        # Appended, as GitHub expects: each step (and each run in a step) adds its part.
        with open(step, "a", encoding="utf-8") as summary:
            summary.write(text + "\n")
    return path


def render(report: reports.RunReport, context: Context | None = None) -> str:
    """The summary as Markdown text."""
    told = context or Context()
    lines = _headline(report)
    lines += _counts(report)
    if report.matrix is not None:
        lines += _matrix(report)
    lines += _comparison(told, report)
    lines += _flaky(told)
    lines += _cost(report)
    lines += _not_passed(report)
    for note in told.notes:
        lines += [f"_{_plain(note)}_", ""]
    lines.append(
        "<sub>agent-health"
        + (f" · history {_plain(told.history)}" if told.history else "")
        + "</sub>"
    )
    return "\n".join(lines) + "\n"


# -- parts -----------------------------------------------------------------------------------


def _headline(report: reports.RunReport) -> list[str]:
    s = report.summary
    agent = _agent(report)
    of = f" — {_plain(agent)}" if agent else ""
    # What did not run comes first, in the words the terminal's last line begins with: a
    # summary never reads as all passed when a file did not load or tests never started.
    missing = list(s.did_not_run)
    if s.load_errors and not (s.not_loaded or missing):  # a report saved before these fields
        missing.append(f"{len(s.load_errors)} load error{'s' if len(s.load_errors) != 1 else ''}")
    bad = s.failed + s.errored
    words = list(missing)
    if bad:
        words.append(f"{bad} of {s.total} {'result' if s.total == 1 else 'results'} did not pass")
    elif s.total and not s.interrupted:
        words.append(f"all {s.total} {'that ran ' if missing else ''}passed")
    if s.interrupted:
        mark = "⏹"
    elif bad or s.load_errors:
        mark = "❌"
    elif missing:
        mark = "⚠️"
    elif s.total == 0:
        mark, words = "⚪", ["no test ran"]
    else:
        mark = "✅"
    verdict = f"{mark} {'; '.join(words) or 'interrupted'}"
    lines = [f"## agent-health: {verdict}{of}", ""]
    rate = f"**pass rate {_pct(s.pass_rate)}**"
    if s.pass_rate_interval is not None:
        rate += f" (95% CI {_pct(s.pass_rate_interval.low)}–{_pct(s.pass_rate_interval.high)})"
    parts = [rate]
    if s.score is not None:
        score = f"score {s.score:.2f}"
        if s.score_interval is not None:
            score += f" (95% CI {s.score_interval.low:.2f}–{s.score_interval.high:.2f})"
        parts.append(score)
    tests = len({t.get("id") for t in report.tests}) if report.tests else s.total
    shape = f"{tests} {'test' if tests == 1 else 'tests'}" + (
        f" × {s.repeats} repeats" if s.repeats > 1 else ""
    )
    parts.append(shape)
    lines += [" · ".join(parts), ""]
    return lines


def _counts(report: reports.RunReport) -> list[str]:
    s = report.summary
    header = ["passed", "failed", "errored", "flaky", "skipped"]
    values = [s.passed, s.failed, s.errored, s.flaky_count, s.skipped]
    if s.not_run:
        header.append("not run")
        values.append(s.not_run)
    lines = _table(header, [[str(v) for v in values]], right=set(range(len(header))))
    said = []
    causes = {k: v for k, v in s.errored_by_cause.items() if v}
    if causes:
        said.append(
            "errored by cause: "
            + ", ".join(f"{cause} {n}" for cause, n in causes.items())
            + " (errors the agent caused count against its pass rate; the others are left out)"
        )
    if s.quarantined is not None and s.quarantined.tests:
        said.append(f"{len(s.quarantined.tests)} quarantined tests reported apart, not counted")
    if s.stopped:
        said.append(f"stopped early: {_plain(s.stopped)}")
    if s.budget is not None and s.budget.exhausted is not None:
        said.append(f"stopped by its budget: {_plain(str(s.budget.exhausted))}")
    return lines + [""] + [f"{line}  " for line in said] + ([""] if said else [])


def _matrix(report: reports.RunReport) -> list[str]:
    matrix = report.matrix
    if matrix is None:
        return []
    rows = []
    for agent in matrix.agents:
        summary = matrix.summaries.get(agent, {})
        interval = summary.get("pass_rate_interval") or {}
        rate = _pct(summary.get("pass_rate"))
        if interval:
            rate += f" ({_pct(interval.get('low'))}–{_pct(interval.get('high'))})"
        rows.append(
            [
                _code(agent, cell=True),
                rate,
                str(summary.get("passed", 0)),
                str(summary.get("failed", 0)),
                str(summary.get("errored", 0)),
                _money(summary.get("cost_usd")),
            ]
        )
    header = ["agent", "pass rate (95% CI)", "passed", "failed", "errored", "cost"]
    return ["### Agents", "", *_table(header, rows, right={2, 3, 4, 5}), ""]


def _comparison(told: Context, report: reports.RunReport) -> list[str]:
    c = told.comparison
    if c is None:
        if told.comparison_note:
            return ["### Against the baseline", "", _plain(told.comparison_note), ""]
        return []
    lines = ["### Against the baseline", ""]
    if told.baseline:
        lines += [f"Baseline: {_plain(told.baseline)}", ""]
    lines.append(
        f"pass rate {_pct(c.pass_rate.base)} → {_pct(c.pass_rate.new)}"
        + (f" ({c.pass_rate.delta * 100:+.1f} pts)" if c.pass_rate.delta is not None else "")
        + f" · errored {_num(c.errored, '.0f')} · cost {_delta_money(c.cost_usd)}"
    )
    lines.append("")
    found = [f for f in (c.paired.pass_rate, c.paired.score) if f is not None]
    if found:
        lines.append("Paired tests (the same tests in both runs):  ")
        for one in found:
            way = (
                ("**significantly worse**" if one.effect < 0 else "**significantly better**")
                if one.significant
                else "not distinguishable from noise"
            )
            effect = (
                f"{one.effect * 100:+.1f} pts"
                if one.metric == "pass_rate"
                else f"{one.effect:+.3f}"
            )
            lines.append(
                f"- {one.metric.replace('_', ' ')} {effect} over {one.tests} tests: {way} "
                f"({one.method}, p = {one.p_value:.2g})"
            )
        lines.append("")
    else:
        lines += ["No test was decided in both runs: nothing to pair.", ""]
    for title, changes in (("Newly failing", c.newly_failing), ("Newly passing", c.newly_passing)):
        if not changes:
            continue
        lines.append(f"**{title} ({len(changes)})**")
        lines.append("")
        for ch in changes[:LISTED]:
            label = reports.repeat_label(ch.repeat, c.repeats)
            new = f"{ch.new} ({ch.cause})" if ch.new == "errored" and ch.cause else ch.new
            why = f": {_code(_cut(ch.error))}" if ch.error and ch.new == "errored" else ""
            edited = " (the test changed)" if ch.changed else ""
            lines.append(
                f"- {_code(ch.id)}{' ' + label if label else ''} — {ch.base} → {new}{edited}{why}"
            )
        if len(changes) > LISTED:
            lines.append(f"- … and {len(changes) - LISTED} more")
        lines.append("")
    if c.added or c.removed:
        lines.append(f"{len(c.added)} tests added, {len(c.removed)} removed since the baseline.  ")
        lines.append("")
    if told.gating:
        if c.regressions:
            lines.append("**Gate: regression** — " + "; ".join(_plain(r) for r in c.regressions))
        elif c.gate == "significant":
            lines.append("**Gate: passed** — no significant regression")
        else:
            lines.append("**Gate: passed** — no regression beyond the thresholds")
    else:
        lines.append("_For information: the run is not gated on it (`--baseline` gates)._")
    return [*lines, ""]


def _flaky(told: Context) -> list[str]:
    if told.flaky is None:
        if told.flaky_note:
            return ["### Flaky tests", "", _plain(told.flaky_note), ""]
        return []
    lines = ["### Flaky tests", ""]
    if not told.flaky:
        return [
            *lines,
            f"None in the history: no test flipped over the last {told.flaky_runs} runs while "
            "neither the agent nor the test changed.",
            "",
        ]
    lines += [
        f"Tests whose outcome flipped over the last {told.flaky_runs} runs while neither the "
        "agent nor the test changed (failure rate with its Wilson 95% interval):",
        "",
    ]
    rows = [
        [
            _code(f.id, cell=True),
            str(f.flips),
            str(f.runs),
            f"{_pct(f.failure_rate)} ({_pct(f.low)}–{_pct(f.high)})",
            _plain(f.agent or "-"),  # escapes a pipe too
        ]
        for f in told.flaky[:LISTED]
    ]
    lines += _table(["test", "flips", "runs", "fails", "agent"], rows, right={1, 2})
    if len(told.flaky) > LISTED:
        lines += ["", f"… and {len(told.flaky) - LISTED} more (`agent-health flaky` lists them)"]
    return [*lines, ""]


def _cost(report: reports.RunReport) -> list[str]:
    s = report.summary
    parts = [f"cost {_money(s.cost_usd)}"]
    if s.unpriced:
        parts[0] += f" ({s.unpriced} runs unpriced)"
    if s.tokens is not None:
        tokens = f"{s.tokens:,} tokens"
        if s.input_tokens is not None and s.output_tokens is not None:
            tokens += f" ({s.input_tokens:,} in, {s.output_tokens:,} out)"
        parts.append(tokens)
    judge = (s.judge_tokens or {}).get("total_tokens")
    if judge:
        parts.append(f"judge {int(judge):,} tokens")
    parts.append(f"took {_duration(s.duration_ms)}")
    return ["### Cost", "", " · ".join(parts), ""]


def _not_passed(report: reports.RunReport) -> list[str]:
    bad = [
        t
        for t in report.tests
        if t.get("status") in statuses.NOT_PASSED and not t.get("quarantined")
    ]
    if not bad:
        return []
    repeats = report.summary.repeats
    lines = [
        f"<details><summary>Tests that did not pass ({len(bad)})</summary>",
        "",
    ]
    for t in bad[:LISTED]:
        label = reports.repeat_label(int(t.get("repeat") or 0), repeats)
        status = str(t.get("status"))
        if status == "errored" and t.get("cause"):
            status += f" ({t['cause']})"
        agent = f" [{_plain(str(t['agent']))}]" if t.get("agent") else ""
        why = _why(t)
        lines.append(
            f"- {_code(str(t.get('id')))}{' ' + label if label else ''}{agent} — {status}"
            + (f": {_code(why)}" if why else "")
        )
    if len(bad) > LISTED:
        lines.append(f"- … and {len(bad) - LISTED} more")
    return [*lines, "", "</details>", ""]


def _why(entry: dict[str, Any]) -> str | None:
    """A result's first reason: its error, else its first failed gate."""
    if entry.get("error"):
        return _cut(str(entry["error"]))
    for signal in entry.get("signals") or ():
        if signal.get("role") == "gate" and signal.get("passed") is False:
            name = str(signal.get("name") or "a gate")
            return _cut(f"✗ {name}")
    return None


# -- formatting ------------------------------------------------------------------------------


def _agent(report: reports.RunReport) -> str | None:
    provenance = report.provenance
    if provenance is None or report.matrix is not None:
        return None
    agent = provenance.agent
    if agent is None:
        return None
    return agent.name or agent.url or (" ".join(agent.command) if agent.command else None)


def _table(header: list[str], rows: list[list[str]], *, right: set[int]) -> list[str]:
    """A Markdown table padded into columns, so it reads as a table in raw text too."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [
        "-" * (widths[i] - 1) + ":" if i in right else "-" * widths[i] for i in range(len(header))
    ]
    return [line(header), line(rule), *(line(r) for r in rows)]


def _code(text: str, *, cell: bool = False) -> str:
    """``text`` as a code span: literal (nothing in it is Markdown or HTML), on one line,
    with a fence longer than any run of backticks inside it. In a table ``cell`` a pipe is
    escaped (GitHub reads ``\\|`` as ``|`` there, code span or not; elsewhere it would
    show the backslash)."""
    flat = visible.line(text)
    if cell:
        flat = flat.replace("|", "\\|")
    longest = run = 0
    for ch in flat:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    # Padded (a space each side is not part of the span) when it holds backticks or starts
    # or ends with one, and never read as a code block's fence at a line's start.
    pad = " " if longest or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _plain(text: str) -> str:
    """Text of ours with a name in it, on one line, its Markdown and HTML characters
    escaped."""
    flat = visible.line(text)
    return "".join(f"\\{ch}" if ch in "\\`*_[]<>|#" else ch for ch in flat)


def _cut(text: str) -> str:
    flat = visible.line(text)
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 1] + "…"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%".replace(".0%", "%")


def _money(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"${value:.2f}" if value >= 0.01 else f"${value:.4f}"


def _delta_money(d: comparing.Delta) -> str:
    if d.base is None and d.new is None:
        return "n/a"
    return f"{_money(d.base)} → {_money(d.new)}"


def _num(d: comparing.Delta, fmt: str) -> str:
    if d.base is None and d.new is None:
        return "n/a"
    b = "n/a" if d.base is None else format(d.base, fmt)
    n = "n/a" if d.new is None else format(d.new, fmt)
    return f"{b} → {n}"


def _duration(ms: float) -> str:
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes / 60:.1f} h"
