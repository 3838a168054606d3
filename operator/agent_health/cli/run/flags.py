"""The ``run`` command line: its flags, each a few lines of argparse.

Its handler (:mod:`.handler`) is imported when ``run`` runs: ``--help`` and ``list`` never
load it.
"""

from __future__ import annotations

import argparse
from typing import Any

from agent_health.cli import common
from agent_health.cli.run import suite


def add_command(sub: Any) -> None:
    """The ``run`` command and every flag it takes; its handler is :mod:`.handler`'s."""
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
    run.add_argument(
        "--no-preflight",
        action="store_true",
        help="do not check, before the first test, that each agent answers where it is said "
        "to be (one OPTIONS request each; a missing agent is then errored in every test)",
    )
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
    run.add_argument(
        "--grep",
        action="append",
        default=[],
        help="only tests whose title or id matches this regex (repeat it: any may match)",
    )
    run.add_argument(
        "--label",
        action="append",
        default=[],
        help="only tests with this label (repeat it: all must match, letter case aside)",
    )
    run.add_argument("--shard", help="run shard i of n, e.g. 1/4")
    run.add_argument("--no-judge", action="store_true", help="skip every judge() call (neutral)")
    run.add_argument(
        "--no-simulate",
        action="store_true",
        help="skip the tests whose conversation needs a simulated user (no model plays it)",
    )
    run.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the judge cache"
    )
    run.add_argument(
        "--reporter",
        action="append",
        default=[],
        help="list, json[:PATH], junit[:PATH], html[:DIR], markdown[:PATH] (repeatable)",
    )
    run.add_argument("--timeout", type=float, help="per-test timeout in seconds")
    run.add_argument(
        "--pass-with-no-tests",
        action="store_true",
        help="exit 0 when no test is selected",
    )
    run.add_argument(
        "--ledger",
        help="record every exchange and result here (default: file://.agent-health/ledger/"
        "TIME/, in the suite's .agent-health/ beside its config)",
    )
    run.add_argument("--no-ledger", action="store_true", help="record no ledger")
    common.history_flag(run)
    run.add_argument(
        "--no-history",
        action="store_true",
        help="record nothing in the history (no file or folder is made)",
    )
    run.add_argument(
        "--serve",
        metavar="URL",
        help="stream each result as it finishes to agent-health serve at URL (default: "
        "$AGENT_HEALTH_SERVE; a token of the operate role in $AGENT_HEALTH_SERVE_TOKEN); a "
        "server that is gone is one warning and never slows or fails the run",
    )
    run.add_argument(
        "--baseline",
        metavar="last|last-green|RUN_ID",
        help="then compare the run with a run from the history — the newest of this agent and "
        "suite, the newest that passed whole, or one by id — with compare's gates (the flags "
        "below); exit 1 on a regression",
    )
    common.compare_flags(run)
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
    suite.case_file_flags(run)
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
        "--quarantine",
        metavar="FILE",
        help="report the tests this file names (agent-health flaky --quarantine FILE) apart: "
        "shown, never counted in the pass rate or the exit code (default: quarantine= in the "
        "config)",
    )
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
    run.add_argument(
        "--otlp",
        metavar="URL",
        help="export the run as OTLP traces to this OTLP/HTTP receiver (e.g. "
        "http://127.0.0.1:4318; default: $OTEL_EXPORTER_OTLP_ENDPOINT or the config's otlp); "
        "needs agent-health[otel]",
    )
    run.add_argument(
        "--otlp-content",
        action="store_true",
        help="with export on: put content on the spans (tool call arguments and results, "
        "checks' evidence, the judge's reasoning, error texts)",
    )

    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.cli.run import handler

    return handler.run_command(args, consoles)
