"""The ``agent-health`` command.

Exit codes of ``run``: 0 all passed, 1 any failed, 2 usage/config/load error,
3 errored tests only, 130 interrupted. ``compare``: 0 no regression, 1 regression beyond the
thresholds, 2 a report file is missing, not JSON or of another version.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from agent_health import connectors, ledger
from agent_health.engine import (
    agent_process,
    loader,
    recording,
    reporters,
    runner,
    select,
    session,
)
from agent_health.engine.report import RunReport
from agent_health.engine.reporters import terminal
from agent_health.gateway import command as gateway_command
from agent_health.gateway import errors as gateway_errors
from agent_health.sdk import config as config_mod
from agent_health.sdk import errors
from agent_health.sdk.judges import NO_JUDGE_HINT

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ERRORED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad command-line input; exit 2 with the message."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-health", description="Test and benchmark AI agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="discover and run tests")
    run.add_argument("paths", nargs="*", default=["."], help="test files or directories")
    run.add_argument("--agent", help="a name from the config's agents, or rest+http://..., ...")
    run.add_argument("--config", help="config file (default: agent-health.config.py found upward)")
    run.add_argument("-j", "--concurrency", type=int, default=4, help="tests at once (default 4)")
    run.add_argument("--repeat", type=int, default=1, help="run each test N times")
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
        help="list, json[:PATH], junit[:PATH] (repeatable)",
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

    ls = sub.add_parser("list", help="discover tests without running them")
    ls.add_argument("paths", nargs="*", default=["."])
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument("--grep")
    ls.add_argument("--label", action="append", default=[])

    ledger_cmd = sub.add_parser("ledger", help="inspect recorded cell ledgers")
    ledger_sub = ledger_cmd.add_subparsers(dest="ledger_command", required=True)
    verify = ledger_sub.add_parser("verify", help="check every cell's HMAC chain")
    verify.add_argument(
        "url", help="file://DIR, a directory, CELL.jsonl, configmap://NS/NAME, s3://..."
    )
    verify.add_argument("--key-file", help=f"the ledger key (default: ${ledger.chain.KEY_ENV})")
    verify.add_argument(
        "--allow-open",
        action="store_true",
        help="accept cells without a cell-end record",
    )
    crds = sub.add_parser("crds", help="print the CRDs generated from the models")
    crds.add_argument("--out", metavar="DIR", help="write one YAML file per CRD into DIR")
    cmp = sub.add_parser("compare", help="compare two JSON reports; non-zero on a regression")
    cmp.add_argument("base", help="the baseline report (agent-health run --reporter json:...)")
    cmp.add_argument("new", help="the report to check against it")
    cmp.add_argument(
        "--max-pass-rate-drop",
        type=float,
        default=0.0,
        help="largest allowed pass-rate drop, e.g. 0.05 (default 0: any drop fails)",
    )
    cmp.add_argument(
        "--max-score-drop",
        type=float,
        help="largest allowed mean-score drop (default: no gate)",
    )
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    grade = sub.add_parser("grade", help="grade a recorded ledger again, cell by cell")
    grade.add_argument("url", help="file://DIR, a directory, configmap://NS/NAME, s3://...")
    grade.add_argument("--key-file", help="the ledger key (default: $AGENT_HEALTH_LEDGER_KEY)")
    grade.add_argument("--reporter", action="append", default=[], help="json[:PATH], junit[:PATH]")

    cell = sub.add_parser("cell", help="run one test inside a cell pod (the controller)")
    cell.add_argument("--test", required=True, help="the test's id (file::title)")
    cell.add_argument("--repeat", type=int, default=0, help="the repeat index (0-based)")
    cell.add_argument("--suite", default=".", help="the suite's folder (default: .)")

    gateway_cmd = sub.add_parser("gateway", help="the recording sidecar proxy of a cell")
    gateway_command.add_arguments(gateway_cmd)
    # The operator's flags live with it (agent_health.cluster.operator); kopf loads only here.
    operator_cmd = sub.add_parser(
        "operator",
        help="the Kubernetes operator: kopf, judge service, metrics, probes",
        add_help=False,
    )
    operator_cmd.add_argument("operator_args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    console = Console(highlight=False, soft_wrap=True)
    err_console = Console(stderr=True, highlight=False, soft_wrap=True)
    if argv[:1] == ["operator"]:  # its own parser, so `operator --help` shows its flags
        try:
            return _operator(argv[1:])
        except UsageError as err:
            err_console.print(f"[red]error:[/] {err}")
            return EXIT_USAGE
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return _list(args, console, err_console)
        if args.command == "ledger":
            return _ledger_verify(args, console, err_console)
        if args.command == "crds":
            return _crds(args, console)
        if args.command == "compare":
            return _compare(args, console)
        if args.command == "grade":
            return _grade(args, console)
        if args.command == "cell":
            from agent_health.engine import cell as cell_mod

            return cell_mod.main(Path(args.suite), args.test, args.repeat)
        if args.command == "gateway":
            return gateway_command.run(args)
        return _run(args, console, err_console)
    except (
        UsageError,
        errors.ConfigError,
        errors.DefinitionError,
        connectors.ConnectorError,
        ledger.LedgerError,
        gateway_errors.GatewayError,
    ) as err:
        err_console.print(f"[red]error:[/] {err}")
        return EXIT_USAGE


def _config(args: argparse.Namespace, paths: list[Path]) -> config_mod.Config:
    path = (
        Path(args.config)
        if getattr(args, "config", None)
        else loader.find_config(paths[0] if paths else Path.cwd())
    )
    return loader.load_config(path)


def _list(args: argparse.Namespace, console: Console, err_console: Console) -> int:
    paths = [Path(p) for p in args.paths]
    suite = loader.load(paths)
    cases = select.select(suite.cases, grep=args.grep, labels=args.label)
    for error in suite.errors:
        err_console.print(f"[red]load error[/] {error}")
    if args.json:
        payload = [
            {
                "id": c.id,
                "name": c.name,
                "title": c.title,
                "file": c.file,
                "line": c.line,
                "labels": list(c.labels),
                "description": c.description,
                "default_prompt": c.default_prompt,
                "timeout": c.timeout,
                "expected_outcomes": list(c.expected_outcomes),
                "mode": c.mode,
                "content_hash": c.content_hash,
            }
            for c in cases
        ]
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for c in cases:
            labels = f"  [{', '.join(c.labels)}]" if c.labels else ""
            mode = f"  ({c.mode})" if c.mode != "run" else ""
            console.print(f"{c.id}{labels}{mode}", markup=False)
        console.print(f"{len(cases)} tests in {len(suite.files)} files")
    return EXIT_USAGE if suite.errors else EXIT_OK


def _ledger_verify(args: argparse.Namespace, console: Console, err_console: Console) -> int:
    try:
        key = ledger.load_key(args.key_file)
        report = asyncio.run(ledger.verify_url(args.url, key, complete=not args.allow_open))
    except ledger.LedgerError as err:
        raise UsageError(str(err)) from err
    if not report.cells:
        raise UsageError(f"no ledger cells found at {args.url}")
    bad = report.first_bad
    if bad is not None:
        err_console.print(f"[red]tampered:[/] {bad}")
        return EXIT_FAILED
    for cell in report.cells:
        console.print(str(cell))
    console.print(f"{len(report.cells)} cells verified")
    return EXIT_OK


def _grade(args: argparse.Namespace, console: Console) -> int:
    from agent_health.cluster.grading import regrade

    outputs = [reporters.parse(r) for r in args.reporter]
    try:
        key = ledger.load_key(args.key_file)
        results = asyncio.run(regrade.grade_ledger(args.url, key))
    except ledger.LedgerError as err:
        raise UsageError(str(err)) from err
    if not results:
        raise UsageError(f"no ledger cells found at {args.url}")
    report = RunReport.build(results, duration_ms=sum(r.duration_ms for r in results))
    terminal.summary(console, report)
    _write_reports(outputs, report, console)
    return exit_code(report)


def _crds(args: argparse.Namespace, console: Console) -> int:
    # Imported here: only this command needs the cluster models.
    from agent_health.cluster.api import crds

    if args.out is None:
        sys.stdout.write(crds.render())
        return EXIT_OK
    for path in crds.write(Path(args.out)):
        console.print(f"wrote {path}")
    return EXIT_OK


def _operator(argv: list[str]) -> int:
    # Imported here: kopf and the cluster package load only for this command.
    from agent_health.cluster import operator

    parser = argparse.ArgumentParser(prog="agent-health operator", description=operator.__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    operator.add_arguments(parser)
    try:
        chosen = operator.options(parser.parse_args(argv))
    except ValueError as err:
        raise UsageError(str(err)) from err
    return operator.run(chosen)


def _compare(args: argparse.Namespace, console: Console) -> int:
    from agent_health.engine import compare

    if args.max_pass_rate_drop < 0 or (args.max_score_drop is not None and args.max_score_drop < 0):
        raise UsageError("--max-pass-rate-drop and --max-score-drop must not be negative")
    try:
        result = compare.compare_files(
            Path(args.base),
            Path(args.new),
            max_pass_rate_drop=args.max_pass_rate_drop,
            max_score_drop=args.max_score_drop,
        )
    except compare.CompareError as err:
        raise UsageError(str(err)) from err
    if args.json:
        payload = {**result.model_dump(mode="json"), "regressed": result.regressed}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for line in compare.render(result):
            console.print(line, markup=False)
    return EXIT_FAILED if result.regressed else EXIT_OK


def _run(args: argparse.Namespace, console: Console, err_console: Console) -> int:
    if args.concurrency < 1:
        raise UsageError("-j/--concurrency must be at least 1")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.ledger and args.no_ledger:
        raise UsageError("--ledger and --no-ledger contradict each other; pass one")
    outputs = [reporters.parse(r) for r in args.reporter]
    shard = select.parse_shard(args.shard) if args.shard else None
    paths = [Path(p) for p in args.paths]
    config = _config(args, paths)
    suite = loader.load(paths)
    cases = select.select(suite.cases, grep=args.grep, labels=args.label, shard=shard)
    load_errors = [str(e) for e in suite.errors]
    if not cases and not load_errors:
        console.print("no tests found" + (" (after --grep/--label/--shard)" if suite.cases else ""))
        _write_reports(outputs, RunReport.build([], duration_ms=0.0), console)
        return EXIT_OK if args.pass_with_no_tests else EXIT_USAGE
    spec = config.agent(args.agent) if (args.agent or config.agents) else None
    skip_judge = args.no_judge or os.environ.get("AGENT_HEALTH_SKIP_JUDGE", "") not in (
        "",
        "0",
    )
    judge_config = config.judge_from_env()
    list_lines = any(kind == "list" for kind, _ in outputs)

    outcome, hints, recorded = asyncio.run(
        _execute(
            suite,
            cases,
            config,
            spec,
            judge_config,
            skip_judge,
            args,
            console,
            list_lines,
        )
    )
    judge_usage = _judge_usage(outcome, judge_config)
    report = RunReport.build(
        outcome.results,
        duration_ms=outcome.duration_ms,
        repeats=args.repeat,
        load_errors=[*load_errors, *outcome.hook_errors],
        interrupted=outcome.interrupted,
        not_run=outcome.not_run,
        judge_tokens=judge_usage.model_dump() if judge_usage and judge_usage.calls else None,
    )
    terminal.summary(console, report, hints=hints)
    if judge_usage and judge_usage.calls:
        console.print(judge_usage.line())
    _write_reports(outputs, report, console)
    if recorded is not None:
        _print_ledger(recorded, console, err_console)
    return exit_code(report)


def _print_ledger(recorded: recording.LocalLedger, console: Console, err_console: Console) -> None:
    for failure in recorded.failures:
        err_console.print(f"[red]ledger error:[/] {failure}", markup=True)
    console.print(
        f"ledger: {recorded.url} ({len(recorded.cells)} cells); check it with: "
        f"agent-health ledger verify {recorded.url} --key-file {recorded.key_file}",
        markup=False,
    )


def _write_reports(
    outputs: list[tuple[str, Path | None]], report: RunReport, console: Console
) -> None:
    for kind, path in outputs:
        if path is not None:
            reporters.write(kind, path, report)
            console.print(f"{kind} report: {path}")


def exit_code(report: RunReport) -> int:
    s = report.summary
    if s.interrupted:
        return EXIT_INTERRUPTED
    if s.load_errors:
        return EXIT_USAGE
    if s.failed:
        return EXIT_FAILED
    if s.errored:
        return EXIT_ERRORED
    return EXIT_OK


async def _execute(
    suite: loader.Suite,
    cases: list[Any],
    config: config_mod.Config,
    spec: connectors.ConnectorSpec | None,
    judge_config: config_mod.JudgeConfig | None,
    skip_judge: bool,
    args: argparse.Namespace,
    console: Console,
    list_lines: bool,
) -> tuple[session.Outcome, list[str], recording.LocalLedger | None]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, _on_interrupt, loop, stop)
    hints: list[str] = []
    recorded = None
    async with contextlib.AsyncExitStack() as stack:
        if not args.no_ledger:
            url = args.ledger or recording.default_url()
            recorded = await stack.enter_async_context(recording.LocalLedger(url))
        caller = None
        if spec is not None:
            live_spec = await stack.enter_async_context(agent_process.serving(spec))
            if recorded is not None:
                live_spec = await recorded.route(live_spec)
            connector = connectors.create(live_spec, config.connectors)
            stack.push_async_callback(connector.aclose)
            caller = recorded.wrap(connector.run) if recorded is not None else connector.run
        backend = None
        if not skip_judge and (judge_config is not None or config.evaluators):
            from agent_health import (
                judging,
            )  # only runs that judge pay for the providers

            backend = await stack.enter_async_context(
                judging.backend(judge_config, config, use_cache=not args.no_cache)
            )
        env = runner.RunEnv(
            agent_caller=caller,
            judge_backend=backend,
            skip_judge=skip_judge,
            judge_hint=NO_JUDGE_HINT,
            timeout=args.timeout or config.timeout,
            config=config,
            agent_name=config.agent_name(args.agent),
            ledger=recorded,
            insights_llm=backend.ask if backend is not None and backend.provider else None,
        )
        with terminal.LiveProgress(
            console, len(cases) * args.repeat, list_lines=list_lines
        ) as progress:
            outcome = await session.run(
                cases,
                suite.hooks,
                env,
                concurrency=args.concurrency,
                repeat=args.repeat,
                listener=progress,
                stop=stop,
            )
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.remove_signal_handler(signal.SIGINT)
    if judge_config is None and not skip_judge and _judge_was_skipped(outcome):
        hints.append(NO_JUDGE_HINT)
    return outcome, hints, recorded


def _judge_usage(outcome: session.Outcome, judge_config: config_mod.JudgeConfig | None) -> Any:
    """The judge's calls and tokens, when any judge() call ran."""
    if not any(s.kind == "judge" for r in outcome.results for s in r.signals):
        return None
    from agent_health import judging

    return judging.summarize(outcome.results, judge_config)


def _on_interrupt(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    stop.set()
    # A second Ctrl-C stops at once, as users expect.
    loop.remove_signal_handler(signal.SIGINT)


def _judge_was_skipped(outcome: session.Outcome) -> bool:
    return any(s.kind == "judge" and s.passed is None for r in outcome.results for s in r.signals)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
