"""Matchers on a conversation (``agent.run(turns=...)`` / ``user=...``): how many turns it
took, what the agent asked the user for, and whether the user got what it came for.

``to_meet_user_goal`` makes the user's own stop reason a gate: it passes only when the user
(a function returning ``Stop.goal_met(...)``, or a simulated user) said its goal was met.
``to_have_asked_for`` searches the agent's answers with a regex, or (``judge=True``) asks
the judge whether the agent asked for it, with the whole conversation as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Literal, overload

from agent_health.sdk import check, errors
from agent_health.sdk.check import evidence
from agent_health.sdk.results import RunResult, Signal

if TYPE_CHECKING:
    from agent_health.sdk.verdict import Verdict

ANSWER_CHARS = 300
"""How much of each answer the evidence of ``to_have_asked_for`` keeps."""


def _run(value: object, matcher: str) -> RunResult:
    if not isinstance(value, RunResult):
        raise errors.MatcherUsageError(
            f"expect(...).{matcher} needs a RunResult (what agent.run() returned), "
            f"got {type(value).__name__}"
        )
    return value


def _ending(result: RunResult) -> dict[str, str] | None:
    return result.ended.model_dump() if result.ended is not None else None


class TalkMatchers(check.Check):
    """``expect(result)`` on a conversation's :class:`~agent_health.sdk.results.RunResult`
    (a single run is a conversation of one turn)."""

    __slots__ = ()

    def to_finish_within_turns(self, n: int, *, weight: float = 1.0) -> Signal:
        """The conversation ended within ``n`` turns, and not because it ran out of them
        (``max-turns``: the user was still talking)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise errors.MatcherUsageError(
                f"to_finish_within_turns(n) takes a whole number of turns, at least 1; got {n!r}"
            )
        result = _run(self._value, "to_finish_within_turns")
        taken = len(result.turns)
        cut_off = result.ended is not None and result.ended.reason == "max-turns"
        return self._record(
            f"to_finish_within_turns({n})",
            taken <= n and not cut_off,
            evidence(
                {"turns": f"<= {n}", "ended": "not max-turns"},
                {"turns": taken, "ended": _ending(result)},
            ),
            weight,
        )

    @overload
    def to_have_asked_for(
        self, pattern: str | re.Pattern[str], *, judge: Literal[False] = ..., weight: float = ...
    ) -> Signal: ...

    @overload
    def to_have_asked_for(
        self, pattern: str, *, judge: Literal[True], weight: float = ...
    ) -> Awaitable[Verdict]: ...

    def to_have_asked_for(
        self, pattern: str | re.Pattern[str], *, judge: bool = False, weight: float = 1.0
    ) -> Signal | Awaitable[Verdict]:
        """The agent asked the user for something: ``pattern`` (a regex) found in one of its
        answers — ``expect(result).to_have_asked_for(r"order (number|id)")``.

        With ``judge=True`` the judge decides, from the whole conversation, whether the agent
        asked for what ``pattern`` describes:
        ``await expect(result).to_have_asked_for("the order number", judge=True)``.
        """
        result = _run(self._value, "to_have_asked_for")
        if judge:
            from agent_health.sdk import judges  # loaded by the first call that judges

            if not isinstance(pattern, str) or not pattern.strip():
                raise errors.MatcherUsageError(
                    "to_have_asked_for(..., judge=True) takes what the agent should have asked "
                    f"for, in words; got {pattern!r}"
                )
            return judges.ask(
                self._ctx,
                result,
                f"At some turn of the conversation, the agent asked the user for {pattern}.",
                role="gate",
                weight=weight,
            )
        try:
            rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        except re.error as err:
            raise errors.MatcherUsageError(
                f"to_have_asked_for({pattern!r}): not a regular expression ({err})"
            ) from err
        found = [t.number for t in result.turns if rx.search(t.output)]
        return self._record(
            f"to_have_asked_for({rx.pattern!r})",
            bool(found),
            evidence(
                {"pattern": rx.pattern, "in": "the agent's answers"},
                {
                    "turns": found,
                    "answers": [
                        {"turn": t.number, "output": t.output[:ANSWER_CHARS]} for t in result.turns
                    ],
                },
            ),
            weight,
        )

    def to_meet_user_goal(self, *, weight: float = 1.0) -> Signal:
        """The user said its goal was met (``Stop.goal_met``, or a simulated user's
        ``goal-met``); it fails on any other ending, naming it and the user's words."""
        result = _run(self._value, "to_meet_user_goal")
        if result.ended is None:
            raise errors.MatcherUsageError(
                "to_meet_user_goal() needs a conversation with a user: "
                "agent.run(prompt, user=...) (this run was a single turn)"
            )
        ended = result.ended
        return self._record(
            "to_meet_user_goal()",
            ended.reason == "goal-met",
            evidence(
                {"reason": "goal-met"},
                {"reason": ended.reason, "detail": ended.detail, "turns": len(result.turns)},
            ),
            weight,
        )
