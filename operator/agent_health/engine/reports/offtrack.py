"""Where a conversation went wrong, the one turn a reader should look at first, and how
every reporter sums a conversation up (``3 turns, goal-met``).

Read from a JSON report entry (``turns``, ``ended``, the ``trajectory``'s steps marked with
their ``turn``, the ``signals``' evidence), so the terminal, JUnit and insights all name the
same turn. The rule, first match wins:

1. the first turn with a failed tool result (``status: error``): the agent went on from a
   broken tool call;
2. else the first turn a failed gate was checked on (its evidence names the ``turn``: a
   check or judge on ``result.turn(n)``);
3. else, when the conversation ended ``gave-up`` or ``max-turns``, its last turn: the
   conversation went off track after it, and the user left (or was still asking).

A single run (no ``turns``), and a conversation where none of these happened, has none.
"""

from __future__ import annotations

from typing import Any

ENDED_BADLY = ("gave-up", "max-turns")


def find(entry: dict[str, Any]) -> dict[str, Any] | None:
    """``{"turn": n, "why": "..."}`` for ``entry``'s conversation, or ``None``."""
    turns = entry.get("turns") or []
    if not turns:
        return None
    for step in entry.get("trajectory") or []:
        if step.get("type") == "tool_result" and step.get("status") == "error":
            turn = step.get("turn")
            if isinstance(turn, int):
                tool = step.get("tool_name") or "a tool"
                return {"turn": turn, "why": f"{tool} returned an error"}
    for signal in entry.get("signals") or []:
        turn = (signal.get("evidence") or {}).get("turn")
        if signal.get("role") == "gate" and signal.get("passed") is False and isinstance(turn, int):
            return {"turn": turn, "why": f"{signal.get('name')} failed on it"}
    ended = entry.get("ended") or {}
    if ended.get("reason") in ENDED_BADLY:
        last = turns[-1].get("number", len(turns))
        if ended["reason"] == "gave-up":
            detail = f": {ended['detail']}" if ended.get("detail") else ""
            return {"turn": last, "why": f"the user gave up after it{detail}"}
        return {"turn": last, "why": "the conversation reached max_turns after it"}
    return None


def said(found: dict[str, Any]) -> str:
    """How reporters word it: ``went wrong at turn 2: lookup_order returned an error``."""
    return f"went wrong at turn {found['turn']}: {found['why']}"


def summary(entry: dict[str, Any]) -> str:
    """``3 turns, goal-met`` for a conversation's entry; ``""`` for a single run. The reason
    only: the user's ``detail`` is outside text, shown where a block can hold it."""
    turns = entry.get("turns") or []
    if not turns:
        return ""
    words = f"{len(turns)} turn" + ("" if len(turns) == 1 else "s")
    reason = (entry.get("ended") or {}).get("reason")
    return f"{words}, {reason}" if reason else words


def failing_turn(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The turn a failure block shows (its ``user`` message and ``output``): where the
    conversation went wrong, else its last answered turn; ``None`` for a single run."""
    turns = entry.get("turns") or []
    if not turns:
        return None
    wrong = find(entry)
    if wrong is not None:
        chosen = next((t for t in turns if t.get("number") == wrong["turn"]), None)
        if chosen is not None:
            return dict(chosen)
    return dict(turns[-1])
