"""The terminal's view of an agent matrix: the tests side by side, each agent's totals, and
each pair of agents compared (with the paired test's verdict when the report has one)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from agent_health.engine import statistics, visible
from agent_health.engine.reporters import terminal_style as style

MARK = {"passed": "✓", "failed": "✗", "errored": "!", "skipped": "-"}
COLOR = {"passed": "green", "failed": "red", "errored": "yellow", "skipped": "dim"}


def show(console: Console, matrix: statistics.Matrix) -> None:
    """The agents side by side: per test, then each agent's totals, then each pair."""
    table = Table(title="agents side by side", show_lines=False)
    table.add_column("test")
    for agent in matrix.agents:
        table.add_column(style.shown(agent), justify="right")
    for row in matrix.tests:
        cells = [_side(row.agents.get(agent)) for agent in matrix.agents]
        table.add_row(style.shown(row.name), *cells)
    totals = []
    for agent in matrix.agents:
        s = matrix.summaries[agent]
        rate = "n/a" if s.get("pass_rate") is None else f"{s['pass_rate']:.0%}"
        score = "n/a" if s.get("score") is None else f"{s['score']:.2f}"
        rate += _ci(s.get("pass_rate_interval"), ".0%") if s.get("pass_rate") is not None else ""
        score += _ci(s.get("score_interval"), ".2f") if s.get("score") is not None else ""
        totals.append(f"pass rate {rate}, score {score}")
    table.add_row("[b]all tests[/]", *totals)
    console.print(table)
    for pair in matrix.pairs:
        console.print(visible.line(pair_line(pair)), highlight=False, markup=False)


def _side(side: statistics.MatrixSide | None) -> str:
    """``✓ 3/3 0.95``: passes of the decided repeats, mean score; ``-`` when it did not run."""
    if side is None:
        return "-"
    decided = side.passed + side.failed + side.errored_by_agent
    if not decided:
        return f"{MARK['skipped'] if side.skipped else MARK['errored']} n/a"
    mark = MARK["passed"] if side.passed == decided else MARK["failed"]
    color = COLOR["passed"] if side.passed == decided else COLOR["failed"]
    score = "" if side.score is None else f" {side.score:.2f}"
    return f"[{color}]{mark} {side.passed}/{decided}{score}[/]"


def pair_line(pair: statistics.MatrixPair) -> str:
    """``triage → triage-faulty over 3 tests: pass rate -66.7 pts (2 worse, 0 better), ...``
    with the paired test's verdict when there is one."""
    parts = [f"{pair.base} → {pair.new} over {pair.tests} tests:"]
    if pair.pass_rate_delta is not None:
        parts.append(
            f"pass rate {pair.pass_rate_delta * 100:+.1f} pts "
            f"({len(pair.worse)} worse, {len(pair.better)} better)"
        )
    if pair.score_delta is not None:
        parts.append(f"score {pair.score_delta:+.2f}")
    verdict = _verdict(pair.paired)
    return parts[0] + " " + ", ".join(parts[1:]) + (f"; {verdict}" if verdict else "")


def _verdict(paired: dict[str, Any] | None) -> str:
    """The paired test's answer in words (p-value, interval, significant or noise)."""
    if not paired:
        return ""
    said = []
    for metric in ("pass_rate", "score"):
        test = paired.get(metric)
        if not test:
            continue
        low, high = _bounds(test.get("interval"))
        # a pass rate's difference in points, as the pair's line above says it
        shown = (lambda v: f"{v * 100:+.1f} pts") if metric == "pass_rate" else "{:+.3f}".format
        where = (
            f", {1 - paired.get('alpha', 0.05):.0%} CI [{shown(low)}, {shown(high)}]"
            if low is not None and high is not None
            else ""
        )
        word = "significant" if test.get("significant") else "not distinguishable from noise"
        said.append(
            f"{metric.replace('_', ' ')} {test.get('method', 'paired test')} "
            f"p={test.get('p_value', float('nan')):.3g}{where}: {word}"
        )
    return "; ".join(said)


def _bounds(interval: Any) -> tuple[float | None, float | None]:
    if isinstance(interval, dict):
        return interval.get("low"), interval.get("high")
    return None, None


def _ci(interval: Any, fmt: str) -> str:
    """`` [62%, 91%]``: an agent's 95% interval beside its number (nothing without one)."""
    low, high = _bounds(interval)
    if low is None or high is None:
        return ""
    return f" [{low:{fmt}}, {high:{fmt}}]"
