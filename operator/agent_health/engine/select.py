"""Choosing which tests run: ``--grep``, ``--label``, ``--shard i/n`` and ``test.only``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent_health.sdk import declare, errors


def parse_shard(value: str) -> tuple[int, int]:
    """``"2/5"`` → ``(2, 5)``; a clear error otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value)
    if not match:
        raise errors.ConfigError(f"--shard {value!r}: write it as i/n, e.g. 1/4")
    index, total = int(match[1]), int(match[2])
    if total < 1 or not 1 <= index <= total:
        raise errors.ConfigError(f"--shard {value!r}: i must be between 1 and n")
    return index, total


def select(
    cases: Sequence[declare.TestCase],
    *,
    grep: str | None = None,
    labels: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
) -> list[declare.TestCase]:
    """Tests whose title matches ``grep``, that carry every label, in this shard."""
    chosen = list(cases)
    focused = [c for c in chosen if c.mode == "only"]
    if focused:
        chosen = focused
    if grep:
        try:
            rx = re.compile(grep)
        except re.error as err:
            raise errors.ConfigError(
                f"--grep {grep!r} is not a valid regular expression: {err}"
            ) from err
        chosen = [c for c in chosen if rx.search(c.title) or rx.search(c.id)]
    for label in labels:
        chosen = [c for c in chosen if label in c.labels]
    if shard is not None:
        index, total = shard
        ordered = sorted(chosen, key=lambda c: c.id)
        keep = {c.id for i, c in enumerate(ordered) if i % total == index - 1}
        chosen = [c for c in chosen if c.id in keep]
    return chosen
