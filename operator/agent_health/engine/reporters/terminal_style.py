"""How the terminal writes its words and numbers: the status marks and colours, percentages,
scores, intervals and money, and every text from outside agent-health made visible.

Text that did not come from agent-health (an agent's answer or error, a tool's name or
arguments, captured output, a title or label from a file) goes through :func:`shown` or
:func:`shown_block` before it is printed: its control and bidirectional-override characters
come out as escapes (``\\x1b``, ``\\u202e``, :mod:`agent_health.engine.visible`) and its
``[...]`` as text, never as rich markup. Only agent-health's own styling reaches the terminal.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from agent_health.engine import statistics, visible

MARK = {"passed": "✓", "failed": "✗", "errored": "!", "skipped": "-", "flaky": "~"}
COLOR = {
    "passed": "green",
    "failed": "red",
    "errored": "yellow",
    "skipped": "dim",
    "flaky": "magenta",
}


def shown(text: Any) -> str:
    """Outside text for one line of rich markup: visible, and never read as markup."""
    return escape(visible.line(str(text)))


def shown_block(text: Any, margin: str) -> str:
    """Outside text that may span lines, for rich markup: visible, each line after the first
    at ``margin`` (under the heading it belongs to), never read as markup."""
    return escape(visible.indented(str(text), margin))


def cause_word(cause: str | None) -> str:
    """``agent error: `` before an error message — whom it blames (counts in the pass rate
    only when it is the agent)."""
    return f"{cause} error: " if cause else ""


def ci(interval: statistics.Interval | None, fmt: str = ".0%") -> str:
    """`` [62%, 91%]`` after a number: its 95% interval (nothing when there is none)."""
    return "" if interval is None else " " + interval.text(fmt)


def money(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


def score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"
