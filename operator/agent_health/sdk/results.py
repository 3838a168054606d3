"""Immutable results: RunResult (one agent.run), Signal (one observation), TestResult (a judge's
answer, :class:`~agent_health.sdk.verdict.Verdict`, is made by the first ``judge()``)."""

import contextvars
import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from agent_health import statuses
from agent_health.connectors import readonly
from agent_health.connectors.partial import Partial
from agent_health.connectors.protocol import ContextItem, TokenUsage
from agent_health.connectors.protocol import Step as Step  # the SDK's face shows it
from agent_health.sdk import errors
from agent_health.sdk import turns as turns_mod

Status = statuses.Status
"""A test's result (:data:`agent_health.statuses.Status`)."""
Cause = statuses.Cause
"""Why a test errored (:data:`agent_health.statuses.Cause`)."""
CAUSES = statuses.CAUSES
SignalKind = Literal["deterministic", "judge", "metric"]
Role = Literal["gate", "observe", "neutral"]


class Trajectory(tuple[Step, ...]):
    """The agent's steps, in order, with helpers for the common questions."""

    def tool_calls(self, name: str | None = None) -> list[Step]:
        """Every ``tool_call`` step, optionally only those of tool ``name``."""
        return [s for s in self if s.type == "tool_call" and (name is None or s.tool_name == name)]

    def first_tool_call(self, name: str | None = None) -> Step | None:
        calls = self.tool_calls(name)
        return calls[0] if calls else None

    def steps_of_type(self, kind: str) -> list[Step]:
        return [s for s in self if s.type == kind]

    def tool_errors(self) -> list[Step]:
        return [s for s in self if s.failed]


TraceResolver = Callable[["RunResult"], Any]
"""Makes the traces view of a run; the engine binds one per test (see :func:`bind_traces`)."""

_resolver: contextvars.ContextVar[TraceResolver] = contextvars.ContextVar("agent_health_traces")


def bind_traces(resolver: TraceResolver) -> contextvars.Token[TraceResolver]:
    """Called by the engine in the test's own task: how ``result.traces`` is resolved."""
    return _resolver.set(resolver)


def unbind_traces(token: contextvars.Token[TraceResolver]) -> None:
    _resolver.reset(token)


class RunResult(readonly.ReadOnlyModel):
    """The immutable capture of one ``agent.run()``.

    Read-only all the way down: its fields, its steps and their arguments and outputs, the
    raw answer, the token usage and what :meth:`json` returns all raise ``TypeError`` on
    any change, so what matchers, metrics, judges and the ledger read is what the agent
    answered. Copy a part (``dict(step.tool_args)``) to change a copy.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, arbitrary_types_allowed=True)

    run_id: str
    prompt: str
    context: tuple[ContextItem, ...] = ()
    output: str = ""
    trajectory_steps: tuple[Step, ...] = Field(default=(), alias="trajectory")
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    duration_ms: float = 0.0
    raw: dict[str, Any] = Field(default_factory=dict)
    traceparent: str | None = None
    unreported: frozenset[str] = Field(
        default=frozenset(),
        description='what the agent left out of its reply: "trajectory", "token_usage" '
        "(unknown, not empty: a check that needs it fails saying so)",
    )
    conversation: tuple[turns_mod.Turn, ...] = Field(
        default=(),
        description="the turns of a conversation (agent.run(turns=...) or user=...); empty "
        "for a single run (whose one turn :attr:`turns` still gives)",
    )
    ended: turns_mod.ConversationEnd | None = Field(
        default=None, description="why the conversation ended; None for a single run"
    )
    _traces: Any = PrivateAttr(default=None)
    _turn: int | None = PrivateAttr(default=None)

    @field_validator("raw", mode="after")
    @classmethod
    def _read_only(cls, value: dict[str, Any]) -> dict[str, Any]:
        frozen: dict[str, Any] = readonly.freeze(value)
        return frozen

    @property
    def trajectory(self) -> Trajectory:
        return Trajectory(self.trajectory_steps)

    @property
    def trajectory_reported(self) -> bool:
        """Whether the agent reported its steps (an empty list is a report: no steps)."""
        return "trajectory" not in self.unreported

    def tool_calls(self, name: str | None = None) -> list[Step]:
        return self.trajectory.tool_calls(name)

    @property
    def turns(self) -> tuple[turns_mod.Turn, ...]:
        """Every turn, first to last: a single run is one turn."""
        return _every(self)

    def turn(self, number: int) -> "RunResult":
        """Turn ``number`` (from 1) as a run of its own, for the same matchers and judges:
        ``expect(result.turn(2)).to_have_called_tool("lookup_order")``."""
        one = _one(self, number)
        if one is not self:  # a turn of a conversation: its checks and verdicts name it
            one._turn = number
        return one

    @property
    def turn_number(self) -> int | None:
        """Which turn of a conversation this run is (``result.turn(n)``); ``None`` for a whole
        run. A check or judge on it records ``turn`` in its evidence, so reports can show its
        verdict beside that turn."""
        return self._turn

    def json(self) -> Any:  # type: ignore[override]
        """The output parsed as JSON (raises a clear error when it is not JSON)."""
        try:
            return readonly.freeze(json.loads(self.output))
        except ValueError as err:
            raise errors.ExpectationFailed(
                f"agent output is not JSON: {self.output[:120]!r}"
            ) from err

    @property
    def traces(self) -> Any:
        """This run's trace (a ``TracesView``), resolved on first use.

        Reading is async: ``await result.traces.total_tokens()``,
        ``await result.traces.spans()``, or ``trace = await result.traces.load()`` and then
        ``trace.total_tokens``. Raises when traces are not enabled for the agent.
        """
        if self._traces is None:
            resolver = _resolver.get(None)
            if resolver is None:
                raise errors.AgentHealthError(
                    f"traces of run {self.run_id} can only be read inside the test that ran it"
                )
            self._traces = resolver(self)
        return self._traces

    def kept(self) -> dict[str, Any]:
        """What a :class:`TestResult` keeps of this run (its fields of the same names)."""
        return {
            "prompt": self.prompt,
            "context": self.context,
            "output": self.output,
            "trajectory": self.trajectory_steps,
            "token_usage": self.token_usage,
            "turns": self.conversation,
            "ended": self.ended,
        }

    def attach_traces(self, view: Any) -> None:
        """Attach the traces view (the engine does this; a test never needs to)."""
        self._traces = view


class Signal(BaseModel):
    """One observation recorded during a test."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: SignalKind
    role: Role
    name: str
    passed: bool | None
    score: float | None = None
    weight: float = 1.0
    evidence: dict[str, Any] | None = None
    reasoning: str | None = None
    error: str | None = None
    location: str | None = None

    def or_throw(self) -> "Signal":
        """Stop the body here when this check failed: ``expect(x).to_equal(1).or_throw()``."""
        if self.passed is False and self.role == "gate":
            # This signal already fails the test: stopping here must not count it twice.
            raise errors.ExpectationFailed(f"{self.name} failed: {self.evidence}", recorded=True)
        return self


class Attempt(BaseModel):
    """One try of a test that was retried (``--retries N``): what it came to, and why."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    status: Status
    reason: str | None = Field(
        default=None, description="the error of an errored try; the failed checks of a failed one"
    )
    cause: Cause | None = None
    score: float | None = None
    duration_ms: float = 0.0
    run_id: str


class TestResult(BaseModel):
    """The outcome of one (test, repeat)."""

    __test__ = False
    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    name: str
    title: str
    file: str
    line: int
    labels: tuple[str, ...] = ()
    repeat: int = 0
    status: Status
    score: float | None = None
    error: str | None = None
    cause: Cause | None = Field(
        default=None, description="why an errored test errored; None for any other status"
    )
    run_id: str
    prompt: str | None = None
    context: tuple[ContextItem, ...] = ()
    output: str | None = Field(default=None, description="None when the agent never ran")
    trajectory: tuple[Step, ...] = ()
    partial: Partial | None = Field(
        default=None,
        description="what the agent had sent before its call timed out (its output and "
        "trajectory are then empty); None otherwise",
    )
    turns: tuple[turns_mod.Turn, ...] = Field(
        default=(), description="a conversation's turns, first to last; empty for a single run"
    )
    ended: turns_mod.ConversationEnd | None = Field(
        default=None, description="why a conversation ended; None for a single run"
    )
    duration_ms: float = 0.0
    started_at: float = 0.0
    signals: tuple[Signal, ...] = ()
    metrics: dict[str, Any] = Field(default_factory=dict)
    insights: dict[str, Any] | None = None
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    content_hash: str = ""
    trace_id: str | None = Field(
        default=None,
        description="the W3C trace id agent.run() sent (32 hex digits): the agent's spans and "
        "an OTLP export of the test share it; None when the agent never ran",
    )
    skip_reason: str | None = None
    stdout: str | None = Field(
        default=None, description="what the body printed (print(), sys.stdout); None: nothing"
    )
    stderr: str | None = Field(default=None, description="what the body wrote to sys.stderr")
    attempts: tuple[Attempt, ...] = Field(
        default=(),
        description="every try of a retried test, first to last (empty when it ran once)",
    )
    ledger_cell: str | None = Field(default=None, description="the ledger cell that recorded it")
    agent: str | None = Field(
        default=None, description="the agent it ran against in an agent matrix; None otherwise"
    )
    replayed: bool = Field(
        default=False,
        description="from a --replay run: agent.run() was answered from a recording",
    )
    quarantined: bool = Field(
        default=False,
        description="named by the run's quarantine file: reported apart, never gating",
    )
    case: dict[str, Any] | None = Field(
        default=None,
        description="a case file's test: what the case file says of it beyond the test (id, "
        "subcategory, versions, expectedPPL, ...); None for a code test",
    )
    mcp_calls: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="the MCP calls the gateway read for this test, in order: server, method, "
        "name (the tool), arguments, is_error, error, problem (their results: the ledger cell)",
    )

    @model_validator(mode="after")
    def _cause_of_errored(self) -> "TestResult":
        # A cause decides whether an error counts against the agent: never guessed here.
        if self.status == "errored" and self.cause is None:
            raise ValueError(
                f"test {self.id!r} errored without a cause; give cause= one of {', '.join(CAUSES)}"
            )
        if self.status != "errored" and self.cause is not None:
            raise ValueError(f"test {self.id!r} is {self.status}: only an errored test has a cause")
        return self

    def gates(self) -> Iterator[Signal]:
        return (s for s in self.signals if s.role == "gate")


def _every(run: RunResult) -> tuple[turns_mod.Turn, ...]:
    """``run.turns``: a conversation's turns, or a single run as its one turn."""
    if run.conversation:
        return run.conversation
    single = turns_mod.Turn(
        number=1,
        user=run.prompt,
        output=run.output,
        trajectory=run.trajectory_steps,
        token_usage=run.token_usage,
        duration_ms=run.duration_ms,
        unreported=run.unreported,
    )
    return (single,)


def _one(run: RunResult, number: int) -> RunResult:
    """``run.turn(number)``: that turn as a run of its own (a single run is its turn 1)."""
    taken = _every(run)
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= len(taken):
        raise errors.AgentHealthError(
            f"result.turn({number!r}): this run has turns 1 to {len(taken)}"
        )
    if not run.conversation:
        return run
    turn = taken[number - 1]
    return run.model_copy(
        update={
            "prompt": turn.user,
            "context": run.context if number == 1 else (),
            "output": turn.output,
            "trajectory_steps": turn.trajectory,
            "token_usage": turn.token_usage,
            "duration_ms": turn.duration_ms,
            "raw": {},
            "unreported": turn.unreported,
            "conversation": (),
            "ended": None,
        }
    )
