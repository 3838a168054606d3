"""The run itself, inside the event loop: the ledger, the agents (a matrix: one lane each),
the judge backend and the session, which a first Ctrl-C stops from starting new tests."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from rich.console import Console

    from agent_health import connectors, judging
    from agent_health.cli import common
    from agent_health.cli.run import request as request_mod
    from agent_health.engine import budget, loading, recording, running
    from agent_health.otel import export as export_mod
    from agent_health.sdk import config as config_mod


class Executed(NamedTuple):
    """What a run in the event loop gives the handler back."""

    outcome: running.Outcome
    """The session's: every result, what stopped it, its rollup and budget."""
    hints: list[str]
    """Lines for the run's end: a judge that never answered, an agent's wrong path."""
    recorded: recording.LocalLedger | None
    """The local ledger it recorded into (``None``: ``--no-ledger`` or a replay)."""
    asked: judging.Asked | None
    """What the judge was asked (``None``: no judge)."""


async def execute(
    suite: loading.Suite,
    cases: list[Any],
    config: config_mod.Config,
    lanes: list[tuple[str | None, connectors.ConnectorSpec]],
    judge_config: config_mod.JudgeConfig | None,
    skip_judge: bool,
    request: request_mod.RunRequest,
    console: Console,
    list_lines: bool,
    *,
    replayed: recording.Recording | None = None,
    export: export_mod.Export | None = None,
    outlet: common.Outlet | None = None,
    preflight: bool = False,
    home: Path | None = None,
    run_uid: str | None = None,
    starting: Callable[[], None] | None = None,
) -> Executed:
    """Run the selected tests; stopped as by Ctrl-C when ``outlet`` (stdout) loses its reader.

    With ``preflight``, each agent (once started, when its config starts it) is looked at
    before the first test (:mod:`agent_health.connectors.preflight`): one that is not there
    raises :class:`~agent_health.connectors.errors.AgentAbsent`, a usage error. ``home`` is
    the suite's ``.agent-health/``: the default ledger goes into its ``ledger/``.
    ``starting`` is called once, as the first tests start (after the preflight and the
    connectors are made): work that runs beside the tests (the history's) is begun there.
    """
    import asyncio
    import os

    from agent_health import connectors
    from agent_health.engine import recording, reporters, running
    from agent_health.sdk.context import NO_JUDGE_HINT

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, _on_interrupt, loop, stop)
    hints: list[str] = []
    recorded = None
    async with contextlib.AsyncExitStack() as stack:
        if outlet is not None:
            # A reader that went away (`| head -1`) ends the run as Ctrl-C does: no new
            # test starts, the ones in flight are cut short (errored, cause infra), and the
            # reports and the ledger say so. Told from whichever thread wrote.
            stack.enter_context(outlet.watching(lambda: _stop_from_any_thread(loop, stop)))
        if not request.no_ledger and replayed is None:
            root = home / "ledger" if home is not None else recording.DEFAULT_ROOT
            url = request.ledger or recording.default_url(root)
            recorded = await stack.enter_async_context(recording.LocalLedger(url, root))
        names: list[str | None] = [name for name, _ in lanes]
        callers: list[Any] = []
        spans = None
        started = any(spec.command and spec.connector != "subprocess" for _, spec in lanes)
        if replayed is None and config.traces.otlp.wanted(started):
            # The agents it starts export their OTel spans to it (OTEL_EXPORTER_OTLP_ENDPOINT).
            from agent_health.engine import recording

            spans = await stack.enter_async_context(
                recording.LocalReceiver(
                    config.traces.otlp, recorded.note_spans if recorded is not None else None
                )
            )
        if replayed is not None:  # the agent is neither started nor called
            from agent_health.engine import recording

            # A recorded matrix is replayed as a matrix: one lane per recorded agent.
            names = list(replayed.agents) or [None]
            callers = [recording.Replayer(replayed)] * len(names)
        peers = None
        if replayed is None:
            from agent_health.engine import recording

            # The agent's tool servers, each behind the run's gateway, recorded per test.
            peers = await stack.enter_async_context(recording.Peers(config.peers, recorded))
        live_specs = []
        for _, spec in lanes:  # none for a replay
            told = spans.env(spec.env) if spans is not None else None
            if peers is not None and peers.urls:
                told = {**(told or {}), **peers.env()}
            live_specs.append(await stack.enter_async_context(running.serving(spec, told)))
        if preflight:
            hints.extend(await _look_for_agents(lanes, live_specs, config))
        # An agent's first answers say the requests were not ones it takes: start no more
        # tests (the run ends as a usage error, see connectors.preflight).
        misdirect = running.Halt()

        for (name, _), live_spec in zip(lanes, live_specs, strict=True):
            observe = recorded.observe if recorded is not None else None
            connector = connectors.create(live_spec, config.connectors, observe=observe)
            stack.push_async_callback(connector.aclose)
            call = spans.expecting(connector.run) if spans is not None else connector.run
            if preflight and live_spec.connector not in (config.connectors or {}):
                from agent_health.connectors import preflight as look

                key = config.agent_name(name)
                call = look.first_answer(
                    live_spec, key if key in config.agents else None, call, misdirect
                )
            callers.append(call)
        backend = None
        skip_simulate = request.no_simulate or os.environ.get(
            "AGENT_HEALTH_SKIP_SIMULATE", ""
        ) not in ("", "0")
        # --no-judge skips judge() calls; a simulated user still plays through the judge's
        # model unless --no-simulate says otherwise.
        wanted = judge_config is not None and not skip_simulate
        if (judge_config is not None or config.evaluators) and (not skip_judge or wanted):
            from agent_health import judging  # only runs that judge pay for the providers

            backend = await stack.enter_async_context(
                judging.backend(judge_config, config, use_cache=not request.no_cache)
            )
        env = running.RunEnv(
            agent_caller=callers[0] if callers else None,
            judge_backend=backend,
            skip_judge=skip_judge,
            judge_hint=NO_JUDGE_HINT,
            skip_simulate=skip_simulate,
            timeout=request.timeout or config.timeout,
            config=config,
            agent_name=config.agent_name(names[0] if names else None),
            ledger=recorded,
            read_spans=spans.read if spans is not None else None,
            insights_llm=(
                backend.ask if backend is not None and backend.provider and not skip_judge else None
            ),
            run_ids=replayed.run_id if replayed is not None else None,
            replaying=replayed is not None,
            lane=names[0] if replayed is not None and names else None,  # one recorded agent
            spans=export,
            peer_routes=peers,
            peer_calls=recorded.peer_calls if recorded is not None else None,
        ).with_prices()
        # A matrix: one environment per agent, each naming its lane.
        matrix = (
            [
                env._replace(agent_caller=caller, agent_name=name, lane=name)
                for name, caller in zip(names, callers, strict=True)
            ]
            if len(names) > 1
            else []
        )
        running.ready()
        planned = len(running.plan(cases, request.repeat)) * max(1, len(matrix))
        feed = await _live_feed(request.serve, run_uid, stack)
        if feed is not None:
            agent = config.agent_name(names[0] if names else None)
            source = "worker" if os.environ.get(WORKER_ENV) else "local"
            feed.begin(planned, agent=agent, suite=str(suite.root), source=source)
        with reporters.LiveProgress(
            console,
            planned,
            list_lines=list_lines,
            repeats=request.repeat,
        ) as progress:
            listener: Any = progress if feed is None else running.Tee(progress, feed)
            if starting is not None:
                starting()
            outcome = await running.run(
                cases,
                suite.hooks,
                env,
                concurrency=request.concurrency,
                repeat=request.repeat,
                listener=listener,
                stop=stop,
                policy=running.Policy(retries=request.retries, max_failures=request.max_failures),
                meter=_meter(request.limits, judge_config),
                lanes=matrix,
                halt=misdirect,
            )
        if feed is not None:  # posted as the stack closes, within the feed's grace
            feed.end(interrupted=outcome.interrupted, stopped=outcome.stopped)
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.remove_signal_handler(signal.SIGINT)
    outcome = outcome._replace(misdirected=misdirect.reason)
    if spans is not None:
        hints.extend(_otlp_hints(spans.summary()))
    if judge_config is None and not skip_judge and _judge_was_skipped(outcome):
        hints.append(NO_JUDGE_HINT)
    reason = getattr(getattr(backend, "provider", None), "reason", None)
    if reason is not None and not skip_judge:  # --no-judge: no judge call was made
        hints.append(f"judge calls errored (cause judge), the other checks ran: {reason}")
    return Executed(outcome, hints, recorded, backend.asked if backend is not None else None)


WORKER_ENV = "AGENT_HEALTH_SERVE_WORKER"
"""Set by agent-health serve in the runs it starts (``server.steering``): the run's id, and
their feed says they are its workers."""


async def _live_feed(
    serve: str | None, run_uid: str | None, stack: contextlib.AsyncExitStack
) -> Any:
    """The run's live feed to ``--serve URL`` (or ``$AGENT_HEALTH_SERVE``), or ``None``."""
    from agent_health.engine import running

    url = running.feed_url(serve)
    if url is None or run_uid is None:
        return None
    return await stack.enter_async_context(running.Feed(url, run_uid))


async def _look_for_agents(
    lanes: list[tuple[str | None, connectors.ConnectorSpec]],
    live_specs: list[connectors.ConnectorSpec],
    config: config_mod.Config,
) -> list[str]:
    """Each agent of the run answers where its spec says, all looked at at once; a connector
    kind of the config's own (``define_config(connectors=...)``) owns its transport and is
    not looked at. Every agent that is not there is named, in one line; what may be the
    wrong path is returned as a hint for the run's closing lines."""
    import asyncio

    own = config.connectors or {}
    if all(spec.connector in own for spec in live_specs):
        return []  # nothing to look at: the HTTP client is not even loaded
    from agent_health.connectors import errors, preflight

    named = [config.agent_name(name) for name, _ in lanes]  # a config key, or a URL as given
    checks = [
        preflight.check(spec, key if key in config.agents else None)
        for key, spec in zip(named, live_specs, strict=True)
        if spec.connector not in own
    ]
    found = await asyncio.gather(*checks, return_exceptions=True)
    absent = [f for f in found if isinstance(f, errors.AgentAbsent)]
    for failure in found:
        if isinstance(failure, BaseException) and not isinstance(failure, errors.AgentAbsent):
            raise failure
    if absent:
        raise errors.AgentAbsent("; ".join(str(a) for a in absent)) from absent[0]
    return [note for note in found if isinstance(note, str)]


def _meter(
    limits: budget.Limits | None, judge_config: config_mod.JudgeConfig | None
) -> budget.Meter | None:
    if limits is None:
        return None
    from agent_health.engine import budget

    prices = budget.Prices(
        input_per_mtok=judge_config.input_cost_per_mtok if judge_config else None,
        output_per_mtok=judge_config.output_cost_per_mtok if judge_config else None,
    )
    return budget.Meter(limits, prices)


def _stop_from_any_thread(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Set ``stop`` now when called on the loop's own thread (a test's line was written as
    it ended: the next test must not start), else from the loop (rich's refresh thread)."""
    import asyncio

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        stop.set()
    else:
        loop.call_soon_threadsafe(stop.set)


def _on_interrupt(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    stop.set()
    # A second Ctrl-C stops at once, as users expect.
    loop.remove_signal_handler(signal.SIGINT)


def _judge_was_skipped(outcome: running.Outcome) -> bool:
    return any(s.kind == "judge" and s.passed is None for r in outcome.results for s in r.signals)


def _otlp_hints(counts: dict[str, Any]) -> list[str]:
    """What the OTLP receiver did not take, for the run's closing lines (never silent)."""
    hints = []
    refused = counts.get("refused") or {}
    if refused:
        by_status = ", ".join(f"{n}× {status}" for status, n in refused.items())
        hints.append(
            f"the OTLP receiver refused {sum(refused.values())} span exports ({by_status}); "
            f"last: {counts.get('last_refusal')}"
        )
    if counts.get("spans_rejected"):
        hints.append(
            f"the OTLP receiver kept none of {counts['spans_rejected']} spans of traces no "
            "test sent (or naming another run): make the agent's spans children of the "
            "traceparent it is sent"
        )
    if counts.get("spans_invalid"):
        hints.append(
            f"the OTLP receiver left out {counts['spans_invalid']} invalid spans (the last "
            f"export's first: {counts.get('last_invalid')})"
        )
    if counts.get("spans_dropped"):
        hints.append(
            f"the OTLP receiver dropped {counts['spans_dropped']} spans past "
            "traces.otlp.max_spans per run"
        )
    return hints
