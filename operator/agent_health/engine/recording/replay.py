"""Replaying a recorded run: ``agent-health run --replay REPORT_OR_DIR``.

Every run that records a ledger (the default; a cluster's cells always do) keeps, per
(test, repeat), what ``agent.run()`` returned: the ``run-result`` record
(:func:`.runrecord.run_record`). A replay runs the *current* test bodies and answers
``agent.run()`` from those records instead of calling the agent, so assertions, judges,
metrics and insights can be changed and run again without the agent (and, through the judge
cache, without paying for unchanged judge calls).

Where the recording comes from, and whether it can be trusted: :mod:`.recordings`.

What is matched (:class:`Replayer`): the test id and repeat (and, in a recorded agent
matrix, the agent) pick the record; the prompt and
context the body sends must be the recorded ones. A body that asks something else errors
with "prompt differs from the recording" and cause ``test``: the test changed, so the
recording says nothing about how the agent would answer the new prompt — it must count
neither for nor against the agent (``agent`` would), and nothing outside the test is at
fault (``infra`` would say so); rerun against the agent to record the new prompt. A test
with no record errors the same way. A record cut to the recording's caps is errored with
cause ``infra`` (the storage, not the test, lacks the answer). A recorded failure of
``agent.run()`` (an HTTP 500, a timeout) is raised again with its recorded cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_health import connectors
from agent_health.connectors.protocol import AgentReply, AgentRequest, Step, TokenUsage
from agent_health.ledger import records
from agent_health.sdk import context, errors

DIFFERS = "prompt differs from the recording"

Key = tuple[str | None, str, int]
"""A recorded run: (agent in a matrix or ``None``, test id, repeat)."""


class ReplayError(errors.AgentHealthError):
    """A recording that cannot be found or read (a usage error before the run starts), or
    one that cannot answer this test's ``agent.run()`` (the test errors)."""

    def __init__(self, message: str, *, cause: str = "test") -> None:
        super().__init__(message)
        self.error_cause = cause


class RecordedFailure(connectors.ConnectorError):
    """``agent.run()`` failed when it was recorded; the replay fails the same way."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.error_cause = cause


@dataclass(frozen=True)
class Recorded:
    """One (test, repeat) of the recording."""

    test_id: str
    repeat: int
    cell: str
    run_id: str
    run: records.RunResultRecord | None
    """``None``: the recorded body never called ``agent.run()``."""
    agent: str | None = None
    """The agent of a recorded agent matrix (``--agent a --agent b``); ``None`` otherwise."""

    @property
    def key(self) -> Key:
        return (self.agent, self.test_id, self.repeat)


@dataclass
class Recording:
    """Every recorded (test, repeat) of a run, and where they came from."""

    source: str
    ledger: str
    runs: dict[Key, Recorded] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Cells whose records could not be read, and why."""
    order: list[str] = field(default_factory=list)
    """A matrix's agents in the order the recorded run's report lists them."""
    verified: bool = False
    """Every cell's HMAC chain (and a run file's seal) verified with the ledger's key."""
    checked_with: str = ""
    """The key it was verified with (``key file DIR.key``), or why it was not."""

    @property
    def note(self) -> str:
        """What a replay says of its recording before it runs."""
        if self.verified:
            return f"replaying {self.ledger}: the recording verified with the {self.checked_with}"
        return (
            f"replaying an UNVERIFIED recording: {self.checked_with}; its records could "
            "have been edited since they were recorded (the report marks it unverified)"
        )

    @property
    def repeats(self) -> int:
        """The repeats the recorded run made (at least 1)."""
        return max((repeat for _, _, repeat in self.runs), default=0) + 1

    @property
    def agents(self) -> list[str]:
        """The agents of a recorded agent matrix, in the order the run named them (empty
        when it ran one agent): a replay runs the same matrix."""
        named = [a for a in self.order if any(k[0] == a for k in self.runs)]
        rest = sorted({k[0] for k in self.runs if k[0] is not None} - set(named))
        return [*named, *rest]

    def run_id(self, test_id: str, repeat: int, agent: str | None = None) -> str | None:
        """The recorded run id: the replay reuses it, so traces of the run are found again."""
        found = self.runs.get((agent, test_id, repeat))
        return found.run_id if found is not None else None


class Replayer:
    """The agent caller of a replay: answers ``agent.run()`` from the recording.

    A recorded conversation is answered turn by turn: each turn's user message (and the
    conversation before it) must be the recorded one, and the conversation must end where
    the recorded one ended; a body (or a simulated user) that says something else errors
    with cause ``test``, as a changed prompt does.
    """

    holds_conversations = True

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.answered = 0
        self._turns: dict[str, int] = {}
        """Per run id: how many turns of its recorded conversation were answered."""

    async def __call__(self, request: AgentRequest) -> AgentReply:
        ctx = context.current("agent.run()")
        key = (ctx.info.agent, ctx.info.id, ctx.info.repeat)
        found = self.recording.runs.get(key)
        repeat = f" repeat {ctx.info.repeat + 1}" if ctx.info.repeat else ""
        agent = f" against agent {ctx.info.agent!r}" if ctx.info.agent else ""
        test = f"test {ctx.info.title!r}{repeat}{agent}"
        if found is None:
            raise ReplayError(
                f"no recording of {test} in {self.recording.source} "
                f"({self._why_missing(key)}); run it against the agent to record it"
            )
        run = found.run
        if run is None:
            raise ReplayError(
                f"the recorded run of {test} never called agent.run() (cell "
                f"{found.cell}); run it against the agent to record it"
            )
        if run.truncated:
            raise ReplayError(
                f"the recording of {test} was cut to its caps "
                f"({', '.join(run.truncated[:3])}): it is not the whole answer; run it "
                "against the agent",
                cause="infra",
            )
        if request.turn > 1 or run.turns:
            return self._turn(request, run, ctx, test)
        if (run.prompt or "") != request.prompt:
            raise ReplayError(
                f"{DIFFERS} ({test}): recorded {_snip(run.prompt or '')!r}, the body now sends "
                f"{_snip(request.prompt)!r}; run it against the agent to record the new prompt"
            )
        self._check_context(request, run, test)
        if run.error is not None:
            raise RecordedFailure(f"{run.error} (replayed)", cause=run.cause or "agent")
        ctx.replayed_duration_ms = run.duration_ms
        self.answered += 1
        return _reply(run)

    def _turn(
        self,
        request: AgentRequest,
        run: records.RunResultRecord,
        ctx: context.TestContext,
        test: str,
    ) -> AgentReply:
        """Answer turn ``request.turn`` of a recorded conversation."""
        recorded = run.turns or []
        number = request.turn
        if number == 1:
            self._check_context(request, run, test)
        if not request.conversation and len(recorded) > 1:
            raise ReplayError(
                f"conversation differs from the recording ({test}): the recording is a "
                f"conversation of {len(recorded)} turns, the body now makes a single run; run "
                "it against the agent to record it"
            )
        if number > len(recorded):
            if run.error is not None:  # the recording failed at this very turn
                raise RecordedFailure(f"{run.error} (replayed)", cause=run.cause or "agent")
            why = (run.ended or {}).get("reason", "a single run")
            raise ReplayError(
                f"conversation differs from the recording ({test}): the recorded one ended "
                f"after {len(recorded) or 1} turns ({why}), the body now sends turn {number}; "
                "run it against the agent to record it"
            )
        said = recorded[number - 1].get("user", "")
        if said != request.prompt:
            raise ReplayError(
                f"conversation differs from the recording at turn {number} ({test}): recorded "
                f"{_snip(str(said))!r}, the body now sends {_snip(request.prompt)!r}; run it "
                "against the agent to record the new conversation"
            )
        self._turns[request.run_id] = number
        entry = recorded[number - 1]
        ctx.replayed_duration_ms = float(entry.get("duration_ms") or 0.0)
        self.answered += 1
        steps = [s for s in run.trajectory if s.get("turn") == number]
        fields: dict[str, Any] = dict(run.raw or {}) if number == len(recorded) else {}
        if "trajectory" not in (entry.get("unreported") or ()):
            fields["trajectory"] = tuple(Step.model_validate(s) for s in steps)
        if "token_usage" not in (entry.get("unreported") or ()):
            fields["token_usage"] = TokenUsage.from_counts(entry.get("token_usage")) or TokenUsage()
        return AgentReply(output=str(entry.get("output", "")), **fields)

    async def end_conversation(self, run_id: str) -> None:
        """A replayed conversation must end where the recorded one did."""
        taken = self._turns.pop(run_id, 0)
        ctx = context.current("agent.run()")
        found = self.recording.runs.get((ctx.info.agent, ctx.info.id, ctx.info.repeat))
        run = found.run if found is not None else None
        if run is None or run.error is not None or not taken:
            return  # nothing answered, or the recording failed: that error says it
        recorded = len(run.turns or [])
        if taken < recorded:
            raise ReplayError(
                f"conversation differs from the recording (test {ctx.info.title!r}): it "
                f"ended after {taken} turns, the recorded one went on to {recorded}; run it "
                "against the agent to record the new conversation"
            )

    def _check_context(
        self, request: AgentRequest, run: records.RunResultRecord, test: str
    ) -> None:
        sent = [{"description": c.description, "value": c.value} for c in request.context]
        if [
            {"description": c.get("description", ""), "value": c.get("value", "")}
            for c in run.context
        ] != sent:
            raise ReplayError(
                f"context differs from the recording ({test}; the prompt is the same); run it "
                "against the agent to record the new context"
            )

    def _why_missing(self, key: Key) -> str:
        if self.recording.unreadable:
            cell, reason = next(iter(self.recording.unreadable.items()))
            return (
                f"{len(self.recording.unreadable)} recorded cells could not be read, e.g. "
                f"{cell}: {reason}"
            )
        if any(test_id == key[1] for _, test_id, _ in self.recording.runs):
            return f"it recorded {self.recording.repeats} repeats of it"
        return "the recorded run did not run this test"


def _reply(run: records.RunResultRecord) -> AgentReply:
    """The recorded answer as the connector would have returned it: what the agent left out
    (its trajectory, its token usage) is left out again."""
    fields: dict[str, Any] = dict(run.raw or {})
    unreported = set(run.unreported or ())
    if "trajectory" not in unreported:
        fields["trajectory"] = tuple(Step.model_validate(s) for s in run.trajectory)
    if "token_usage" not in unreported:
        fields["token_usage"] = TokenUsage.from_counts(run.token_usage) or TokenUsage()
    return AgentReply(output=run.output, **fields)


def _snip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
