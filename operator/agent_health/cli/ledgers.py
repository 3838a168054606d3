"""``ledger verify`` and ``grade``: read a recorded ledger back, check it, grade it again."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from agent_health.cli import common

KEY_ENV = "AGENT_HEALTH_LEDGER_KEY"  # ledger.chain.KEY_ENV, named here to keep --help cheap


def add_commands(sub: Any) -> None:
    ledger_cmd = sub.add_parser("ledger", help="inspect recorded cell ledgers")
    ledger_sub = ledger_cmd.add_subparsers(dest="ledger_command", required=True)
    verify_cmd = ledger_sub.add_parser("verify", help="check every cell's HMAC chain")
    verify_cmd.add_argument(
        "url", help="file://DIR, a directory, CELL.jsonl, run.jsonl, configmap://NS/NAME, s3://..."
    )
    verify_cmd.add_argument(
        "--key-file",
        help=f"the ledger key (default: DIR.key beside a local ledger DIR, else ${KEY_ENV})",
    )
    verify_cmd.add_argument(
        "--allow-open",
        action="store_true",
        help="accept cells without a cell-end record and a run file without its seal "
        "(a run still going)",
    )
    verify_cmd.set_defaults(handler=verify)

    grade_cmd = sub.add_parser("grade", help="grade a recorded ledger again, cell by cell")
    grade_cmd.add_argument("url", help="file://DIR, a directory, configmap://NS/NAME, s3://...")
    grade_cmd.add_argument(
        "--key-file",
        help=f"the ledger key (default: DIR.key beside a local ledger DIR, else ${KEY_ENV})",
    )
    grade_cmd.add_argument(
        "--reporter", action="append", default=[], help="json[:PATH], junit[:PATH], html[:DIR]"
    )
    grade_cmd.add_argument(
        "--history",
        metavar="URL",
        help="the history to record the graded run in (default: as `run` finds it — "
        "$AGENT_HEALTH_HISTORY, history= in the config found upward from a local ledger, "
        ".agent-health/history.db beside it); the run that wrote the ledger, when recorded "
        "there, is the same run and is left as it was",
    )
    grade_cmd.add_argument(
        "--no-history", action="store_true", help="record the graded run in no history"
    )
    grade_cmd.add_argument("--config", help="the config whose history= to use")
    grade_cmd.set_defaults(handler=grade)


def _require_local(url: str) -> None:
    """A local ledger that is not there is a load error (exit 2) named as such, before a
    key is looked for."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme != "file":
        return
    from pathlib import Path

    path = Path(rest if sep else url).expanduser()
    if not path.exists():
        raise common.UsageError(
            f"{url}: no such ledger (pass a local run's ledger directory, its run.jsonl, a "
            "CELL.jsonl, or a ledger URL: configmap://NS/NAME, s3://..., gs://...)"
        )


def verify(args: argparse.Namespace, consoles: common.Consoles) -> int:
    import asyncio

    from agent_health import ledger

    _require_local(args.url)
    try:
        key, source = ledger.find_key(args.url, args.key_file)
        options = common.ledger_access(args.url)
        checked = ledger.verify_url(args.url, key, options=options, complete=not args.allow_open)
        report = asyncio.run(checked)
    except ledger.LedgerError as err:
        raise common.UsageError(str(err)) from err
    if not report.cells and not report.refused and not report.problems:
        raise common.UsageError(f"no ledger cells found at {args.url}")
    bad = report.first_bad
    if bad is not None or report.problems:
        first = report.unreadable[:1] or [str(bad) if bad is not None else report.problems[0]]
        consoles.error(first[0], label="tampered:")
        return common.EXIT_FAILED
    from agent_health.engine import visible

    for cell in report.cells:  # a cell's name comes from the ledger's files
        consoles.out.print(visible.line(str(cell)), markup=False)
    sealed = " (run file sealed)" if report.sealed else ""
    verified = f"{len(report.cells)} cells verified{sealed} with the {source}"
    if report.refused:
        # The seal holds, so these are the run's own account, not an attacker's: still,
        # their tests left no evidence, and a ledger missing cells is not a whole record.
        for name, why in report.refused.items():
            consoles.out.print(f"{name}: not recorded: {why}", markup=False)
        consoles.err.print(
            f"incomplete: {verified}, but {len(report.refused)} cells hold no records: their "
            "records could not be sealed when the run ended (their tests are errored in the "
            "run's report)",
            markup=False,
        )
        return common.EXIT_FAILED
    consoles.out.print(verified, markup=False)
    return common.EXIT_OK


def grade(args: argparse.Namespace, consoles: common.Consoles) -> int:
    # Grading a ledger is the operator's code; other commands never load it.
    import asyncio

    from agent_health import ledger
    from agent_health.cluster.grading import regrade
    from agent_health.engine import reporters, reports

    outputs = [reporters.parse(r) for r in args.reporter]
    common.check_reports(outputs)
    _require_local(args.url)
    where = _history(args)  # a URL that names none is a usage error before any grading
    try:
        key, _ = ledger.find_key(args.url, args.key_file)
        grades = asyncio.run(regrade.grade_ledger(args.url, key, common.ledger_access(args.url)))
    except ledger.LedgerError as err:
        raise common.UsageError(str(err)) from err
    if not grades:
        raise common.UsageError(f"no ledger cells found at {args.url}")
    results = [g.result for g in grades]
    said = [g.verified for g in grades if g.verified is not None]
    opened, uid = _identity(where, args.url, results, consoles)
    # The recorded run's own time, from its cells: not the regrade's, nor the sum of its
    # tests' (run side by side, they overlap). A ledger whose cells say no start: the
    # longest test, the least the run took.
    ran = regrade.span(results)
    duration_ms = ran.duration_ms if ran is not None else max(r.duration_ms for r in results)
    report = reports.RunReport.build(
        results,
        duration_ms=duration_ms,
        repeats=max(r.repeat for r in results) + 1,
        provenance=reports.Provenance(
            agent_health_version=reports.agent_health_version(),
            python_version=platform.python_version(),
            ledger=reports.redact_url(args.url),
            command_line=reports.redact_argv(getattr(args, "command_line", [])),
            started_at=ran.started_at if ran is not None else None,
            ended_at=ran.ended_at if ran is not None else None,
            run_id=uid,
        ),
    )
    reporters.summary(consoles.out, report, close=False)
    unwritten = common.write_reports(outputs, report, consoles.out)
    code = common.exit_code(report)
    code = common.EXIT_USAGE if code == common.EXIT_OK and unwritten else code
    if opened is not None:
        json_path = next((path for kind, path in outputs if kind == "json"), None)
        _record(opened, report, code, json_path, all(said) if said else None, consoles)
    reporters.closing(consoles.out, report, unwritten=unwritten)
    return code


def _history(args: argparse.Namespace) -> Any:
    """Where ``grade`` records (``None``: nowhere): found as ``run`` finds it — for a local
    run's ledger (``SUITE/.agent-health/ledger/RUN``) from its suite, so that the history is
    the one the run recorded in; for another local ledger from the folder that holds it;
    for a ledger in a cluster or a store from here."""
    import os
    from pathlib import Path

    from agent_health.engine import loading

    if args.no_history and not args.history:
        return None
    start = Path.cwd()
    scheme, sep, rest = args.url.partition("://")
    if not sep or scheme == "file":
        path = Path(os.path.abspath(Path(rest if sep else args.url).expanduser()))
        path = path.parent if path.suffix == ".jsonl" else path  # a ledger's file: its folder
        home = next((p for p in path.parents if p.name == ".agent-health"), None)
        start = home.parent if home is not None else path.parent
    config_file = Path(args.config) if args.config else loading.find_config(start)
    configured: str | bool | None = None
    if config_file is not None and not args.history and not args.no_history:
        configured = loading.load_config(config_file).history
    return common.history_location(
        args, config_file=config_file, configured=configured, start=start
    )


def ledger_urls(url: str) -> list[str]:
    """The ways a history may name the ledger at ``url``: as given (without credentials),
    and a local one as the absolute ``file://`` directory its run wrote (its ``run.jsonl``'s
    folder for the file itself)."""
    import os
    from pathlib import Path

    from agent_health.engine import reports

    named = [reports.redact_url(url) or url]
    scheme, sep, rest = url.partition("://")
    if not sep or scheme == "file":
        path = Path(os.path.abspath(Path(rest if sep else url).expanduser()))
        if path.suffix == ".jsonl":
            path = path.parent
        named.append(f"file://{path}")
    return list(dict.fromkeys(named))


def derived_uid(url: str, results: list[Any]) -> str:
    """The id of a graded ledger no history names: its URL and each cell's own run id and
    start, hashed — the same ledger graded twice is the same run, and a run created again
    under the same name (its cells named alike) another."""
    import hashlib

    digest = hashlib.sha256(ledger_urls(url)[-1].encode())
    for result in sorted(results, key=lambda r: str(r.ledger_cell)):
        digest.update(f"\n{result.ledger_cell}\x00{result.run_id}\x00{result.started_at}".encode())
    return "ledger-" + digest.hexdigest()[:24]


def _identity(where: Any, url: str, results: list[Any], consoles: common.Consoles) -> Any:
    """The opened history (``None``: none, or it cannot be used: one warning) and the graded
    run's id: the id of the run the history knows wrote this ledger, else one from it."""
    from agent_health import history

    uid = derived_uid(url, results)
    if where is None:
        return None, uid
    try:
        opened = history.open_history(where)
    except history.HistoryError as err:
        consoles.err.print(f"warning: the graded run is not recorded: {err}", markup=False)
        return None, uid
    try:
        found = opened.runs(ledger=ledger_urls(url), limit=1)
    except history.HistoryError as err:
        opened.close()
        consoles.err.print(f"warning: the graded run is not recorded: {err}", markup=False)
        return None, uid
    return opened, found[0].uid.split("/", 1)[0] if found else uid


def _record(
    opened: Any,
    report: Any,
    code: int,
    json_path: Any,
    verified: bool | None,
    consoles: common.Consoles,
) -> None:
    """Record the graded run; the run that wrote the ledger, when the history has it, is the
    same run and is left as it was (one line says which)."""
    from agent_health import history

    ci = history.ci_from_env()
    context = history.RunContext(
        source="ci" if ci is not None else "local",
        exit_code=code,
        report_path=str(json_path.resolve()) if json_path is not None else None,
        ledger_verified=verified,
        ci=ci,
    )
    try:
        with opened:
            recorded = opened.record(report, context)
            found = opened.location
            where = str(found.path) if found.path is not None else found.shown
    except history.HistoryError as err:
        consoles.err.print(f"warning: the graded run is not recorded: {err}", markup=False)
        return
    uids = ", ".join(r.uid for r in recorded)
    if all(r.new for r in recorded):
        said = f"history: run {uids} recorded in {where}"
    else:
        said = (
            f"history: run {uids} is in {where} already (the run that wrote this ledger, or "
            "this ledger graded before): left as it was"
        )
    consoles.out.print(said, markup=False)
