"""``compare``: two JSON reports side by side; non-zero on a regression."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_health.cli import common


def add_commands(sub: Any) -> None:
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
    cmp.add_argument(
        "--max-errored-rise",
        type=int,
        default=0,
        help="largest allowed rise in the number of errored tests (default 0: any rise fails)",
    )
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.set_defaults(handler=compare)


def compare(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import compare

    if (
        args.max_pass_rate_drop < 0
        or (args.max_score_drop is not None and args.max_score_drop < 0)
        or args.max_errored_rise < 0
    ):
        raise common.UsageError(
            "--max-pass-rate-drop, --max-score-drop and --max-errored-rise must not be negative"
        )
    try:
        result = compare.compare_files(
            Path(args.base),
            Path(args.new),
            max_pass_rate_drop=args.max_pass_rate_drop,
            max_score_drop=args.max_score_drop,
            max_errored_rise=args.max_errored_rise,
        )
    except compare.CompareError as err:
        raise common.UsageError(str(err)) from err
    if args.json:
        payload = {**result.model_dump(mode="json"), "regressed": result.regressed}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for line in compare.render(result):
            consoles.out.print(line, markup=False)
    return common.EXIT_FAILED if result.regressed else common.EXIT_OK
