"""A tenant's ``spec.selection.grep``, matched in time linear in the text, on the event loop.

The operator matches an EvaluationRun's pattern against test titles and ids the suite's
author chose, in the one event loop that also runs kopf, the judge service and the health
probes. Python's :mod:`re` backtracks: ``(a+)+$`` against forty ``a`` and a ``!`` takes
longer than the age of the universe, and would stall every tenant's runs with it. RE2
(the ``google-re2`` package) compiles a pattern to an automaton and matches in time
linear in the text, with memory bounded at compile time; it refuses what cannot be
matched that way (backreferences, lookarounds) with a message naming the construct.

Why RE2 and not the two other ways out: a restricted syntax of our own would be a parser
to write and keep, and a worker thread with a time limit cannot stop a running ``re``
match (the thread goes on burning a core after the deadline); RE2 keeps the regular
expressions users know and makes the bad case impossible rather than bounded. The syntax
is RE2's: ``(?i)``, classes, alternation and counted repetition as in Python; no
``\\1`` and no ``(?=...)``. ``bench/grep_selection.py`` measures both engines.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import re2

from agent_health.cluster import errors

MAX_MEMORY = 8 << 20
"""Bytes RE2 may use for one compiled pattern (its default); a bigger one is refused."""
SYNTAX = "https://github.com/google/re2/wiki/Syntax"


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A compiled tenant pattern; :meth:`search` runs in time linear in the text."""

    source: str
    _compiled: Any  # re2._Regexp (the package ships no type hints)

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text``."""
        return self._compiled.search(text) is not None


def compile(source: str, *, field: str = "spec.selection.grep") -> Pattern:
    """``source`` compiled by RE2; a :class:`~agent_health.cluster.errors.SpecError` naming
    ``field`` and what to change when RE2 cannot take it."""
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, not absl's to print to stderr
    options.max_mem = MAX_MEMORY
    try:
        compiled = re2.compile(source, options)
    except re2.error as err:
        why = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
        raise errors.SpecError(
            f"{field} {source!r} is not a pattern the operator can match: {why}. It is "
            f"matched with RE2 (linear time; no backreferences or lookarounds: {SYNTAX})"
        ) from err
    return Pattern(source, compiled)
