"""Under the results table: each test that did not pass, once, with its failing repeats, each
distinct reason, a conversation's turns and the turn where it went wrong (its user message
and answer), what a timed-out agent had sent, its tries and what it printed; then each
test's insights.

Every reason, message and printed line is outside text (an agent's error body, a judge's
reasoning, a tool's arguments): each is shown through :mod:`.terminal_style`, its lines
indented under the heading of the test they belong to, so none can erase or forge a line.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.console import Console

from agent_health import statuses
from agent_health.engine import reports, visible
from agent_health.engine.reporters import terminal_style as style
from agent_health.engine.reporters import terminal_tables

CAPTURE_LINES = 40  # lines of a failed test's captured output shown (all are in the JSON)
RECEIVED_LINES = 10  # lines of what a timed-out agent had sent (the JSON report has more)
RECEIVED_CHARS = 200  # of each: a JSON body is often one long line
TURN_LINES = 10  # lines of the failing turn's user message and answer shown
MARGIN = "    "  # where the second and later lines of a reason or message go


def failures(
    console: Console, tests: list[dict[str, Any]], repeats: int, *, details: bool = False
) -> None:
    """Each test that did not pass, once: its failing repeats and each distinct reason; with
    ``details`` (the results table was narrow and left them out), each failing repeat's time,
    tokens, cost, tools, turns and notes."""
    bad: dict[str, list[dict[str, Any]]] = {}
    for t in tests:
        if t["status"] in statuses.TROUBLED:
            bad.setdefault(_key(t), []).append(t)
    # Each test's repeats, counted only where a failing test's line says them (a run of
    # passing tests never needs them: one key a test, for nothing).
    runs: dict[str, int] = Counter(_key(t) for t in tests) if bad and repeats > 1 else {}
    for test_id, failing in bad.items():
        ended = {t["status"] for t in failing}
        status = next(s for s in statuses.TROUBLED if s in ended)
        head = f"\n[{style.COLOR[status]}]{status.upper()}[/] {style.shown(test_id)}"
        if any(t.get("quarantined") for t in failing):
            head += " [dim](quarantined: reported apart, does not gate)[/]"
        if repeats > 1:
            head += style.shown(f" — {_which(failing, runs[test_id], repeats)}")
        console.print(head, highlight=False)
        reasons: dict[str, list[int]] = {}
        for t in failing:
            for reason in _reasons(t):
                reasons.setdefault(reason, []).append(t["repeat"])
        for reason, where in reasons.items():
            labels = ""
            if repeats > 1 and len(where) < len(failing):
                labels = " " + " ".join(reports.repeat_label(r, repeats) for r in where)
            console.print(
                f"  {style.shown_block(reason, MARGIN)}{style.shown(labels)}", highlight=False
            )
        for t in failing:
            label = reports.repeat_label(t["repeat"], repeats) if repeats > 1 else ""
            if details and t["metrics"]:  # the agent ran: what it spent and did
                said = terminal_tables.details(t)
                console.print(
                    f"  details{style.shown(' ' + label if label else '')}: {style.shown(said)}",
                    highlight=False,
                )
            _conversation(console, t, label)
            _received(console, t, label)
            _attempts(console, t, label)
            _captured(console, t, label)


def _conversation(console: Console, test: dict[str, Any], label: str = "") -> None:
    """A conversation's turns and end, where it went wrong, and that turn's user message and
    answer (their first lines; the JSON report has every turn)."""
    said = reports.conversation_summary(test)
    if not said:
        return
    where = f" {label}" if label else ""
    ended = test.get("ended") or {}
    detail = f" ({ended['detail']})" if ended.get("detail") else ""
    console.print(
        f"  conversation{style.shown(where)}: {style.shown(said + detail)}", highlight=False
    )
    wrong = reports.find_offtrack(test)
    if wrong is not None:
        console.print(f"  {style.shown(reports.offtrack_said(wrong))}", highlight=False)
    turn = reports.failing_turn(test)
    if turn is None:
        return
    number = turn.get("number")
    for who, text in (("user", turn.get("user")), ("agent", turn.get("output"))):
        lines = str(text or "").replace("\r\n", "\n").rstrip("\n").split("\n")
        more = f" … {len(lines) - TURN_LINES} more lines" if len(lines) > TURN_LINES else ""
        console.print(f"  turn {number} {who}:", highlight=False)
        for line in lines[:TURN_LINES]:
            cut = line if len(line) <= RECEIVED_CHARS else line[:RECEIVED_CHARS] + "…"
            console.print(f"{MARGIN}{visible.line(cut)}", markup=False, highlight=False)
        if more:
            console.print(f"{MARGIN}{more.strip()} in the JSON report", highlight=False)


def _received(console: Console, test: dict[str, Any], label: str = "") -> None:
    """What a timed-out agent had sent, its first lines (the JSON report has 64 KiB)."""
    partial = test.get("partial")
    if not partial:
        return
    where = f" {label}" if label else ""
    console.print(f"  {style.shown(reports.received(partial) + where)}:", highlight=False)
    text = partial.get("text") or ""
    lines = text.replace("\r\n", "\n").rstrip("\n").split("\n") if text else []
    for line in lines[:RECEIVED_LINES]:
        cut = line if len(line) <= RECEIVED_CHARS else line[:RECEIVED_CHARS] + "…"
        console.print(f"{MARGIN}{visible.line(cut)}", markup=False, highlight=False)
    if len(lines) > RECEIVED_LINES:
        more = len(lines) - RECEIVED_LINES
        console.print(f"{MARGIN}… {more} more lines in the JSON report", highlight=False)


def _attempts(console: Console, test: dict[str, Any], label: str = "") -> None:
    """The tries of a retried test: what each came to."""
    tries = test.get("attempts") or []
    where = f" {label}" if label else ""
    for n, attempt in enumerate(tries, 1):
        reason = attempt.get("reason")
        why = f" — {style.cause_word(attempt.get('cause'))}{reason}" if reason else ""
        console.print(
            f"  try {n} of {len(tries)}{style.shown(where)}: {attempt['status']}"
            f"{style.shown_block(why, MARGIN)}",
            highlight=False,
        )


def _captured(console: Console, test: dict[str, Any], label: str = "") -> None:
    """What the body printed, under its failure (the last lines; the JSON report has all).

    Split at newlines only: a carriage return, form feed or line separator in the output is
    shown as its escape on its line, not obeyed.
    """
    for stream in ("stdout", "stderr"):
        text = test.get(stream)
        if not text:
            continue
        lines = text.replace("\r\n", "\n").rstrip("\n").split("\n")
        many = len(lines) > CAPTURE_LINES
        shown = f" (last {CAPTURE_LINES} of {len(lines)} lines)" if many else ""
        where = f" {label}" if label else ""
        console.print(f"  captured {stream}{style.shown(where)}{shown}:", highlight=False)
        for line in lines[-CAPTURE_LINES:]:
            console.print(f"{MARGIN}{visible.line(line)}", markup=False, highlight=False)


def _key(t: dict[str, Any]) -> str:
    """A test's id, and its agent in an agent matrix."""
    return f"{t['id']} [{t['agent']}]" if t.get("agent") else str(t["id"])


def _which(failing: list[dict[str, Any]], runs: int, repeats: int) -> str:
    """``failed in all 3 repeats`` or ``failed in [1/3] [3/3], errored in [2/3]``."""
    ended = {t["status"] for t in failing}
    if len(failing) == runs and len(ended) == 1:
        return f"{failing[0]['status']} in all {runs} repeats"
    by_status: dict[str, list[str]] = {}
    for t in failing:
        by_status.setdefault(t["status"], []).append(reports.repeat_label(t["repeat"], repeats))
    return ", ".join(f"{status} in {' '.join(labels)}" for status, labels in by_status.items())


def _reasons(t: dict[str, Any]) -> list[str]:
    """Why one (test, repeat) did not pass: its error and each failed gate with evidence; a
    failed test's error came after its failed checks, and is listed after them."""
    found = []
    for s in t["signals"]:
        if s["role"] == "gate" and s["passed"] is False:
            detail = s["reasoning"] or json.dumps(s["evidence"], default=str)
            where = f" ({s['location']})" if s["location"] else ""
            found.append(f"✗ {s['name']}{where}: {detail}")
    if t["error"] and t["status"] == "failed":
        found.append(f"then: {t['error']}")
    elif t["error"]:
        found.insert(0, f"error: {style.cause_word(t.get('cause'))}{t['error']}")
    return found


def insights(console: Console, tests: list[dict[str, Any]], repeats: int) -> None:
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
                labels = " " + " ".join(reports.repeat_label(r, repeats) for r in where)
            console.print(f"\n[bold]insights[/] {style.shown(test_id + labels)}")
            if insight.get("error"):
                error = style.shown_block(insight["error"], MARGIN)
                console.print(f"  [yellow]insights error:[/] {error}")
                continue
            summary = style.shown_block(insight.get("summary", ""), MARGIN)
            console.print(f"  {summary}", highlight=False)
            if insight.get("why"):
                console.print(f"  why: {style.shown_block(insight['why'], MARGIN)}")
            wrong = insight.get("went_wrong")
            if isinstance(wrong, dict) and "turn" in wrong and "why" in wrong:
                console.print(f"  {style.shown(reports.offtrack_said(wrong))}", highlight=False)
            for rec in insight.get("recommendations") or []:
                console.print(f"  → {style.shown_block(rec, MARGIN)}", highlight=False)
