"""A conversation's pieces: each turn as it happened, why it ended, and what a user returns.

``agent.run(prompt, turns=[...])`` or ``agent.run(prompt, user=...)`` (:mod:`.conversation`)
makes one :class:`~agent_health.sdk.results.RunResult` whose ``turns`` are these
:class:`Turn` s and whose ``ended`` is a :class:`ConversationEnd`.
"""

from typing import Any, Literal

from pydantic import ConfigDict, Field

from agent_health.connectors import readonly
from agent_health.connectors.protocol import Step, TokenUsage

EndReason = Literal["turns-done", "user-stopped", "goal-met", "gave-up", "max-turns"]
"""Why a conversation ended:

* ``turns-done`` — every scripted turn (``turns=[...]``) was sent and answered;
* ``user-stopped`` — the user (a function or a simulated user) had nothing more to say;
* ``goal-met`` — the user said it got what it came for;
* ``gave-up`` — the user said it would not get it;
* ``max-turns`` — the conversation reached ``max_turns`` with the user still talking.
"""
END_REASONS: tuple[EndReason, ...] = (
    "turns-done",
    "user-stopped",
    "goal-met",
    "gave-up",
    "max-turns",
)


class Turn(readonly.ReadOnlyModel):
    """One turn: what the user said and everything the agent did to answer it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    number: int = Field(ge=1, description="1 for the prompt, 2 for the first follow-up, ...")
    user: str = Field(description="the user's message of this turn")
    output: str = Field(default="", description="the agent's answer")
    trajectory: tuple[Step, ...] = ()
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    duration_ms: float = 0.0
    unreported: frozenset[str] = frozenset()


class ConversationEnd(readonly.ReadOnlyModel):
    """Why a conversation ended, and in whose words."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    reason: EndReason
    detail: str = Field(default="", description="what the user said of it, if anything")


class Stop:
    """What a user returns to end the conversation (returning ``None`` is ``Stop()``).

    ``Stop.goal_met("got the refund")`` and ``Stop.gave_up("no order lookup")`` say how it
    ended for the user; ``expect(result).to_meet_user_goal()`` gates on the first.
    """

    __slots__ = ("detail", "reason")

    def __init__(self, detail: str = "", *, reason: EndReason = "user-stopped") -> None:
        if reason not in ("user-stopped", "goal-met", "gave-up"):
            raise ValueError(
                f"a user stops with reason 'user-stopped', 'goal-met' or 'gave-up', not {reason!r}"
            )
        self.reason: EndReason = reason
        self.detail = str(detail)

    @classmethod
    def goal_met(cls, detail: str = "") -> "Stop":
        return cls(detail, reason="goal-met")

    @classmethod
    def gave_up(cls, detail: str = "") -> "Stop":
        return cls(detail, reason="gave-up")

    def __repr__(self) -> str:
        return f"Stop({self.detail!r}, reason={self.reason!r})"


class Conversation:
    """The conversation so far, as a user sees it before it speaks again."""

    __slots__ = ("turns",)

    def __init__(self, turns: tuple[Turn, ...]) -> None:
        self.turns = turns

    @property
    def last_output(self) -> str:
        """The agent's latest answer."""
        return self.turns[-1].output if self.turns else ""

    @property
    def number(self) -> int:
        """How many turns have been answered."""
        return len(self.turns)

    def messages(self) -> list[dict[str, str]]:
        """``[{"role": "user"|"assistant", "content": ...}]``, oldest first."""
        out: list[dict[str, str]] = []
        for turn in self.turns:
            out.append({"role": "user", "content": turn.user})
            out.append({"role": "assistant", "content": turn.output})
        return out

    def __repr__(self) -> str:
        return f"Conversation({self.number} turns)"


def from_record(
    recorded: list[dict[str, Any]] | None, trajectory: tuple[Step, ...]
) -> tuple[Turn, ...]:
    """A run-result record's ``turns`` (plain JSON data) as :class:`Turn` s, each with the
    steps of ``trajectory`` marked with its number; ``()`` for a single run's record."""
    if not recorded:
        return ()
    out = []
    for entry in recorded:
        number = int(entry["number"])
        out.append(
            Turn(
                number=number,
                user=str(entry.get("user", "")),
                output=str(entry.get("output", "")),
                trajectory=tuple(s for s in trajectory if s.turn == number),
                token_usage=TokenUsage.from_counts(entry.get("token_usage")) or TokenUsage(),
                duration_ms=float(entry.get("duration_ms") or 0.0),
                unreported=frozenset(entry.get("unreported") or ()),
            )
        )
    return tuple(out)


def end_of_record(recorded: dict[str, str] | None) -> ConversationEnd | None:
    """A run-result record's ``ended``, or ``None``."""
    return ConversationEnd.model_validate(recorded) if recorded else None
