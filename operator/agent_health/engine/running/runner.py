"""Running one (test, repeat): fixtures, hooks around the body, timeout, teardown, grading."""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from agent_health.connectors.errors import ConnectorError
from agent_health.connectors.protocol import (
    AgentReply,
    AgentRequest,
    ContextItem,
    Step,
    TokenUsage,
)
from agent_health.engine import outcome, reports
from agent_health.engine.running import capture, fixtures
from agent_health.sdk import (
    agent,
    context,
    declare,
    errors,
    matchers,
    results,
    tracesconfig,
    turns,
)
from agent_health.sdk import config as config_mod
from agent_health.sdk import traces as traces_mod
from agent_health.sdk.results import RunResult, Signal, TestResult
from agent_health.traces import errors as traces_errors
from agent_health.traces import metrics, traceparent

if TYPE_CHECKING:
    from agent_health.traces import exchanges, received
    from agent_health.traces import view as traces_view

DEFAULT_TIMEOUT = 300.0


class TestSpans(Protocol):
    """Told about each (test, repeat, try) as it ends, with what its context kept: the OTLP
    export (``agent_health.otel.export``). Must not block."""

    def test_ended(self, result: TestResult, ctx: context.TestContext | None) -> None: ...


class CellLedger(Protocol):
    """Records each (test, repeat) as a ledger cell (see ``engine.recording.recording``)."""

    async def begin(self, info: context.TestInfo) -> None: ...

    async def finish(
        self, result: TestResult, run: RunResult | None, *, agent_error: str | None = None
    ) -> None: ...


class RunEnv(NamedTuple):
    """What every test of a run shares: how to reach the agent and the judge.

    A named tuple, not a frozen dataclass, whose methods Python compiles one by one as the
    class is made (about 4 M instructions of a run, issue #40); ``_replace`` makes one that
    differs (an agent matrix's lanes)."""

    agent_caller: context.AgentCaller | None = None
    judge_backend: context.JudgeBackend | None = None
    skip_judge: bool = False
    judge_hint: str | None = None
    skip_simulate: bool = False
    timeout: float | None = None
    config: config_mod.Config | None = None
    agent_name: str | None = None
    insights_llm: reports.InsightsLLM | None = None
    read_exchanges: exchanges.ExchangeReader | None = None
    read_spans: received.SpansReader | None = None
    """What the run's OTLP receiver kept for a run id (the local run's, or the gateway's)."""
    ledger: CellLedger | None = None
    lane: str | None = None
    """The agent's name in an agent matrix (``--agent a --agent b``); ``None`` otherwise."""
    run_ids: Callable[[str, int, str | None], str | None] | None = None
    """The run id of a (test, repeat, agent) when it must be a given one: a replay reuses the
    recorded ids, so the run's traces are found again."""
    replaying: bool = False
    """``agent_caller`` answers from a recording (``--replay``): every result says so."""
    spans: TestSpans | None = None
    """Where each test's spans go (``--otlp``); ``None``: no export."""
    peer_routes: context.PeerRoutes | None = None
    """Where a test's own servers (a mock MCP server) go behind the run's gateway."""
    peer_calls: Callable[[str], Awaitable[outcome.PeerCalls | None]] | None = None
    """What the run's gateway recorded of a run id's calls to peers (``exchange`` and ``mcp``
    records; ``None``: none), which the test's tool claims are held to after its body
    (``engine.outcome.claims``): the local run's in-process gateway, or a cell's gateway
    asked on its admin listener."""
    price_table: tracesconfig.PriceTable | None = None
    """The config's price table, merged once for the run (:meth:`with_prices`); ``None``:
    merged from ``config`` where it is read."""

    @property
    def prices(self) -> tracesconfig.PriceTable:
        """The config's price table (every test's cost reads it)."""
        if self.price_table is not None:
            return self.price_table
        return self.config.price_table() if self.config else tracesconfig.PriceTable()

    def with_prices(self) -> RunEnv:
        """This environment with its config's price table merged once, for every test."""
        return self._replace(price_table=self.prices)


async def _held_to_peers(
    env: RunEnv, ctx: context.TestContext, run_id: str
) -> tuple[RunResult | None, tuple[dict[str, Any], ...]]:
    """Hold the body's tool claims to the calls the run's gateway saw (the signals are
    replaced by the checked ones, as a cell's grade does); the run with the tool errors the
    gateway saw marked (what the metrics and insights read), and its MCP calls (the report's
    ``mcp_calls``)."""
    if env.peer_calls is None:
        return ctx.result, ()
    found = await env.peer_calls(run_id)
    if found is None or not found.records:
        return ctx.result, ()
    calls, shown = outcome.sightings(found.records)
    if found.whole:  # else the grader, who reads the whole ledger, holds them
        served = outcome.served_tools({}, shown)
        checked = outcome.check_claims(ctx.signals, ctx.result, calls, served)
        ctx.signals[:] = checked.signals
    return outcome.as_seen(ctx.result, calls), outcome.reported_calls(found.records)


class _Traces:
    """Makes (and later closes) the traces views of one test's run."""

    def __init__(self, env: RunEnv) -> None:
        self.env = env
        self.views: list[traces_view.TracesView] = []

    def __call__(self, run: RunResult) -> traces_view.TracesView:
        # Loaded by the first test that reads run.traces: most tests never do.
        from agent_health.traces import view as traces_view

        cfg = self.env.config.traces if self.env.config else tracesconfig.TracesSettings()
        view = traces_view.build(
            run,
            cfg,
            agent=self.env.agent_name,
            prices=self.env.prices,
            read_exchanges=self.env.read_exchanges,
            read_received=self.env.read_spans,
        )
        self.views.append(view)
        return view

    def for_insights(self, run: RunResult | None) -> traces_view.TracesView | None:
        if run is None:
            return None
        try:
            view: traces_view.TracesView = run.traces
        except traces_errors.TracesError:
            return None
        return view

    async def aclose(self) -> None:
        for view in self.views:
            try:
                await view.aclose()
            except Exception:  # closing a trace client must not change the test's outcome
                continue


def ready() -> None:
    """Build the models every test validates before the first test starts.

    The SDK defers building them (importing it, or ``agent-health list``, never pays for
    them); left to their first use, the first tests would each wait for them (about 25 ms
    here, the result model most), and their durations would say so. The parts most of them
    hold (a step, token counts, a signal, a context item, a conversation's turn) are built
    first: a model built after its part takes the part's schema as it is, where before each
    made its own (5 M instructions).
    """
    parts = (TokenUsage, Step, Signal, ContextItem, turns.Turn)
    for model in (*parts, AgentRequest, AgentReply, RunResult, TestResult):
        model.model_rebuild()


def new_run_id() -> str:
    """A new run id: ``uuid.uuid4().hex`` without the ``UUID`` object (whose constructor
    checks its arguments in Python, most of the id's cost): 16 random bytes with the
    version (4) and variant (RFC 4122) bits set as ``uuid4`` sets them, in 32 hex digits."""
    number = int.from_bytes(os.urandom(16), "big")
    number = number & _NOT_VERSION_OR_VARIANT | _VERSION_4_VARIANT_RFC_4122
    return f"{number:032x}"


_NOT_VERSION_OR_VARIANT = ~((0xC000 << 48) | (0xF000 << 64))
_VERSION_4_VARIANT_RFC_4122 = (0x8000 << 48) | (4 << 76)


def _builtins(ctx: context.TestContext) -> Mapping[str, Callable[[], Any]]:
    return {
        "agent": lambda: agent.Agent(ctx),
        "expect": lambda: matchers.BoundExpect(ctx),
        "judge": lambda: _bound_judge(ctx),
        "traces": lambda: traces_mod.TracesFixture(ctx),
        "test_info": lambda: ctx.info,
    }


def _bound_judge(ctx: context.TestContext) -> Any:
    # judge() and the request it makes load with the first test that takes the fixture.
    from agent_health.sdk import judges

    return judges.BoundJudge(ctx)


def describe_error(err: BaseException, case_file: str | None = None) -> str:
    """One line that says what went wrong, and where when it is the user's code."""
    if isinstance(err, (errors.AgentHealthError, ConnectorError)):
        return str(err)
    text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if case_file:
        for frame in reversed(traceback.extract_tb(err.__traceback__)):
            if Path(frame.filename).name == Path(case_file).name:
                return f"{text} (at {Path(frame.filename).name}:{frame.lineno})"
    return text


async def run_case(
    case: declare.TestCase,
    repeat: int,
    env: RunEnv,
    *,
    run_id: str | None = None,
    retry: int = 0,
) -> TestResult:
    """Run one test once and return its result; never raises for the test's own failures.

    ``run_id`` is given in a cell (its gateway already recorded it); else a new one is made.
    ``retry`` counts the tries before this one (``--retries``). What the body prints is kept
    on the result (``stdout``/``stderr``) while :func:`.capture.installed` is on.
    """
    with capture.capturing() as captured:
        result = await _run_case(case, repeat, env, run_id=run_id, retry=retry)
    if captured.out is None and captured.err is None:  # it wrote nothing (most tests)
        return result
    return result.model_copy(update={"stdout": captured.stdout, "stderr": captured.stderr})


async def _run_case(
    case: declare.TestCase, repeat: int, env: RunEnv, *, run_id: str | None, retry: int
) -> TestResult:
    if run_id is None and env.run_ids is not None:
        run_id = env.run_ids(case.id, repeat, env.lane)
    run_id = run_id or new_run_id()
    timeout = case.timeout or env.timeout or DEFAULT_TIMEOUT
    info = context.TestInfo(
        id=case.id,
        title=case.title,
        name=case.name,
        file=case.file,
        labels=case.labels,
        repeat=repeat,
        run_id=run_id,
        timeout=timeout,
        retry=retry,
        agent=env.lane,
    )
    started_at = time.time()
    started = time.perf_counter()
    if env.ledger is not None:
        await env.ledger.begin(info)
    if case.mode in ("skip", "fixme"):
        result = _result(
            case,
            repeat,
            status="skipped",
            started_at=started_at,
            run_id=run_id,
            skip_reason=case.skip_reason,
        )
        return await _finish(env, None, result, None, None)
    ctx = context.TestContext(
        case=case,
        info=info,
        agent_caller=env.agent_caller,
        judge_backend=env.judge_backend,
        skip_judge=env.skip_judge,
        judge_hint=env.judge_hint,
        skip_simulate=env.skip_simulate,
        peer_routes=env.peer_routes,
    )
    token = context.activate(ctx)
    traces = _Traces(env)
    traces_token = results.bind_traces(traces)
    try:
        try:
            skip_reason = await _body(ctx, case, timeout)
        finally:
            context.deactivate(token)
        duration = (time.perf_counter() - started) * 1000
        measured, mcp_calls = await _held_to_peers(env, ctx, run_id)
        derived = metrics.derive(measured, env.prices)
        status = outcome.decide(ctx.signals, ctx.errors, skip_reason is not None)
        skip_reason = skip_reason or outcome.skip_reason(status, ctx.signals)
        result = _result(
            case,
            repeat,
            status=status,
            started_at=started_at,
            run_id=run_id,
            error="; ".join(ctx.errors) or None,
            cause=outcome.cause(ctx.causes) if status == "errored" else None,
            signals=tuple(ctx.signals),
            ctx=ctx,
            duration_ms=duration,
            skip_reason=skip_reason,
            derived=derived,
        )
        if mcp_calls and measured is not None:
            # The report shows the run as the gateway saw it: each MCP step's server, the
            # errors its servers answered, the calls the agent left out.
            seen = {"mcp_calls": mcp_calls, "trajectory": measured.trajectory_steps}
            result = result.model_copy(update=seen)
        elif mcp_calls:
            result = result.model_copy(update={"mcp_calls": mcp_calls})
        fn = _insights_function(case, env.config)
        if fn is not None and status != "skipped":
            found = await reports.explain(
                fn,
                result,
                run=measured,  # with the tool errors the gateway saw
                traces=traces.for_insights(ctx.result),
                llm=env.insights_llm,
                timeout=timeout,
                tools=reports.insights_tools(ctx.result),
            )
            result = result.model_copy(update={"insights": found})
        return await _finish(env, ctx.result, result, ctx.agent_error, ctx)
    finally:
        results.unbind_traces(traces_token)
        if traces.views:  # most tests never read run.traces: nothing to close
            await traces.aclose()


async def _body(ctx: context.TestContext, case: declare.TestCase, timeout: float) -> str | None:
    """before_each hooks and the body, then after_each and teardown; the skip reason if any."""
    scope = fixtures.FixtureScope(_builtins(ctx), case.fixtures, case.values)
    skip_reason: str | None = None
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            for hook in case.hooks:
                if hook.kind == "before_each":
                    await call_hook(hook, scope)
            await scope.call(case.fn, case.params)
    except TimeoutError as err:
        # Only our own deadline is "timed out"; a TimeoutError the body raised is its error.
        if deadline.expired():
            _timed_out(ctx, timeout)
        else:
            ctx.record_error(describe_error(err, case.file), outcome.cause_of(err))
    except errors.TestSkipped as err:
        skip_reason = str(err)
    except AssertionError as err:
        # or_throw() / to_pass() on a failure already recorded as a gate: it counts once.
        if not getattr(err, "recorded", False):
            ctx.record(
                Signal(
                    kind="deterministic",
                    role="gate",
                    name="assert",
                    passed=False,
                    score=0.0,
                    evidence={"message": describe_error(err, case.file)},
                )
            )
    except Exception as err:
        ctx.record_error(describe_error(err, case.file), outcome.cause_of(err))
    finally:
        await _after(ctx, scope, case, timeout)
    return skip_reason


def _timed_out(ctx: context.TestContext, timeout: float) -> None:
    """The test's deadline expired: the fault of whoever it was waiting on, else the test's."""
    blamed = ctx.cut_short[0] if ctx.cut_short else "test"
    if blamed == "agent":
        ctx.agent_error = f"the agent did not answer within the test's timeout of {timeout:g} s"
        ctx.record_error(f"timed out after {timeout:g} s waiting for the agent", "agent")
    elif blamed == "judge":
        ctx.record_error(f"timed out after {timeout:g} s waiting for the judge", "judge")
    else:
        ctx.record_error(f"timed out after {timeout:g} s", blamed)


async def _finish(
    env: RunEnv,
    run: RunResult | None,
    result: TestResult,
    agent_error: str | None,
    ctx: context.TestContext | None,
) -> TestResult:
    if env.replaying:
        result = result.model_copy(update={"replayed": True})
    if env.ledger is not None:
        await env.ledger.finish(result, run, agent_error=agent_error)
    if env.spans is not None:
        env.spans.test_ended(result, ctx)
    return result


async def call_hook(hook: declare.Hook, scope: fixtures.FixtureScope | None = None) -> None:
    """Run one hook — every kind is called here — with the fixtures it takes from ``scope``
    (a test's; an all-hook takes none). What it raises comes out as an error naming the hook,
    raised from what it raised so its cause stands; but in a test an assertion or a skip
    passes through, for the test to take as its body's."""
    try:
        await (scope or fixtures.FixtureScope({}, {})).call(hook.fn, hook.params)
    except Exception as err:
        if scope is not None and isinstance(err, AssertionError | errors.TestSkipped):
            raise
        raise errors.AgentHealthError(
            f"{hook.kind} hook {hook.fn.__qualname__} failed: {describe_error(err)}"
        ) from err


async def _after(
    ctx: context.TestContext,
    scope: fixtures.FixtureScope,
    case: declare.TestCase,
    timeout: float,
) -> None:
    """after_each hooks (innermost first), then fixture teardown; every error is kept."""
    if not scope.has_teardown and not any(h.kind == "after_each" for h in case.hooks):
        return  # nothing to run: no deadline to arm
    try:
        async with asyncio.timeout(timeout):
            for hook in reversed(case.hooks):
                if hook.kind == "after_each":
                    try:
                        await call_hook(hook, scope)
                    except AssertionError as err:
                        ctx.record_error(f"after_each hook failed: {err}")
                    except Exception as err:
                        ctx.record_error(describe_error(err), outcome.cause_of(err))
            for failure in await scope.teardown():
                ctx.record_error(str(failure), outcome.cause_of(failure))
    except TimeoutError:
        ctx.record_error(f"teardown timed out after {timeout:g} s")


def _result(
    case: declare.TestCase,
    repeat: int,
    *,
    status: results.Status,
    started_at: float,
    run_id: str | None = None,
    error: str | None = None,
    cause: results.Cause | None = None,
    signals: tuple[Signal, ...] = (),
    ctx: context.TestContext | None = None,
    duration_ms: float = 0.0,
    skip_reason: str | None = None,
    derived: dict[str, Any] | None = None,
) -> TestResult:
    """One (test, repeat)'s result. ``ctx``: the test's context when its body ran (what the
    agent answered, the prompt sent); ``run_id``: its run id (a new one for a test that never
    ran); ``derived``: its metrics when already computed (else from the agent's answer)."""
    run = ctx.result if ctx else None
    return TestResult(
        id=case.id,
        name=case.name,
        title=case.title,
        file=case.file,
        line=case.line,
        labels=case.labels,
        repeat=repeat,
        status=status,
        score=outcome.score(signals, status),
        error=error,
        cause=cause,
        run_id=run_id or new_run_id(),
        prompt=ctx.prompt_sent if ctx else case.default_prompt,
        context=run.context if run else (),
        output=run.output if run else None,
        trajectory=run.trajectory_steps if run else (),
        turns=run.conversation if run else (),
        ended=run.ended if run else None,
        partial=ctx.partial if ctx else None,
        duration_ms=duration_ms,
        started_at=started_at,
        signals=signals,
        metrics=derived if derived is not None else metrics.derive(run),
        token_usage=run.token_usage if run else TokenUsage(),
        content_hash=case.content_hash,
        # The traceparent's trace: the test's, in an OTLP export and among the agent's spans.
        trace_id=traceparent.trace_id_of(ctx.traceparent) if ctx else None,
        skip_reason=skip_reason,
        case=dict(case.metadata) if case.metadata is not None else None,
    )


def skipped_result(case: declare.TestCase, repeat: int, reason: str) -> TestResult:
    """A result for a test that was never started (a budget was reached first)."""
    return _result(case, repeat, status="skipped", started_at=time.time(), skip_reason=reason)


def errored_result(
    case: declare.TestCase,
    repeat: int,
    message: str,
    cause: results.Cause,
    *,
    started_at: float | None = None,
    duration_ms: float = 0.0,
) -> TestResult:
    """A result for a test that could not run (a before_all failed) or was cut short
    (interrupted: ``started_at`` and ``duration_ms`` say how long it had run)."""
    return _result(
        case,
        repeat,
        status="errored",
        started_at=time.time() if started_at is None else started_at,
        error=message,
        cause=cause,
        duration_ms=duration_ms,
    )


def _insights_function(case: declare.TestCase, config: config_mod.Config | None) -> Any:
    """The test's own insights function, else the config's (``insights=False``: none).
    Looked up here, so a run whose tests have none never loads the insights' module."""
    if case.insights is False:
        return None
    if case.insights is not None:
        return case.insights
    return config.insights if config else None
