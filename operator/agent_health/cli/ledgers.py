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
    try:
        key, _ = ledger.find_key(args.url, args.key_file)
        results = asyncio.run(regrade.grade_ledger(args.url, key, common.ledger_access(args.url)))
    except ledger.LedgerError as err:
        raise common.UsageError(str(err)) from err
    if not results:
        raise common.UsageError(f"no ledger cells found at {args.url}")
    # The recorded run's own time, from its cells: not the regrade's, nor the sum of its
    # tests' (run side by side, they overlap). A ledger whose cells say no start: the
    # longest test, the least the run took.
    ran = regrade.span(results)
    if ran is not None:
        duration_ms = (ran[1] - ran[0]).total_seconds() * 1000
    else:
        duration_ms = max(r.duration_ms for r in results)
    report = reports.RunReport.build(
        results,
        duration_ms=duration_ms,
        repeats=max(r.repeat for r in results) + 1,
        provenance=reports.Provenance(
            agent_health_version=reports.agent_health_version(),
            python_version=platform.python_version(),
            ledger=reports.redact_url(args.url),
            command_line=reports.redact_argv(getattr(args, "command_line", [])),
            started_at=ran[0] if ran is not None else None,
            ended_at=ran[1] if ran is not None else None,
        ),
    )
    reporters.summary(consoles.out, report, close=False)
    unwritten = common.write_reports(outputs, report, consoles.out)
    reporters.closing(consoles.out, report, unwritten=unwritten)
    code = common.exit_code(report)
    return common.EXIT_USAGE if code == common.EXIT_OK and unwritten else code
