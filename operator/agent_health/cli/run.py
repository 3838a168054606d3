# Over 350 lines: `run` has many flags, each a few lines of argparse; its handler reads top down.
"""``run`` and ``list``: discover a suite, run its tests against an agent, report.

The engine, the connectors, the ledger and rich load inside the handlers, only for the command
that runs: ``list`` imports the loader and nothing else (``tests/test_cli_imports.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.cli import common

if TYPE_CHECKING:
    import asyncio

    from rich.console import Console

    from agent_health import connectors, judging
    from agent_health.engine import (
        budget,
        discovery,
        loader,
        provenance,
        recording,
        replay,
        session,
    )
    from agent_health.sdk import config as config_mod
    from agent_health.sdk.results import TestResult


def add_commands(sub: Any) -> None:
    run = sub.add_parser("run", help="discover and run tests")
    run.add_argument("paths", nargs="*", default=["."], help="test files or directories")
    run.add_argument(
        "--agent",
        action="append",
        default=[],
        help="a name from the config's agents, or rest+http://..., ...; repeat it to run the "
        "suite against each agent (a matrix)",
    )
    run.add_argument("--config", help="config file (default: agent-health.config.py found upward)")
    run.add_argument("-j", "--concurrency", type=int, default=4, help="tests at once (default 4)")
    run.add_argument(
        "--repeat",
        type=int,
        help="run each test N times (default 1; with --replay, the recorded repeats)",
    )
    run.add_argument(
        "--pass-at",
        metavar="K[,K...]",
        help="report pass@k and pass^k for these k, e.g. 1,3,5 (each at most --repeat; "
        "default: --repeat when it is more than 1)",
    )
    run.add_argument("--grep", help="only tests whose title or id matches this regex")
    run.add_argument(
        "--label",
        action="append",
        default=[],
        help="only tests with this label (repeat to require several)",
    )
    run.add_argument("--shard", help="run shard i of n, e.g. 1/4")
    run.add_argument("--no-judge", action="store_true", help="skip every judge() call (neutral)")
    run.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the judge cache"
    )
    run.add_argument(
        "--reporter",
        action="append",
        default=[],
        help="list, json[:PATH], junit[:PATH], html[:DIR] (repeatable)",
    )
    run.add_argument("--timeout", type=float, help="per-test timeout in seconds")
    run.add_argument(
        "--pass-with-no-tests",
        action="store_true",
        help="exit 0 when no test is selected",
    )
    run.add_argument(
        "--ledger",
        help="record every exchange and result here (default: file://.agent-health/ledger/TIME/)",
    )
    run.add_argument("--no-ledger", action="store_true", help="record no ledger")
    run.add_argument(
        "--replay",
        metavar="REPORT_OR_DIR",
        help="answer agent.run() from a recorded run (its JSON report, ledger directory or "
        "ledger URL) instead of calling the agent; verified with its key when at hand",
    )
    run.add_argument(
        "--key-file",
        help="--replay: the recording's ledger key (default: DIR.key beside a local ledger "
        "DIR, else $AGENT_HEALTH_LEDGER_KEY; without one the replay is marked unverified)",
    )
    run.add_argument(
        "--list", action="store_true", help="list the tests that would run and run nothing"
    )
    _case_file_flags(run)
    run.add_argument(
        "--forbid-only",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fail (exit 2) when a test is marked test.only (default: on when $CI is set)",
    )
    run.add_argument(
        "--last-failed",
        "--lf",
        action="store_true",
        help="run only the tests that failed or errored last time (all when none did)",
    )
    run.add_argument(
        "-x",
        dest="max_failures",
        action="store_const",
        const=1,
        help="stop at the first failed or errored test (--max-failures 1)",
    )
    run.add_argument(
        "--max-failures",
        type=int,
        metavar="N",
        help="start no new test after N failed or errored tests",
    )
    run.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="N",
        help="run a failed or errored test again up to N times; one that then passes is flaky",
    )
    run.add_argument("--fail-on-flaky", action="store_true", help="exit 1 when any test is flaky")
    run.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="budget: start no new test once agent + judge cost reaches USD (needs prices)",
    )
    run.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="budget: start no new test once agent + judge tokens reach N",
    )
    run.add_argument(
        "--max-duration",
        type=float,
        metavar="S",
        help="budget: start no new test after S seconds",
    )

    run.set_defaults(handler=run_command)

    ls = sub.add_parser("list", help="discover tests without running them")
    ls.add_argument("paths", nargs="*", default=["."])
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument("--grep")
    ls.add_argument("--label", action="append", default=[])
    ls.add_argument("--config", help="config file (default: agent-health.config.py found upward)")
    _case_file_flags(ls)
    ls.set_defaults(handler=list_command)


def _case_file_flags(parser: Any) -> None:
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="load case files that upstream's validation refuses (no category, a difficulty "
        "outside Easy/Medium/Hard, blank outcomes, ...), with a warning for each problem",
    )
    parser.add_argument(
        "--forbid-unknown",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a field a case file's format does not know is an error, not a warning "
        "(default: on when $CI is set)",
    )


def _discovery(args: argparse.Namespace, config: config_mod.Config) -> discovery.Discovery:
    """Which files are tests, and how strictly case files are read (flags over config)."""
    from agent_health.engine import discovery

    return discovery.of(
        config.test_match,
        config.test_ignore,
        lenient=args.lenient or config.lenient_cases,
        forbid_unknown=args.forbid_unknown,
    )


def run_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    import asyncio
    import concurrent.futures
    import gc

    from agent_health.engine import (
        loader,
        provenance,
        reporters,
        savedreport,
        select,
        uncertainty,
        visible,
    )
    from agent_health.engine.report import RunReport
    from agent_health.engine.reporters import terminal

    console, err_console = consoles.out, consoles.err
    recording = _recording(args)
    if recording is not None:
        err_console.print(recording.note, markup=False)
    if args.repeat is None:
        args.repeat = recording.repeats if recording is not None else 1
    if args.concurrency < 1:
        raise common.UsageError("-j/--concurrency must be at least 1")
    if not 1 <= args.repeat <= savedreport.MAX_REPEATS:  # what a saved report may say
        raise common.UsageError(f"--repeat must be from 1 to {savedreport.MAX_REPEATS:,}")
    if args.timeout is not None and args.timeout <= 0:
        raise common.UsageError("--timeout must be positive")
    if args.ledger and args.no_ledger:
        raise common.UsageError("--ledger and --no-ledger contradict each other; pass one")
    pass_at = uncertainty.parse_pass_at(args.pass_at, args.repeat)
    if args.retries < 0:
        raise common.UsageError("--retries must be 0 or more")
    if args.max_failures is not None and args.max_failures < 1:
        raise common.UsageError("--max-failures must be at least 1")
    limits = _limits(args)
    outputs = [reporters.parse(r) for r in args.reporter]
    shard = select.parse_shard(args.shard) if args.shard else None
    paths = [Path(p) for p in args.paths]
    config = _config(args, paths)
    suite = loader.load(paths, _discovery(args, config))
    if not args.list:
        for note in loader.notes(suite):
            err_console.print(note, markup=False, highlight=False)
    select.forbid_only(suite.cases, args.forbid_only)
    cases = select.select(suite.cases, grep=args.grep, labels=args.label, shard=shard)
    if args.last_failed:
        from agent_health.engine import lastfailed

        cases, note = lastfailed.choose(cases, lastfailed.failed(suite.root))
        err_console.print(note, markup=False)
    if args.list:
        return _print_cases(cases, suite, as_json=False, consoles=consoles)
    common.check_reports(outputs)
    if config.traces.opensearch is not None:  # read by the first test that reads its traces
        common.require_extra("traces.opensearch in the config", "opensearch")
    load_errors = [str(e) for e in suite.errors]
    if not cases and not load_errors:
        chosen = {"--grep": args.grep, "--label": args.label, "--shard": args.shard}
        filters = [flag for flag, value in chosen.items() if value]
        said = select.nothing_to_run(args.paths, len(suite.cases), filters, loader.PATTERNS)
        console.print(visible.line(said), markup=False)
        common.write_reports(outputs, RunReport.build([], duration_ms=0.0), console)
        return common.EXIT_OK if args.pass_with_no_tests else common.EXIT_USAGE
    lanes = _lanes(config, args.agent) if recording is None else []  # a replay starts none
    if not lanes and recording is None:
        _agent_needed(cases)
    skip_judge = args.no_judge or os.environ.get("AGENT_HEALTH_SKIP_JUDGE", "") not in (
        "",
        "0",
    )
    judge_config = config.judge_from_env()
    if limits is not None and limits.max_cost_usd is not None and not config.price_table():
        raise common.UsageError(
            f"--max-cost needs the agent's prices: add prices={{'default': {{'input_per_mtok': "
            f"..., 'output_per_mtok': ...}}}} to define_config() in "
            f"{_config_path(args, paths) or 'agent-health.config.py'} (and the judge's "
            "input_cost_per_mtok/output_cost_per_mtok when it judges)"
        )
    list_lines = any(kind == "list" for kind, _ in outputs)
    started_at = datetime.now(UTC)
    # git (the suite's commit and whether it is dirty) runs beside the tests, not after them:
    # the state of the suite the run started from, at no cost to the run's length.
    git = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="git-state")
    git_state = git.submit(provenance.git_state, paths)
    git.shutdown(wait=False)

    # What loading made (modules, the suite, the config) lives as long as the run: frozen,
    # the collector stops going over it while tests run; put back for whatever runs after.
    gc.freeze()
    try:
        outcome, hints, recorded, asked = asyncio.run(
            _execute(
                suite,
                cases,
                config,
                lanes,
                judge_config,
                skip_judge,
                args,
                console,
                list_lines,
                limits,
                recording,
            )
        )
    finally:
        gc.unfreeze()
    judge_usage = _judge_usage(outcome, judge_config, asked)
    from agent_health.engine import lastfailed

    with contextlib.suppress(OSError):  # only a hint for the next run (--last-failed)
        lastfailed.update(suite.root, outcome.results)
    what_ran = provenance.collect(
        paths=paths,
        argv=getattr(args, "command_line", ["agent-health", "run"]),
        agent=_agent_info(config, *lanes[0]) if lanes else None,
        agents=[_agent_info(config, *lane) for lane in lanes] if len(lanes) > 1 else [],
        judge=provenance.JudgeInfo(
            provider=judge_config.provider if judge_config else None,
            model=judge_config.model if judge_config else None,
            skipped=skip_judge,
        ),
        config_file=_config_path(args, paths),
        ledger=recorded.url if recorded is not None else None,
        started_at=started_at,
        ended_at=datetime.now(UTC),
        git=git_state.result(),
    )
    if recording is not None:
        replayed = {"replay": recording.ledger, "replay_verified": recording.verified}
        what_ran = what_ran.model_copy(update=replayed)
    report = RunReport.build(
        _with_cells(outcome.results, recorded),
        duration_ms=outcome.duration_ms,
        repeats=args.repeat,
        load_errors=[*load_errors, *outcome.hook_errors],
        interrupted=outcome.interrupted,
        not_run=outcome.not_run,
        judge_tokens=judge_usage.model_dump() if judge_usage and judge_usage.calls else None,
        stopped=outcome.stopped,
        rollup=outcome.rollup,
        provenance=what_ran,
        budget=outcome.budget,
        pass_at=pass_at,
    )
    terminal.summary(console, report, hints=hints)
    if judge_usage and judge_usage.calls:
        console.print(judge_usage.line())
    written = common.write_reports(outputs, report, console)
    if recorded is not None:
        _print_ledger(recorded, console, err_console)
    code = common.exit_code(report, fail_on_flaky=args.fail_on_flaky)
    return common.EXIT_USAGE if code == common.EXIT_OK and not written else code


def _recording(args: argparse.Namespace) -> replay.Recording | None:
    """The recording ``--replay`` names, read before anything runs (exit 2 when it cannot
    be); a replay calls no agent and records no ledger."""
    if not args.replay:
        if args.key_file:
            raise common.UsageError("--key-file is the key of a --replay recording; add --replay")
        return None
    if args.agent:
        raise common.UsageError(
            "--replay answers agent.run() from the recording and calls no agent; drop --agent"
        )
    if args.ledger:
        raise common.UsageError("--replay calls no agent, so it records no ledger; drop --ledger")
    import asyncio

    from agent_health.engine import recordings, replay

    try:
        where = recordings.locate(args.replay)
        options = common.ledger_access(where.ledger)
        return asyncio.run(recordings.load(args.replay, options, key_file=args.key_file))
    except replay.ReplayError as err:
        raise common.UsageError(str(err)) from err


def _print_ledger(recorded: recording.LocalLedger, console: Console, err_console: Console) -> None:
    from agent_health.engine import visible

    for failure in recorded.failures:
        err_console.print("ledger error: " + visible.line(str(failure)), markup=False)
    if not recorded.cells and not recorded.refused:
        console.print(
            f"ledger: {recorded.url} (0 cells): no test called agent.run(), nothing recorded",
            markup=False,
        )
        return
    lost = f", {len(recorded.refused)} not recorded" if recorded.refused else ""
    # The key sits beside the ledger, where `ledger verify` looks for it: the command needs
    # no --key-file, and runs as printed from the directory the run was started in.
    console.print(
        f"ledger: {recorded.url} ({len(recorded.cells)} cells{lost}, key {recorded.key_file}); "
        f"check it with: {common.invocation()} ledger verify {recorded.url}",
        markup=False,
    )


def _config_path(args: argparse.Namespace, paths: list[Path]) -> Path | None:
    from agent_health.engine import loader

    if getattr(args, "config", None):
        return Path(args.config)
    return loader.find_config(paths[0] if paths else Path.cwd())


def _config(args: argparse.Namespace, paths: list[Path]) -> config_mod.Config:
    from agent_health.engine import loader

    return loader.load_config(_config_path(args, paths))


def _lanes(
    config: config_mod.Config, chosen: list[str]
) -> list[tuple[str | None, connectors.ConnectorSpec]]:
    """Each agent to run against (``--agent``, repeatable), with its spec; none when no agent
    is chosen or configured (data tests only)."""
    if not chosen:
        return [(None, config.agent(None))] if config.agents else []
    twice = sorted({name for name in chosen if chosen.count(name) > 1})
    if twice:
        raise common.UsageError(
            f"--agent {twice[0]} is given twice; name each agent of a matrix once"
        )
    return [(name, config.agent(name)) for name in chosen]


def _agent_needed(cases: list[Any]) -> None:
    """No agent is configured: a usage error, before anything runs, when a test that would
    run takes the ``agent`` fixture (pure data tests run without one)."""
    from agent_health.engine import fixtures

    needing = [c for c in cases if c.mode not in ("skip", "fixme")]
    needing = [c for c in needing if fixtures.asks_for(c, "agent")]
    if needing:
        raise common.UsageError(
            f"no agent to run: {len(needing)} of {len(cases)} selected tests take the agent "
            f"fixture (first: {needing[0].id}); pass --agent NAME|URL (rest+http://..., "
            "cmd:PROGRAM) or set agents={...} in agent-health.config.py"
        )


def _agent_info(
    config: config_mod.Config, chosen: str | None, spec: connectors.ConnectorSpec
) -> provenance.AgentInfo:
    from agent_health.engine import provenance

    name = config.agent_name(chosen)
    return provenance.AgentInfo(
        name=provenance.redact_argv([name])[0] if name else None,
        connector=spec.connector,
        url=provenance.redact_url(spec.url),
        command=list(spec.command) if spec.command else None,
    )


def _with_cells(
    results: list[TestResult], recorded: recording.LocalLedger | None
) -> list[TestResult]:
    """Each result with the name of the ledger cell that recorded it (when one did), in
    place: copies kept beside their originals took 31 MiB of a 20,000-test run's 464."""
    if recorded is None:
        return results
    from agent_health.engine import recording, refusal

    cells = set(recorded.cells)
    for i, r in enumerate(results):
        cell = recording.cell_name(r.id, r.repeat, agent=r.agent)
        if cell in cells:
            results[i] = r.model_copy(update={"ledger_cell": cell})
        elif cell in recorded.refused:  # a result nothing evidences is never a pass
            results[i] = refusal.unrecorded(r, recorded.refused[cell])
    return results


def list_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import loader, select

    paths = [Path(p) for p in args.paths]
    suite = loader.load(paths, _discovery(args, _config(args, paths)))
    cases = select.select(suite.cases, grep=args.grep, labels=args.label)
    return _print_cases(cases, suite, as_json=args.json, consoles=consoles)


def _print_cases(
    cases: list[Any], suite: loader.Suite, *, as_json: bool, consoles: common.Consoles
) -> int:
    """What ``list`` (and ``run --list``) prints: every selected test, or JSON."""
    from agent_health.engine import listing, loader

    for error in suite.errors:
        consoles.error(error, label="load error")
    for note in loader.notes(suite):
        sys.stderr.write(note + "\n")
    if as_json:
        payload = [listing.entry(c) for c in cases]
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for c in cases:
            sys.stdout.write(listing.line(c) + "\n")  # its titles and labels made visible
        skipped = f", {len(suite.skipped)} JSON skipped" if suite.skipped else ""
        sys.stdout.write(f"{len(cases)} tests in {len(suite.files)} files{skipped}\n")
    return common.EXIT_USAGE if suite.errors else common.EXIT_OK


async def _execute(
    suite: loader.Suite,
    cases: list[Any],
    config: config_mod.Config,
    lanes: list[tuple[str | None, connectors.ConnectorSpec]],
    judge_config: config_mod.JudgeConfig | None,
    skip_judge: bool,
    args: argparse.Namespace,
    console: Console,
    list_lines: bool,
    limits: budget.Limits | None = None,
    replayed: replay.Recording | None = None,
) -> tuple[session.Outcome, list[str], recording.LocalLedger | None, judging.Asked | None]:
    import asyncio
    import dataclasses

    from agent_health import connectors
    from agent_health.engine import agent_process, recording, runner, session
    from agent_health.engine.reporters import terminal
    from agent_health.sdk.judges import NO_JUDGE_HINT

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, _on_interrupt, loop, stop)
    hints: list[str] = []
    recorded = None
    async with contextlib.AsyncExitStack() as stack:
        if not args.no_ledger and replayed is None:
            url = args.ledger or recording.default_url()
            recorded = await stack.enter_async_context(recording.LocalLedger(url))
        names: list[str | None] = [name for name, _ in lanes]
        callers: list[Any] = []
        if replayed is not None:  # the agent is neither started nor called
            from agent_health.engine import replay

            # A recorded matrix is replayed as a matrix: one lane per recorded agent.
            names = list(replayed.agents) or [None]
            callers = [replay.Replayer(replayed)] * len(names)
        for _, spec in lanes:  # none for a replay
            live_spec = await stack.enter_async_context(agent_process.serving(spec))
            observe = recorded.observe if recorded is not None else None
            connector = connectors.create(live_spec, config.connectors, observe=observe)
            stack.push_async_callback(connector.aclose)
            callers.append(connector.run)
        backend = None
        if not skip_judge and (judge_config is not None or config.evaluators):
            from agent_health import judging  # only runs that judge pay for the providers

            backend = await stack.enter_async_context(
                judging.backend(judge_config, config, use_cache=not args.no_cache)
            )
        env = runner.RunEnv(
            agent_caller=callers[0] if callers else None,
            judge_backend=backend,
            skip_judge=skip_judge,
            judge_hint=NO_JUDGE_HINT,
            timeout=args.timeout or config.timeout,
            config=config,
            agent_name=config.agent_name(names[0] if names else None),
            ledger=recorded,
            insights_llm=backend.ask if backend is not None and backend.provider else None,
            run_ids=replayed.run_id if replayed is not None else None,
            replaying=replayed is not None,
            lane=names[0] if replayed is not None and names else None,  # one recorded agent
        )
        # A matrix: one environment per agent, each naming its lane.
        matrix = [
            dataclasses.replace(env, agent_caller=caller, agent_name=name, lane=name)
            for name, caller in zip(names, callers, strict=True)
        ] if len(names) > 1 else []  # fmt: skip
        runner.ready()
        with terminal.LiveProgress(
            console,
            len(session.plan(cases, args.repeat)) * max(1, len(matrix)),
            list_lines=list_lines,
            repeats=args.repeat,
        ) as progress:
            outcome = await session.run(
                cases,
                suite.hooks,
                env,
                concurrency=args.concurrency,
                repeat=args.repeat,
                listener=progress,
                stop=stop,
                policy=session.Policy(retries=args.retries, max_failures=args.max_failures),
                meter=_meter(limits, judge_config),
                lanes=matrix,
            )
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.remove_signal_handler(signal.SIGINT)
    if judge_config is None and not skip_judge and _judge_was_skipped(outcome):
        hints.append(NO_JUDGE_HINT)
    reason = getattr(getattr(backend, "provider", None), "reason", None)
    if reason is not None:
        hints.append(f"judge calls errored (cause judge), the other checks ran: {reason}")
    return outcome, hints, recorded, backend.asked if backend is not None else None


def _limits(args: argparse.Namespace) -> budget.Limits | None:
    """The run's budget from --max-cost, --max-tokens and --max-duration (None: no budget)."""
    given = {"--max-cost": args.max_cost, "--max-tokens": args.max_tokens}
    given["--max-duration"] = args.max_duration
    for flag, value in given.items():
        if value is not None and value <= 0:
            raise common.UsageError(f"{flag} must be positive, got {value:g}")
    if all(v is None for v in given.values()):
        return None
    from agent_health.engine import budget

    return budget.Limits(
        max_cost_usd=args.max_cost, max_tokens=args.max_tokens, max_duration_s=args.max_duration
    )


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


def _judge_usage(
    outcome: session.Outcome,
    judge_config: config_mod.JudgeConfig | None,
    asked: judging.Asked | None,
) -> Any:
    """The judge's calls and tokens, when any judge() call ran or insights asked it."""
    judged = any(s.kind == "judge" for r in outcome.results for s in r.signals)
    if not judged and not (asked and asked.calls):
        return None
    from agent_health import judging

    return judging.summarize(outcome.results, judge_config, asked)


def _on_interrupt(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    stop.set()
    # A second Ctrl-C stops at once, as users expect.
    loop.remove_signal_handler(signal.SIGINT)


def _judge_was_skipped(outcome: session.Outcome) -> bool:
    return any(s.kind == "judge" and s.passed is None for r in outcome.results for s in r.signals)
