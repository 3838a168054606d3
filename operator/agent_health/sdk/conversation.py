"""Many turns in one ``agent.run()``: scripted follow-ups, or a user who decides what to say.

Each turn is one request to the agent (:class:`AgentRequest` with the conversation so far
in ``messages``); the connector carries it the way its protocol does. The run ends when
the scripted turns are spent, when the user stops (:class:`~.turns.Stop`, or ``None``) or
at ``max_turns``; :class:`~.turns.ConversationEnd` says which.

A user is a function of the conversation so far (:class:`~.turns.Conversation`) returning
the next message, or a :class:`~.turns.Stop` / ``None`` to end it; it may be async. A
simulated user (an LLM with a goal) is such a function too.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent_health import connectors
from agent_health.connectors import base, protocol
from agent_health.connectors.protocol import AgentReply, AgentRequest, Message, Step, TokenUsage
from agent_health.sdk import context, errors, turns
from agent_health.sdk.results import RunResult

User = Callable[[turns.Conversation], "str | turns.Stop | Awaitable[Any] | None"]
"""What ``agent.run(user=...)`` takes."""

DEFAULT_MAX_TURNS = 10
"""A user-driven conversation's ``max_turns`` when the test gives none."""


def scripted(value: Sequence[str] | None, test: str) -> tuple[str, ...]:
    """``turns=[...]`` checked: a list of non-empty strings."""
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise errors.AgentRunError(
            f"test {test!r}: agent.run(turns=...) takes a list of follow-up messages, got "
            f"{type(value).__name__}"
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise errors.AgentRunError(
                f"test {test!r}: agent.run(turns=...)[{i}] must be a non-empty string, got {item!r}"
            )
    return tuple(value)


def turn_limit(max_turns: int | None, follow_ups: int, user: object, test: str) -> int:
    """The most turns this conversation may take (the prompt is turn 1)."""
    if max_turns is None:
        return follow_ups + 1 if user is None else max(DEFAULT_MAX_TURNS, follow_ups + 1)
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise errors.AgentRunError(
            f"test {test!r}: agent.run(max_turns=...) must be a whole number of at least 1, "
            f"got {max_turns!r}"
        )
    return max_turns


class Conversing:
    """One conversation through one agent caller: the turns so far and how it ended."""

    def __init__(
        self,
        call: Callable[[AgentRequest], Awaitable[AgentReply]],
        first: AgentRequest,
        *,
        follow_ups: tuple[str, ...],
        user: User | None,
        max_turns: int,
        test: str,
        replayed: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.call = call
        self.first = first
        self.follow_ups = follow_ups
        self.user = user
        self.max_turns = max_turns
        self.test = test
        self.replayed = replayed
        self.turns: list[turns.Turn] = []
        self.replies: list[AgentReply] = []

    async def run(self) -> turns.ConversationEnd:
        """Take turns until the conversation ends; a failed turn raises (the turns before
        it stay in :attr:`turns`)."""
        message = self.first.prompt
        while True:
            await self._take(message)
            ended, following = await self._next()
            if ended is not None:
                return ended
            assert following is not None
            message = following

    async def _take(self, message: str) -> None:
        number = len(self.turns) + 1
        history: list[Message] = []
        for turn in self.turns:
            history.append(Message(role="user", content=turn.user))
            history.append(Message(role="assistant", content=turn.output))
        request = self.first.model_copy(
            update={"prompt": message, "messages": tuple(history), "turn": number}
        )
        started = time.perf_counter()
        try:
            reply = await self.call(request)
        except connectors.ConnectorError as err:
            if number > 1 and f"turn {number}" not in str(err):  # which turn failed, first
                err.args = (f"turn {number}: {err}", *err.args[1:])
            raise
        duration_ms = (time.perf_counter() - started) * 1000
        recorded = self.replayed()  # a replay says how long the recorded turn took
        if recorded is not None:
            duration_ms = recorded
        steps = tuple(_in_turn(step, number) for step in reply.trajectory)
        self.replies.append(reply)
        self.turns.append(
            turns.Turn(
                number=number,
                user=message,
                output=reply.output,
                trajectory=steps,
                token_usage=reply.token_usage,
                duration_ms=duration_ms,
                unreported=reply.unreported,
            )
        )

    async def _next(self) -> tuple[turns.ConversationEnd | None, str | None]:
        """The next user message, or why the conversation ends here.

        At ``max_turns`` a user is still asked: an answer that met its goal on the last turn
        allowed ends ``goal-met``, not ``max-turns`` (only a user with more to say is cut off).
        """
        taken = len(self.turns)
        full = taken >= self.max_turns
        if taken - 1 < len(self.follow_ups):  # scripted turns left
            if full:
                return turns.ConversationEnd(reason="max-turns"), None
            return None, self.follow_ups[taken - 1]
        if self.user is None:
            return turns.ConversationEnd(reason="turns-done"), None
        said = self.user(turns.Conversation(tuple(self.turns)))
        if inspect.isawaitable(said):
            said = await said
        if said is None:
            return turns.ConversationEnd(reason="user-stopped"), None
        if isinstance(said, turns.Stop):
            return turns.ConversationEnd(reason=said.reason, detail=said.detail), None
        if not isinstance(said, str) or not said.strip():
            raise errors.AgentRunError(
                f"test {self.test!r}: the user of agent.run(user=...) returned {said!r} after "
                f"turn {taken}; return the next message (a non-empty string), or Stop() / "
                "None to end the conversation"
            )
        if full:  # what it would have said next is why the limit ended it
            return turns.ConversationEnd(reason="max-turns", detail=said), None
        return None, said

    def usage(self) -> TokenUsage:
        """The conversation's token usage: the sum of the turns' (unknown when any turn did
        not report it: a partial sum would read as the whole)."""
        if not self.turns or any(not t.token_usage.reported for t in self.turns):
            return TokenUsage()
        total = 0
        prompt: int | None = 0
        completion: int | None = 0
        for turn in self.turns:
            usage = turn.token_usage
            total += usage.total or 0
            prompt = None if prompt is None or usage.prompt is None else prompt + usage.prompt
            completion = (
                None
                if completion is None or usage.completion is None
                else completion + usage.completion
            )
        return TokenUsage(prompt=prompt, completion=completion, total=total)

    def unreported(self) -> frozenset[str]:
        """What any turn left out of its reply."""
        missing: set[str] = set()
        for turn in self.turns:
            missing |= turn.unreported
        return frozenset(missing)

    def raw(self) -> dict[str, Any]:
        """The last reply's fields beyond the protocol's (the model it used, for cost) and,
        when the turns spent their tokens on more than one model, ``usage_by_model`` over all
        of them: each turn's tokens are priced at its own model's price."""
        if not self.replies:
            return {}
        raw = dict(self.replies[-1].extra_fields())
        parts = [part for reply in self.replies for part in reply.parts_by_model]
        if len({part.model for part in parts}) > 1 or "usage_by_model" in raw:
            raw.pop("usage_by_model", None)
            if all(reply.token_usage.reported for reply in self.replies):  # else: unknown
                raw["usage_by_model"] = protocol.usage_json(protocol.by_model(parts))
        return raw


def _in_turn(step: Step, number: int) -> Step:
    return Step.model_validate({**step.model_dump(), "turn": number})


def support(caller: object) -> base.Conversations | None:
    """How ``caller``'s connector holds conversations, or ``None`` when it cannot."""
    return base.conversations_of(caller)


async def converse(
    ctx: context.TestContext,
    request: AgentRequest,
    holder: base.Conversations,
    follow_ups: tuple[str, ...],
    user: User | None,
    limit: int,
) -> RunResult:
    """Run a conversation: every turn through the agent caller, then one RunResult."""
    assert ctx.agent_caller is not None
    talk = Conversing(
        ctx.agent_caller,
        request,
        follow_ups=follow_ups,
        user=user,
        max_turns=limit,
        test=ctx.case.title,
        replayed=lambda: ctx.replayed_duration_ms,
    )
    started = time.perf_counter()
    began = time.time()
    try:
        with ctx.waiting("agent"):
            try:
                ended = await talk.run()
            except BaseException:
                if holder.end is not None:  # released; what failed is the turn's error
                    with contextlib.suppress(Exception):
                        await holder.end(request.run_id)
                raise
            if holder.end is not None:
                await holder.end(request.run_id)
    except Exception as err:
        ctx.agent_error = str(err) or type(err).__name__
        if isinstance(err, connectors.AgentTimeout):
            ctx.partial = err.partial
        if talk.turns:  # the turns answered before it failed stay in the result
            ctx.result = _result(ctx, request, talk, None, started)
        raise
    finally:
        ctx.agent_window = (began, time.time())  # every turn: one invoke_agent span
    result = _result(ctx, request, talk, ended, started)
    ctx.result = result
    return result


def _result(
    ctx: context.TestContext,
    request: AgentRequest,
    talk: Conversing,
    ended: Any,
    started: float,
) -> RunResult:
    taken = tuple(talk.turns)
    duration_ms = (time.perf_counter() - started) * 1000
    if ctx.replayed_duration_ms is not None:  # each turn took what it took when recorded
        duration_ms = sum(turn.duration_ms for turn in taken)
    return RunResult(
        run_id=request.run_id,
        prompt=request.prompt,
        context=request.context,
        output=taken[-1].output,
        trajectory=tuple(step for turn in taken for step in turn.trajectory),
        token_usage=talk.usage(),
        duration_ms=duration_ms,
        raw=talk.raw(),
        traceparent=request.traceparent,
        unreported=talk.unreported(),
        conversation=taken,
        ended=ended,
    )
