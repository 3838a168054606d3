"""How long anything may wait: every timeout agent-health takes is finite and at most a day.

A timeout comes in through many doors — a case file's ``timeout``, ``@test(timeout=)``,
``agent.run(timeout=)``, ``--timeout``, the config's ``timeout`` and each agent's, the
judge's and the traces sources' — and each door checks it here. JSON reads ``1e999`` as
infinity, and an infinite deadline is no deadline: a case file could turn its test's
timeout off over ``--timeout``, and ``list --json`` then printed ``Infinity``, which is not
JSON. A NaN is worse, comparing false with everything, so no deadline ever passes. And a
timeout longer than a day is a typo (milliseconds for seconds) more often than a wish: a
day is also the bound of an EvaluationRun's ``timeoutSeconds`` and a RunSpec's test timeout.

:data:`Seconds` is the pydantic type of a timeout field; :func:`problem` says why a plain
value is not one, for the doors that are not models (a decorator's argument, a flag).
"""

from __future__ import annotations

import math
from typing import Annotated, Final

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

MAX_SECONDS: Final = 86_400
"""The longest timeout anything takes: a day (an EvaluationRun's ``timeoutSeconds`` bound)."""

RULE: Final = f"seconds, a finite number above 0 and at most {MAX_SECONDS:,} (a day)"
WAIT_RULE: Final = f"seconds, a finite number from 0 to {MAX_SECONDS:,} (a day)"


def problem(value: object, *, zero: bool = False) -> str | None:
    """Why ``value`` is not a timeout in seconds (``"is infinite; a timeout is seconds,
    ..."``), or ``None`` when it is one; ``zero``: 0 is one too (a wait that may be none).
    ``bool`` is not a number here, as in JSON."""
    rule = WAIT_RULE if zero else RULE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"is {type(value).__name__}; a timeout is {rule}"
    if isinstance(value, float) and not math.isfinite(value):
        what = "NaN" if math.isnan(value) else "infinite (as JSON's 1e999 reads)"
        return f"is {what}; a timeout is {rule}"
    low = value >= 0 if zero else value > 0
    if not low or value > MAX_SECONDS:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        return f"is {shown if len(shown) <= 24 else shown[:20] + '…'}; a timeout is {rule}"
    return None


def _checked(value: float) -> float:
    found = problem(value)
    if found is not None:
        # A custom error: its message reads as written (no "Value error, " in front of it).
        raise PydanticCustomError("timeout", found)
    return value


def _checked_wait(value: float) -> float:
    found = problem(value, zero=True)
    if found is not None:
        raise PydanticCustomError("timeout", found)
    return value


Seconds = Annotated[float, AfterValidator(_checked)]
"""A timeout field of a model: a number of seconds, finite, above 0, at most a day."""
Wait = Annotated[float, AfterValidator(_checked_wait)]
"""How long something may wait, 0 for not at all: finite, at most a day."""
