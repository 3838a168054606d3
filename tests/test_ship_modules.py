"""Modules stay short, or say at their top why not (docs/architecture.md, "Import layers").

A module is one concept, about 150–300 lines. One over :data:`LIMIT` lines carries, in its
first lines, a comment ``# Over 350 lines: <why it is not split>``.
"""

from __future__ import annotations

import re

from ship_support import ROOT

PACKAGE = ROOT / "operator" / "agent_health"
LIMIT = 350
REASON = re.compile(r"^# Over 350 lines: \S.{20,}$")
# Modules another change is splitting right now: remove a name once its split lands, so the
# rule holds for it again.
BEING_SPLIT: set[str] = set()


def _long_modules() -> dict[str, list[str]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LIMIT:
            found[path.relative_to(PACKAGE).as_posix()] = lines
    return found


def test_every_long_module_says_why_at_its_top() -> None:
    missing = [
        f"{name} ({len(lines)} lines)"
        for name, lines in _long_modules().items()
        if name not in BEING_SPLIT and not any(REASON.match(line) for line in lines[:3])
    ]
    assert not missing, (
        "split these modules, or start them with '# Over 350 lines: <reason>': "
        + ", ".join(missing)
    )


def test_the_modules_being_split_are_still_long() -> None:
    # When a split lands, drop the module from BEING_SPLIT so the rule above checks it.
    still = set(_long_modules()) & BEING_SPLIT
    assert still == BEING_SPLIT, f"split already: {sorted(BEING_SPLIT - still)}"


def test_the_reason_must_say_something() -> None:
    assert REASON.match("# Over 350 lines: one class of matchers, split by nothing but size")
    assert not REASON.match("# Over 350 lines: big")
    assert not REASON.match("# long module")
