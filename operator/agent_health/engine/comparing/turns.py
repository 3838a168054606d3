"""What ``compare`` says of conversations: per (test, repeat) in both reports, how its
conversation moved turn by turn.

Three changes are named, each with the turn or numbers it concerns:

* **turns** — it took more (or fewer) turns: ``took 4 turns, was 3``;
* **ended** — it ended for another reason: ``ended gave-up, was goal-met``;
* **tools** — a turn both conversations reached called other tools, or the same tools with
  other arguments: ``turn 2 called lookup_order {"order_id": "4444"}, was lookup_order
  {"order_id": "1234"}``.

A change is **worse** when the conversation took more turns, lost a ``goal-met``, or now
ends ``gave-up`` or ``max-turns`` where it did not. Only ``--max-conversations-worse N``
makes worse conversations fail the gate: a test's own checks say whether the agent passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_health.engine import reports
from agent_health.traces import metrics

Kind = Literal["turns", "ended", "tools"]


class TurnChange(BaseModel):
    """One way one conversation moved between BASE and NEW."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    name: str
    repeat: int
    kind: Kind
    turn: int | None = None
    base: str
    new: str
    worse: bool
    text: str


def changes(
    before: Mapping[tuple[str, int], dict[str, Any]],
    after: Mapping[tuple[str, int], dict[str, Any]],
) -> list[TurnChange]:
    """Every conversation change of the (test, repeat)s in both reports, NEW's order."""
    found: list[TurnChange] = []
    for key, now in after.items():
        was = before.get(key)
        if was is None or not (was.get("turns") or now.get("turns")):
            continue
        found.extend(_of(key, was, now))
    return found


def _of(key: tuple[str, int], was: dict[str, Any], now: dict[str, Any]) -> list[TurnChange]:
    name = str(now.get("name", key[0]))

    def change(
        kind: Kind, base: str, new: str, worse: bool, text: str, turn: int | None = None
    ) -> TurnChange:
        return TurnChange(
            id=key[0],
            name=name,
            repeat=key[1],
            kind=kind,
            turn=turn,
            base=base,
            new=new,
            worse=worse,
            text=text,
        )

    out = []
    n0, n1 = len(was.get("turns") or []), len(now.get("turns") or [])
    if n0 != n1:
        out.append(change("turns", str(n0), str(n1), n1 > n0, f"took {n1} turns, was {n0}"))
    r0, r1 = _reason(was), _reason(now)
    if r0 != r1:
        lost = r0 == "goal-met" or (r1 in reports.ENDED_BADLY and r0 not in reports.ENDED_BADLY)
        out.append(change("ended", r0, r1, lost, f"ended {r1}, was {r0}"))
    calls0, calls1 = _calls(was), _calls(now)
    for turn in range(1, min(n0, n1) + 1):
        c0, c1 = calls0.get(turn, []), calls1.get(turn, [])
        if c0 != c1:
            b, n = _said(c0), _said(c1)
            out.append(change("tools", b, n, False, f"turn {turn} called {n}, was {b}", turn))
    return out


def _reason(entry: dict[str, Any]) -> str:
    """Why it ended; ``single run`` for an entry that was no conversation."""
    if not entry.get("turns"):
        return "single run"
    return str((entry.get("ended") or {}).get("reason") or "unknown")


def _calls(entry: dict[str, Any]) -> dict[int, list[tuple[str, str]]]:
    """Per turn, its tool calls in order: (tool, canonical arguments)."""
    single = not entry.get("turns")
    by_turn: dict[int, list[tuple[str, str]]] = {}
    for step in entry.get("trajectory") or []:
        if step.get("type") != "tool_call":
            continue
        turn = 1 if single else step.get("turn")
        if isinstance(turn, int):
            name = str(step.get("tool_name") or "?")
            args = metrics.canonical_args(step.get("tool_args") or {})
            by_turn.setdefault(turn, []).append((name, args))
    return by_turn


def _said(calls: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name} {args}" for name, args in calls) or "no tools"
