"""The ``run`` handler, top down: check the flags, load the suite, run it, report.

What it needs loads inside it, only when ``run`` runs: the engine, the connectors, the
ledger and rich are never imported by ``--help`` or ``list`` (``tests/cli/test_cli_imports.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.cli import common
from agent_health.cli.run import catalog, execution, reporting
from agent_health.cli.run import request as request_mod
from agent_health.cli.run import suite as suite_mod

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health import connectors
    from agent_health.cli.run import archive
    from agent_health.engine import recording, reports
    from agent_health.history import location
    from agent_health.otel import export as export_mod
    from agent_health.sdk import config as config_mod


def run_command(args: argparse.Namespace, consoles: common.Consoles) -> int:
    """``agent-health run``: its start-up (the engine's imports, the config, the suite's
    modules) with the cyclic collector off, then the run with it back on.

    What start-up makes lives as long as the run, and the collector walked it over and over
    only to keep it (two to five collections here, each over everything made since the
    last); it is frozen as the run starts. Whatever way the command ends, the collector is
    left as it was found (``main`` also runs inside programs that go on).
    """
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(args, consoles, started=gc.enable if collecting else lambda: None)
    finally:
        if collecting:
            gc.enable()


def _run(
    args: argparse.Namespace, consoles: common.Consoles, *, started: Callable[[], None]
) -> int:
    import asyncio
    import concurrent.futures
    import functools
    import gc

    from agent_health.engine import loading, reporters, reports, visible

    console, err_console = consoles.out, consoles.err
    recording = _recording(args)
    if recording is not None:
        err_console.print(recording.note, markup=False)
    request = request_mod.RunRequest.of(args, recording)
    outputs, limits = request.outputs, request.limits
    paths = [Path(p) for p in args.paths]
    config = suite_mod.load_config(args, paths)
    config_file = suite_mod.config_path(args, paths)
    home = suite_mod.home(args, paths)  # the suite's .agent-health/, beside its config
    quarantined = _quarantined(args, config, config_file)
    gates = _baseline_gates(args, recording)
    # Checked now: a URL that cannot name a history is a usage error before anything runs.
    where = common.history_location(
        args, config_file=config_file, configured=config.history, start=paths[0]
    )
    # A replay is not recorded: the agent did not answer, so it says nothing of the agent's
    # trend.
    pending = _pending(where if recording is None and not args.list else None)
    suite = loading.load(paths, suite_mod.discovery_of(args, config))
    if not args.list:
        for note in loading.notes(suite):
            err_console.print(note, markup=False, highlight=False)
    loading.forbid_only(suite.cases, args.forbid_only)
    cases = loading.select_tests(
        suite.cases, grep=args.grep, labels=args.label, shard=request.shard
    )
    if args.last_failed:
        from agent_health.engine import loading

        cases, note = loading.choose_last_failed(
            cases, loading.last_failed(suite.root, home / loading.LAST_FAILED)
        )
        err_console.print(note, markup=False)
    if args.list:
        return catalog.print_cases(cases, suite, as_json=False, consoles=consoles)
    common.check_reports(outputs)
    if config.traces.opensearch is not None:  # read by the first test that reads its traces
        common.require_extra("traces.opensearch in the config", "opensearch")
    load_errors = [str(e) for e in suite.errors]
    if not cases and not load_errors:
        chosen = {"--grep": args.grep, "--label": args.label, "--shard": args.shard}
        filters = [flag for flag, value in chosen.items() if value]
        said = loading.nothing_to_run(args.paths, len(suite.cases), filters, loading.PATTERNS)
        common.write_reports(outputs, reports.RunReport.build([], duration_ms=0.0), console)
        console.print(visible.line(said), markup=False)  # last: why nothing ran
        return common.EXIT_OK if args.pass_with_no_tests else common.EXIT_USAGE
    lanes = _lanes(config, args.agent) if recording is None else []  # a replay starts none
    if not lanes and recording is None:
        _agent_needed(cases)
    # Each agent a test will call is looked at before the first test (not for a run of pure
    # data tests, nor with --no-preflight): a missing one is a usage error, not N errors.
    preflight = bool(lanes) and not args.no_preflight and bool(_needing(cases))
    skip_judge = args.no_judge or os.environ.get("AGENT_HEALTH_SKIP_JUDGE", "") not in (
        "",
        "0",
    )
    judge_config = config.judge_from_env()
    if lanes:
        from agent_health.engine import running

        # Before anything starts: no agent's env hands it the judge's, ledger's or export's
        # credentials (it inherits none of them: connectors.environment).
        running.refuse_credentials(lanes, config, judge_config, os.environ)
    if limits is not None and limits.max_cost_usd is not None and not config.price_table():
        raise common.UsageError(
            f"--max-cost needs the agent's prices: add prices={{'default': {{'input_per_mtok': "
            f"..., 'output_per_mtok': ...}}}} to define_config() in "
            f"{suite_mod.config_path(args, paths) or 'agent-health.config.py'} (and the judge's "
            "input_cost_per_mtok/output_cost_per_mtok when it judges)"
        )
    export = _export(args, config, lanes, judge_config)
    from agent_health.engine import running

    try:
        running.feed_url(args.serve)  # a URL it cannot stream to: said before anything runs
    except running.FeedError as err:
        raise common.UsageError(str(err)) from err
    list_lines = any(kind == "list" for kind, _ in outputs)
    started_at = datetime.now(UTC)
    # The live feed's, the report's and the history's id; a run agent-health serve started
    # is told its id, so the page that started it can follow it at once.
    run_uid = _given_uid() or reports.new_run_id(started_at)
    # git (the suite's commit and whether it is dirty) runs beside the tests, not after them:
    # the state of the suite the run started from, at no cost to the run's length.
    git = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="git-state")
    git_state = git.submit(reports.git_state, paths)
    folder = config_file.parent if config_file is not None else paths[0]
    suite_name = git.submit(reports.suite_name, folder)
    git.shutdown(wait=False)

    # The history opens beside the run (SQLAlchemy's import, a first run's schema), writes its
    # tests ahead and reads the run it will be compared with (one agent's run: a matrix
    # reads it at its end) — begun as the first tests start, in their waits: begun before,
    # its import took the interpreter from the preflight and the HTTP client's import, which
    # every test waits for (the calls row of bench/defaults.py: about 0.2 s of wall).
    starting = None
    if pending is not None:
        from agent_health.cli.run import archive

        agent = reporting.agent_info(config, *lanes[0]).name if len(lanes) == 1 else None
        line = archive.Upcoming(agent, suite_name, started_at) if len(lanes) <= 1 else None
        starting = functools.partial(pending.start, cases, line)

    # What loading made (modules, the suite, the config) lives as long as the run: frozen,
    # the collector stops going over it while tests run; put back for whatever runs after.
    gc.freeze()
    started()
    try:
        executed = asyncio.run(
            execution.execute(
                suite,
                cases,
                config,
                lanes,
                judge_config,
                skip_judge,
                request,
                console,
                list_lines,
                replayed=recording,
                export=export,
                outlet=consoles.stdout,
                preflight=preflight,
                home=home,
                run_uid=run_uid,
                starting=starting,
            )
        )
    except BaseException:
        if export is not None:
            export.close()  # what was queued still goes out
        if pending is not None:
            pending.close()
        raise
    finally:
        gc.unfreeze()
    if starting is not None:
        starting()  # begun already, unless the run ended before its first test: then now
    outcome, hints, recorded = executed.outcome, executed.hints, executed.recorded
    judge_usage = reporting.judge_usage(outcome, judge_config, executed.asked)
    from agent_health.engine import loading

    with contextlib.suppress(OSError):  # only a hint for the next run (--last-failed)
        loading.update_last_failed(suite.root, outcome.results, home / loading.LAST_FAILED)
    what_ran = reports.collect_provenance(
        paths=paths,
        argv=getattr(args, "command_line", ["agent-health", "run"]),
        agent=reporting.agent_info(config, *lanes[0]) if lanes else None,
        agents=[reporting.agent_info(config, *lane) for lane in lanes] if len(lanes) > 1 else [],
        judge=reports.JudgeInfo.model_construct(
            provider=judge_config.provider if judge_config else None,
            model=judge_config.model if judge_config else None,
            skipped=skip_judge,
        ),
        config_file=suite_mod.config_path(args, paths),
        ledger=recorded.url if recorded is not None else None,
        started_at=started_at,
        ended_at=datetime.now(UTC),
        git=git_state.result(),
        selection=reports.Selection.model_construct(
            grep=list(args.grep), labels=list(args.label), shard=args.shard
        ),
        suite=suite_name.result(),
        run=run_uid,
    )
    if recording is not None:
        replayed = {"replay": recording.ledger, "replay_verified": recording.verified}
        what_ran = what_ran.model_copy(update=replayed)
    from agent_health.engine import loading

    report = reports.RunReport.build(
        _apart(reporting.with_cells(outcome.results, recorded), quarantined),
        duration_ms=outcome.duration_ms,
        repeats=request.repeat,
        load_errors=load_errors,
        not_loaded=[e.file for e in suite.errors],
        hook_errors=outcome.hook_errors,
        interrupted=outcome.interrupted,
        not_run=outcome.not_run,
        judge_tokens=judge_usage.model_dump() if judge_usage and judge_usage.calls else None,
        stopped=OUTPUT_CLOSED if consoles.stdout.gone and outcome.interrupted else outcome.stopped,
        rollup=outcome.rollup,
        provenance=what_ran,
        budget=outcome.budget,
        pass_at=request.pass_at,
    )
    if export is not None:
        export.run_ended(outcome.results, report.summary.pass_rate, report.summary.score)
        dropped = export.close()
        if dropped is not None:
            err_console.print(f"warning: {dropped}", markup=False, highlight=False)
    reporters.summary(console, report, hints=hints, close=False)
    if judge_usage and judge_usage.calls:
        console.print(judge_usage.line())
    # The markdown summary is written last: it says what the history adds (the baseline
    # comparison, the flaky tests), known once the run is compared and recorded.
    summaries = [(kind, path) for kind, path in outputs if kind == "markdown"]
    unwritten = common.write_reports(
        [(kind, path) for kind, path in outputs if kind != "markdown"], report, console
    )
    if recorded is not None:
        reporting.print_ledger(recorded, console, err_console)
    gone = consoles.stdout.gone  # what is printed after this is dropped, never an error
    if outcome.misdirected is not None:  # the agent is not where, or not what, it was said
        if pending is not None:
            pending.close()  # a run that never reached its agent is not recorded
        # nor compared: its summary is what its report holds
        unwritten += common.write_reports(summaries, report, console)
        if gone:
            _output_closed(report, outputs, recorded, err_console)
            return common.EXIT_PIPE_CLOSED
        err_console.print(f"error: {outcome.misdirected}", markup=False, highlight=False)
        reporters.closing(console, report, unwritten=unwritten)
        return common.EXIT_USAGE
    code = common.exit_code(report, fail_on_flaky=args.fail_on_flaky)
    code = common.EXIT_USAGE if code == common.EXIT_OK and unwritten else code
    code = common.EXIT_PIPE_CLOSED if gone else code
    if gone:
        _output_closed(report, outputs, recorded, err_console)
    found = None
    regressed = []
    # The history's side of the command line: imported only by a run that has a history or
    # writes a markdown summary (which says when there is none).
    if pending is not None or summaries:
        from agent_health.cli.run import archive
    if pending is not None and gates is not None:
        gated, found = archive.gate(
            pending, report, args.baseline, gates, code=code, consoles=consoles
        )
        if gated != code:
            regressed.append(f"regressed from the baseline ({args.baseline})")
        code = gated
    elif pending is not None and summaries:  # for the summary: against the agent's last run
        found = archive.compared(pending, report, "last", common.compare_gates(args))
    if pending is not None:
        json_path = next((path for kind, path in outputs if kind == "json"), None)
        archive.keep(
            pending,
            report,
            code=code,
            report_path=json_path,
            console=console,
            err_console=err_console,
            ledger_whole=recorded.whole if recorded is not None else None,
        )
    if summaries:
        context = archive.summary(pending, report, found, gating=gates is not None)
        missed = common.write_reports(summaries, report, console, context=context)
        unwritten += missed
        code = common.EXIT_USAGE if code == common.EXIT_OK and missed else code
    if pending is not None:
        pending.close()
    # last, after where the reports, the ledger and the history went: the totals, and what
    # did not run
    reporters.closing(console, report, unwritten=unwritten, also=regressed)
    return code


def _pending(where: location.Location | None) -> archive.Pending | None:
    """The run's history, to open as the run starts; ``None`` when it has none, and then
    the history's side of the command line (:mod:`.archive`) is not imported."""
    if where is None:
        return None
    from agent_health.cli.run import archive

    return archive.warm(where)


def _given_uid() -> str | None:
    import re

    given = os.environ.get(execution.WORKER_ENV, "")
    return given if re.fullmatch(r"[A-Za-z0-9._:-]{1,80}", given) else None


OUTPUT_CLOSED = "stdout was closed by its reader"
"""``summary.stopped`` of a run that stopped because its output's reader went away."""


def _output_closed(
    report: reports.RunReport,
    outputs: list[tuple[str, Path | None]],
    recorded: recording.LocalLedger | None,
    err_console: Console,
) -> None:
    """Say on stderr (when it is still read) what became of a run whose stdout's reader went
    away, and where its results are: never a silent half."""
    s = report.summary
    if s.interrupted:
        what = (
            f"the run stopped as interrupted: {s.total} tests reported (those cut short "
            f"errored, cause infra), {s.not_run} never started"
        )
    else:
        what = f"all {s.total} tests had run; the rest of the output was discarded"
    kept = [f"{kind} report {path}" for kind, path in outputs if path is not None]
    if recorded is not None:
        kept.append(f"ledger {recorded.url}")
    where = f"; kept: {', '.join(kept)}" if kept else "; no report file was asked for"
    err_console.print(f"warning: {OUTPUT_CLOSED}: {what}{where}", markup=False)


def _baseline_gates(
    args: argparse.Namespace, recording: recording.Recording | None
) -> dict[str, Any] | None:
    """``compare``'s gates for ``--baseline`` (checked before anything runs); None without."""
    if not args.baseline:
        return None
    if args.no_history:
        raise common.UsageError(
            "--baseline compares with a run from the history, and --no-history turns it off"
        )
    if recording is not None:
        raise common.UsageError(
            "--baseline gates the agent, and --replay does not call it: compare the replay's "
            "report with `agent-health compare --allow-replayed` instead"
        )
    return common.compare_gates(args)


def _apart(results: list[Any], quarantined: set[str]) -> list[Any]:
    """The results with the quarantined tests' marked (the quarantine's module loads only
    for a run that has a quarantine)."""
    if not quarantined:
        return results
    from agent_health.engine import loading

    return loading.apply_quarantine(results, quarantined)


def _quarantined(
    args: argparse.Namespace, config: config_mod.Config, config_file: Path | None
) -> set[str]:
    """The ids of the quarantine file (``--quarantine``, else the config's ``quarantine=``,
    relative to the config file's folder); a file that cannot be read is a usage error."""
    if args.quarantine:
        path = Path(args.quarantine)
    elif config.quarantine:
        path = Path(config.quarantine)
        if not path.is_absolute() and config_file is not None:
            path = config_file.parent / path
    else:
        return set()
    from agent_health.engine import loading

    try:
        return loading.read_quarantine(path)
    except loading.QuarantineError as err:
        raise common.UsageError(str(err)) from err


def _export(
    args: argparse.Namespace,
    config: config_mod.Config,
    lanes: list[tuple[str | None, connectors.ConnectorSpec]],
    judge_config: config_mod.JudgeConfig | None,
) -> export_mod.Export | None:
    """The run's OTLP export (``--otlp``, ``OTEL_EXPORTER_OTLP_*``, the config's ``otlp``), or
    ``None`` when none is asked for; a bad setting or a missing extra is a usage error."""
    from agent_health.sdk import otlpconfig

    try:
        settings = otlpconfig.resolve(args.otlp, config.otlp, capture_content=args.otlp_content)
    except otlpconfig.SettingsError as err:
        raise common.UsageError(str(err)) from err
    if settings is None:
        if args.otlp_content:
            raise common.UsageError(
                "--otlp-content says what to export, and nothing is exported: add --otlp URL "
                "or set OTEL_EXPORTER_OTLP_ENDPOINT"
            )
        return None
    if settings.protocol == "http/protobuf":  # OTLP/JSON needs no extra
        try:
            common.require_extra("OTLP export over http/protobuf", "otel")
        except common.UsageError as err:
            raise common.UsageError(
                f"{err} (or export OTLP/JSON, which needs none: "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/json)"
            ) from None
    from agent_health.engine import reports
    from agent_health.otel import export as export_mod

    return export_mod.Export.open(
        settings,
        agent=(lanes[0][0] or config.agent_name(None)) if len(lanes) == 1 else None,
        judge_provider=judge_config.provider if judge_config else None,
        version=reports.agent_health_version(),
    )


def _recording(args: argparse.Namespace) -> recording.Recording | None:
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

    from agent_health.engine import recording

    try:
        where = recording.locate(args.replay)
        options = common.ledger_access(where.ledger)
        return asyncio.run(recording.load_recording(args.replay, options, key_file=args.key_file))
    except recording.ReplayError as err:
        raise common.UsageError(str(err)) from err


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


def _needing(cases: list[Any]) -> list[Any]:
    """The selected tests that will run and take the ``agent`` fixture."""
    from agent_health.engine import running

    runnable = [c for c in cases if c.mode not in ("skip", "fixme")]
    return [c for c in runnable if running.asks_for(c, "agent")]


def _agent_needed(cases: list[Any]) -> None:
    """No agent is configured: a usage error, before anything runs, when a test that would
    run takes the ``agent`` fixture (pure data tests run without one)."""
    needing = _needing(cases)
    if needing:
        raise common.UsageError(
            f"no agent to run: {len(needing)} of {len(cases)} selected tests take the agent "
            f"fixture (first: {needing[0].id}); pass --agent NAME|URL (rest+http://..., "
            "cmd:PROGRAM) or set agents={...} in agent-health.config.py"
        )
