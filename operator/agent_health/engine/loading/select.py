"""Choosing which tests run: ``--grep``, ``--label``, ``--shard i/n``, ``test.only`` and
``--forbid-only``.

Both filters repeat, and each says its rule: a test is chosen when *any* ``--grep`` pattern
matches its title or id (a second pattern widens the run, as Playwright's ``--grep a|b``
would), and when it carries *every* ``--label`` (a second label narrows it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from agent_health.sdk import declare, errors


def nothing_to_run(
    paths: Sequence[str], declared: int, filters: Sequence[str], patterns: Sequence[str]
) -> str:
    """Why a run found no test, and what to do: the folders searched and the file names
    looked for, or how many tests the filters left out; and how to pass anyway."""
    where = ", ".join(paths) or "."
    if declared:
        why = (
            f"no tests selected: {declared} tests in {where}, none left after "
            f"{' and '.join(filters) or 'the selection'}"
        )
    else:
        why = (
            f"no tests found in {where} (looked for files named {', '.join(patterns)}, "
            "in every folder but hidden ones and virtual environments)"
        )
    return why + "; pass --pass-with-no-tests to exit 0 when there is none"


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
    grep: Sequence[str] = (),
    labels: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
) -> list[declare.TestCase]:
    """Tests whose title or id matches any of the ``grep`` patterns (all tests when there is
    none), that carry every label, in this shard."""
    chosen = list(cases)
    focused = [c for c in chosen if c.mode == "only"]
    if focused:
        chosen = focused
    if grep:
        patterns = []
        for one in grep:
            try:
                patterns.append(re.compile(one))
            except re.error as err:
                raise errors.ConfigError(
                    f"--grep {one!r} is not a valid regular expression: {err}"
                ) from err
        chosen = [
            c for c in chosen if any(rx.search(c.title) or rx.search(c.id) for rx in patterns)
        ]
    for label in labels:
        chosen = [c for c in chosen if has_label(c.labels, label)]
    if shard is not None:
        index, total = shard
        ordered = sorted(chosen, key=lambda c: c.id)
        keep = {c.id for i, c in enumerate(ordered) if i % total == index - 1}
        chosen = [c for c in chosen if c.id in keep]
    return chosen


def has_label(labels: Sequence[str], label: str) -> bool:
    """Whether ``labels`` hold ``label``, letter case aside: ``--label difficulty:easy``
    selects upstream's ``difficulty:Easy`` (case files keep labels as written)."""
    wanted = label.casefold()
    return any(have.casefold() == wanted for have in labels)


def forbid_only(
    cases: Sequence[declare.TestCase],
    forbid: bool | None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """``--forbid-only``: a ``test.only`` left in a suite must not silently drop every other
    test in CI. ``forbid`` ``None`` means on when ``$CI`` is set (to anything but 0/false)."""
    env = os.environ if environ is None else environ
    on = forbid if forbid is not None else env.get("CI", "").lower() not in ("", "0", "false")
    focused = [c for c in cases if c.mode == "only"]
    if not on or not focused:
        return
    where = "; ".join(f"{c.file}:{c.line} {c.title!r}" for c in focused)
    why = "--forbid-only" if forbid else "CI is set, so --forbid-only is on"
    many = len(focused) != 1
    raise errors.ConfigError(
        f"test.only is forbidden ({why}), and {len(focused)} test{'s are' if many else ' is'} "
        f"marked only: {where}. Remove the .only (it would run just those tests), or pass "
        "--no-forbid-only"
    )
