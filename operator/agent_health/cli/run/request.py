"""What ``run``'s flags ask of the run itself, checked in one place: a :class:`RunRequest`.

The handler makes one from the parsed flags (:meth:`RunRequest.of`) before anything loads —
every flag that is out of range is a usage error naming it — and hands it to the run in the
event loop (:mod:`.execution`), which reads the request, never the flags. Importing this
module is cheap (the standard library and ``cli.common``): the engine loads when asked.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from agent_health import timeouts
from agent_health.cli import common

if TYPE_CHECKING:
    from agent_health.engine import budget, recording


class RunRequest(NamedTuple):
    """How the selected tests are to run: each field one flag (or its default), checked.

    A named tuple: immutable, and a fraction of a frozen dataclass's cost to make at import
    (whose generated methods are compiled one by one; issue #40)."""

    repeat: int
    """``--repeat`` (a replay's own count when not given)."""
    concurrency: int
    """``-j/--concurrency``: tests at once."""
    timeout: float | None
    """``--timeout``: each test's, in seconds; ``None``: the config's."""
    retries: int
    """``--retries``: a test that did not pass runs again up to this many times."""
    max_failures: int | None
    """``--max-failures``: no new test starts after this many did not pass."""
    ledger: str | None
    """``--ledger URL``; ``None``: the suite's default local ledger."""
    no_ledger: bool
    """``--no-ledger``: nothing is recorded."""
    no_cache: bool
    """``--no-cache``: the judge's cache is neither read nor written."""
    pass_at: list[int] | None
    """``--pass-at``: the k of each pass@k the report says."""
    limits: budget.Limits | None
    """``--max-cost``, ``--max-tokens``, ``--max-duration``: the run's budget, if any."""
    outputs: list[tuple[str, Path | None]]
    """``--reporter``: each report's kind and path."""
    shard: tuple[int, int] | None
    """``--shard i/n``: this shard and how many there are."""
    no_simulate: bool = False
    """``--no-simulate``: a simulated user is not played through the judge's model."""
    serve: str | None = None
    """``--serve URL``: the server the run's live events go to (else the environment's)."""

    @classmethod
    def of(cls, args: argparse.Namespace, replayed: recording.Recording | None) -> RunRequest:
        """The request ``run``'s flags make; a :class:`~agent_health.cli.common.UsageError`
        naming the first flag that is out of range."""
        from agent_health.engine import loading, reporters, reports, statistics

        repeat = args.repeat if args.repeat is not None else replayed.repeats if replayed else 1
        if args.concurrency < 1:
            raise common.UsageError("-j/--concurrency must be at least 1")
        if not 1 <= repeat <= reports.MAX_REPEATS:  # what a saved report may say
            raise common.UsageError(f"--repeat must be from 1 to {reports.MAX_REPEATS:,}")
        wrong = timeouts.problem(args.timeout) if args.timeout is not None else None
        if wrong is not None:
            raise common.UsageError(f"--timeout {wrong}")
        if args.ledger and args.no_ledger:
            raise common.UsageError("--ledger and --no-ledger contradict each other; pass one")
        pass_at = statistics.parse_pass_at(args.pass_at, repeat)
        if args.retries < 0:
            raise common.UsageError("--retries must be 0 or more")
        if args.max_failures is not None and args.max_failures < 1:
            raise common.UsageError("--max-failures must be at least 1")
        return cls(
            repeat=repeat,
            concurrency=args.concurrency,
            timeout=args.timeout,
            retries=args.retries,
            max_failures=args.max_failures,
            ledger=args.ledger,
            no_ledger=args.no_ledger,
            no_cache=args.no_cache,
            pass_at=pass_at,
            limits=_limits(args),
            outputs=[reporters.parse(r) for r in args.reporter],
            shard=loading.parse_shard(args.shard) if args.shard else None,
            no_simulate=getattr(args, "no_simulate", False),
            serve=getattr(args, "serve", None),
        )


def _limits(args: argparse.Namespace) -> budget.Limits | None:
    """The run's budget from --max-cost, --max-tokens and --max-duration (None: no budget)."""
    given: dict[str, Any] = {"--max-cost": args.max_cost, "--max-tokens": args.max_tokens}
    given["--max-duration"] = args.max_duration
    for flag, value in given.items():
        # not (value > 0): a NaN is no budget at all (no spend ever reaches it), and an
        # infinite one no report could write.
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise common.UsageError(f"{flag} must be positive and finite, got {value:g}")
    if all(v is None for v in given.values()):
        return None
    from agent_health.engine import budget

    return budget.Limits(
        max_cost_usd=args.max_cost, max_tokens=args.max_tokens, max_duration_s=args.max_duration
    )
