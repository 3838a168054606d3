"""The per-test context: where signals, the agent's result and the test's info live.

Each running test has exactly one :class:`TestContext`, held in a ``contextvar`` that the
engine sets in the test's own task. ``expect`` and ``judge`` imported at module level look
it up, so two tests running at once can never see each other's signals.

What a judge backend is asked, :class:`~agent_health.sdk.judgerequest.JudgeRequest`, is
made with the first ``judge()`` call (a run that judges nothing never makes the class);
``agent_health.sdk.context.JudgeRequest`` names it too.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from agent_health.connectors.partial import Partial
from agent_health.connectors.protocol import AgentReply, AgentRequest
from agent_health.sdk import errors
from agent_health.sdk.results import Cause, RunResult, Signal

if TYPE_CHECKING:
    from agent_health.sdk.declared import TestCase
    from agent_health.sdk.judgerequest import JudgeRequest as JudgeRequest
    from agent_health.sdk.verdict import Verdict

NO_JUDGE_HINT = (
    "no judge configured, so judge() calls were skipped; set judge={...} in "
    "agent-health.config.py or AGENT_HEALTH_JUDGE_PROVIDER/MODEL/BASE_URL"
)
"""The reason of a verdict skipped for want of a judge (:attr:`TestContext.judge_hint`'s
default), and the run's closing hint when one was."""


def __getattr__(name: str) -> Any:
    # JudgeRequest where it was always read, made (sdk.judgerequest) when first asked for.
    if name == "JudgeRequest":
        from agent_health.sdk import judgerequest

        return judgerequest.JudgeRequest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class AgentCaller(Protocol):
    """The engine's seam for ``agent.run()``: sends one request through a connector."""

    async def __call__(self, request: AgentRequest) -> AgentReply: ...


class JudgeBackend(Protocol):
    """The seam judge providers plug into (see ``agent_health.judging``)."""

    async def __call__(self, request: JudgeRequest) -> Verdict: ...


class PeerRoute(Protocol):
    """A listener of the run's gateway in front of one of the test's servers."""

    url: str
    """What the agent calls instead of the server's own URL."""

    async def close(self) -> None: ...


class PeerRoutes(Protocol):
    """The engine's seam for servers a test starts (a mock MCP server): put one behind the
    run's gateway, its calls recorded in the test's ledger cell
    (``engine.recording.peerroutes``)."""

    async def route(
        self, name: str, url: str, *, run_id: str, protocol: str = "mcp"
    ) -> PeerRoute: ...


@dataclass
class TestInfo:
    """What a body may know about itself (the ``test_info`` fixture)."""

    __test__ = False

    id: str
    title: str
    name: str
    file: str
    labels: tuple[str, ...]
    repeat: int
    run_id: str
    timeout: float | None
    retry: int = 0  # 0 on the first try; n on the n-th retry (``--retries``)
    agent: str | None = None  # the agent's name in an agent matrix (``--agent a --agent b``)
    annotations: dict[str, Any] = field(default_factory=dict)

    def skip(self, reason: str = "") -> None:
        """Skip the running test from inside its body."""
        raise errors.TestSkipped(reason or "skipped by the body")

    def annotate(self, key: str, value: Any) -> None:
        """Attach a key/value to the report of this test."""
        self.annotations[key] = value


@dataclass(eq=False, repr=False)
class TestContext:
    """Mutable state of one running test; owned by exactly one task."""

    __test__ = False

    case: TestCase
    info: TestInfo
    agent_caller: AgentCaller | None
    judge_backend: JudgeBackend | None
    skip_judge: bool = False
    judge_hint: str | None = None
    skip_simulate: bool = False
    """``--no-simulate``: a test whose conversation needs a simulated user is skipped."""
    signals: list[Signal] = field(default_factory=list)
    result: RunResult | None = None
    prompt_sent: str | None = None
    errors: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    """The cause of each of ``errors``, in the same order."""
    agent_error: str | None = None
    """Why ``agent.run()`` failed, when it did (recorded in the ledger's run-result)."""
    partial: Partial | None = None
    """What the agent had sent before its call timed out, when it did."""
    replayed_duration_ms: float | None = None
    """Set by a replay (``--replay``): how long the recorded ``agent.run()`` took, which the
    RunResult reports instead of the microseconds the recording took to answer."""
    cut_short: list[Cause] = field(default_factory=list)
    """Who was being waited on when the test's deadline cancelled the call: whom it blames."""
    peer_routes: PeerRoutes | None = None
    """Where a test's own servers go behind the run's gateway; ``None``: nowhere (a cell,
    whose gateway's routes are fixed, or a run without a ledger)."""
    on_judge_call: Callable[[JudgeRequest], Awaitable[None]] | None = None
    judged: list[tuple[Verdict, Signal]] = field(default_factory=list)
    """Each verdict the body got back, with the signal it recorded (see :meth:`signal_of`)."""
    traceparent: str | None = None
    """The W3C ``traceparent`` ``agent.run()`` sent (its parent id is the invoke_agent span's)."""
    agent_window: tuple[float, float] | None = None
    """When ``agent.run()``'s call to the agent began and ended (epoch seconds), for export."""
    judge_windows: list[tuple[Signal, float, float]] = field(default_factory=list)
    """Each ``judge()`` call that asked its backend: the signal and when (epoch seconds)."""

    def record(self, signal: Signal) -> Signal:
        self.signals.append(signal)
        return signal

    def record_error(self, message: str, cause: Cause = "test") -> None:
        """An error that makes the test ``errored`` without stopping the body.

        The same error twice (an errored verdict, then ``verdict.to_pass()`` raising it
        into the body) is kept once.
        """
        if (message, cause) in zip(self.errors, self.causes, strict=True):
            return
        self.errors.append(message)
        self.causes.append(cause)

    def signal_of(self, verdict: Verdict) -> Signal | None:
        """The signal ``judge()`` recorded for this very verdict (``None``: not from here)."""
        return next((s for v, s in self.judged if v is verdict), None)

    def waiting(self, on: Cause) -> _Waiting:
        """A call to ``on`` (the agent, the judge): if the test's deadline cuts it short,
        the timeout is ``on``'s, not the test's."""
        return _Waiting(self.cut_short, on)


class _Waiting:
    """:meth:`TestContext.waiting`'s block: a class, not a ``contextlib`` generator, which
    cost a generator and three frames more at every agent call."""

    __slots__ = ("_cut_short", "_on")

    def __init__(self, cut_short: list[Cause], on: Cause) -> None:
        self._cut_short = cut_short
        self._on = on

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            return  # the error, if any, goes on
        # Loaded by then (a test is running); importing the SDK does not need asyncio.
        import asyncio

        if issubclass(kind, asyncio.CancelledError):
            self._cut_short.append(self._on)


_current: contextvars.ContextVar[TestContext] = contextvars.ContextVar("agent_health_test")


def current(what: str) -> TestContext:
    """The running test's context, or a clear error when called outside a test body."""
    try:
        return _current.get()
    except LookupError:
        raise errors.AgentHealthError(
            f"{what} was called outside a running test; call it inside a test body or hook"
        ) from None


def activate(ctx: TestContext) -> contextvars.Token[TestContext]:
    return _current.set(ctx)


def deactivate(token: contextvars.Token[TestContext]) -> None:
    _current.reset(token)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(__file__))
"""The ``agent_health`` package's folder: a frame of a file under it is ours (worked out
once, not at each check a test records)."""
_PACKAGE_CHARS = len(_PACKAGE_DIR)


def caller_location(skip_package: str = "agent_health") -> str | None:
    """``file:line`` of the first frame outside this package (where the user called us).

    A case file's checks are written in the case file: they point at the case
    (``cases.json:14``), not at the code that runs them.
    """
    running = _current.get(None)
    if running is not None and running.case.from_case_file:
        return f"{running.case.file}:{running.case.line}"
    # sys._getframe(), not inspect.currentframe(): the same frame (this function's), without
    # a call of Python around it, once for every check a test records (issue #40).
    frame: FrameType | None = sys._getframe()
    try:
        while frame is not None:
            filename = frame.f_code.co_filename
            # A slice compared, not str.startswith, which parses its arguments the old way:
            # a few frames for every check a test records.
            if filename[:_PACKAGE_CHARS] != _PACKAGE_DIR:
                return f"{os.path.basename(filename)}:{frame.f_lineno}"
            frame = frame.f_back
        return None
    finally:
        del frame
