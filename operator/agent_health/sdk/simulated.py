"""``simulated_user(goal=...)`` — an LLM that plays the user of a conversation.

It is a user as :mod:`.conversation` takes them (a function of the conversation so far), so
``agent.run(prompt, user=simulated_user(...))`` runs it. Each time the agent has answered,
the user is asked, through the judge backend the engine installed (the judge's provider,
key and cache; in a cell the judge service), what it says next: a message, or that it stops
because its goal is met or will not be. The answer is a strict JSON object
(``agent_health.judging.simulating``); one that is not, or a model that cannot be reached,
errors the test with cause ``judge``.

Every question it asks is recorded as a neutral judge signal (``evidence.simulated_user``),
so its tokens count in the run's judge usage, its budgets and its cost, and a cache hit
(an unchanged replay) is seen as one. ``--no-simulate`` (``AGENT_HEALTH_SKIP_SIMULATE=1``),
or no judge model to ask, skips the test before the agent is called: a conversation
without its user checks nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent_health.sdk import context, errors, turns
from agent_health.sdk.results import Signal

NO_SIMULATE = (
    "simulated user skipped (--no-simulate): this test's conversation needs a simulated user"
)
NO_MODEL = (
    "simulated user skipped: it needs a model to play the user and no judge is configured; set "
    "judge={...} in agent-health.config.py or AGENT_HEALTH_JUDGE_PROVIDER/MODEL/BASE_URL"
)


class UserAsk(BaseModel):
    """One question to the simulated user's model: who it is, and the conversation so far."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    goal: str = Field(min_length=1)
    persona: str = ""
    facts: dict[str, str] = Field(default_factory=dict)
    stop_when: str = ""
    model: str | None = None
    conversation: tuple[dict[str, str], ...] = Field(
        description='[{"role": "user"|"agent", "content": ...}], oldest first'
    )
    turn: int = Field(ge=1, description="how many turns the agent has answered")
    repeat: int = Field(default=0, ge=0, description="part of the cache key, as the judge's")
    test_id: str = ""


class UserLine(BaseModel):
    """What the simulated user's model answered: a ``message``, or a ``stop`` and its
    ``reason``; ``errored`` with the ``error`` when it gave neither."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    message: str | None = None
    stop: Literal["goal-met", "gave-up"] | None = None
    reason: str = ""
    cached: bool = False
    errored: bool = False
    error: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@runtime_checkable
class UserSimulator(Protocol):
    """What a judge backend offers to play a simulated user (``agent_health.judging``)."""

    @property
    def simulates(self) -> bool:
        """Whether a model is there to ask."""
        ...

    async def simulate(self, ask: UserAsk) -> UserLine: ...


class SimulatedUser:
    """The user ``simulated_user(...)`` makes; ``agent.run(user=...)`` calls it."""

    __slots__ = ("facts", "goal", "max_turns", "model", "persona", "stop_when")

    def __init__(
        self,
        goal: str,
        *,
        persona: str = "",
        facts: Mapping[str, Any] | None = None,
        stop_when: str = "",
        model: str | None = None,
        max_turns: int | None = None,
    ) -> None:
        self.goal = goal
        self.persona = persona
        self.facts = {str(k): str(v) for k, v in (facts or {}).items()}
        self.stop_when = stop_when
        self.model = model
        self.max_turns = max_turns

    def before_conversation(self, ctx: context.TestContext) -> None:
        """Before the agent is called: skip the test when this user cannot speak."""
        if ctx.skip_simulate:
            raise errors.TestSkipped(NO_SIMULATE)
        backend = ctx.judge_backend
        if not isinstance(backend, UserSimulator) or not backend.simulates:
            raise errors.TestSkipped(NO_MODEL)

    async def __call__(self, conversation: turns.Conversation) -> str | turns.Stop:
        ctx = context.current("a simulated user")
        backend = ctx.judge_backend
        if not isinstance(backend, UserSimulator):  # before_conversation skipped it already
            raise errors.JudgeError(NO_MODEL, cause="judge")
        said: list[dict[str, str]] = []
        for turn in conversation.turns:
            said.append({"role": "user", "content": turn.user})
            said.append({"role": "agent", "content": turn.output})
        ask = UserAsk(
            goal=self.goal,
            persona=self.persona,
            facts=self.facts,
            stop_when=self.stop_when,
            model=self.model,
            conversation=tuple(said),
            turn=conversation.number,
            repeat=ctx.info.repeat,
            test_id=ctx.info.id,
        )
        try:
            with ctx.waiting("judge"):
                line = await backend.simulate(ask)
        except errors.JudgeError:
            raise  # a usage error (a model the judge service does not offer): the test's
        except Exception as err:  # the backend's failure is data, as a judge's is
            line = UserLine(errored=True, error=f"{type(err).__name__}: {err}")
        _record(ctx, conversation.number, line)
        if line.errored or (line.message is None and line.stop is None):
            raise errors.JudgeError(
                f"the simulated user could not answer after turn {conversation.number}: "
                f"{line.error or 'its model gave neither a message nor a stop'}",
                cause="judge",
            )
        if line.stop == "goal-met":
            return turns.Stop.goal_met(line.reason)
        if line.stop == "gave-up":
            return turns.Stop.gave_up(line.reason)
        assert line.message is not None
        return line.message

    def __repr__(self) -> str:
        return f"simulated_user(goal={self.goal!r})"


def _record(ctx: context.TestContext, turn: int, line: UserLine) -> None:
    """One neutral judge signal per question: what it said and what it cost."""
    if line.stop is not None:
        words = f"stopped: {line.stop}" + (f" ({line.reason})" if line.reason else "")
    else:
        words = line.message or ""
    ctx.record(
        Signal(
            kind="judge",
            role="neutral",
            name=f"simulated user after turn {turn}",
            passed=None,
            score=None,
            reasoning=words or None,
            error=line.error,
            location=context.caller_location(),
            evidence={
                "simulated_user": True,
                "turn": turn,
                "message": line.message,
                "stop": line.stop,
                "reason": line.reason,
                "cached": line.cached,
                "model": line.model,
                "skipped": False,
                "errored": line.errored,
                "input_tokens": line.input_tokens,
                "output_tokens": line.output_tokens,
            },
        )
    )


def simulated_user(
    goal: str,
    *,
    persona: str = "",
    facts: Mapping[str, Any] | None = None,
    stop_when: str = "",
    model: str | None = None,
    max_turns: int | None = None,
) -> SimulatedUser:
    """A user played by the judge's model, for ``agent.run(prompt, user=...)``.

    ``goal`` is what the user came for; ``persona`` how it talks; ``facts`` what it knows
    and reveals only when the agent asks (``{"order number": "5678"}``); ``stop_when`` when
    it stops (its goal met, or given up); ``model`` another model of the judge's endpoint;
    ``max_turns`` the conversation's limit when ``agent.run`` gives none. ::

        customer = simulated_user(
            goal="find out whether order 5678 was refunded",
            facts={"order number": "5678"},
            stop_when="the agent says what happened to the refund",
        )
        result = await agent.run("Did my refund go through?", user=customer)
        expect(result).to_meet_user_goal()
    """
    where = "simulated_user(...)"
    if not isinstance(goal, str) or not goal.strip():
        raise errors.AgentRunError(f"{where} needs a goal: what the user came for, as text")
    for name, value in (("persona", persona), ("stop_when", stop_when)):
        if not isinstance(value, str):
            raise errors.AgentRunError(f"{where}: {name} must be text, got {type(value).__name__}")
    if facts is not None and not isinstance(facts, Mapping):
        raise errors.AgentRunError(
            f"{where}: facts maps what the user knows to its value "
            f'({{"order number": "5678"}}), got {type(facts).__name__}'
        )
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise errors.AgentRunError(f"{where}: model must be a model name, got {model!r}")
    if max_turns is not None and (
        isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 2
    ):
        raise errors.AgentRunError(
            f"{where}: max_turns must be a whole number of at least 2 (the prompt is turn 1, "
            f"the user speaks from turn 2), got {max_turns!r}"
        )
    return SimulatedUser(
        goal,
        persona=persona,
        facts=facts,
        stop_when=stop_when,
        model=model,
        max_turns=max_turns,
    )
