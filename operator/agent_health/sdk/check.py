"""What every matcher records through: one value, one test's context, one gate signal.

A check on the agent's steps (``steps=True``) fails when the agent sent no trajectory at
all, and its evidence says so: no steps would pass any "not called" or "at most" gate.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agent_health.sdk import context
from agent_health.sdk.results import RunResult, Signal

NO_TRAJECTORY = (
    "the agent reported no trajectory (its reply has no 'trajectory' field), so its tool "
    "calls are unknown"
)


def _missing_steps(value: Any) -> str | None:
    """Why the steps cannot be checked, or ``None`` when they can."""
    if isinstance(value, RunResult) and not value.trajectory_reported:
        return NO_TRAJECTORY
    return None


class Check:
    """One value checked on one test's context; each family of matchers extends it."""

    __slots__ = ("_ctx", "_value")

    def __init__(self, value: Any, ctx: context.TestContext) -> None:
        self._value = value
        self._ctx = ctx

    def _record(
        self, name: str, passed: bool, ev: dict[str, Any], weight: float, *, steps: bool = False
    ) -> Signal:
        """Record the signal; ``steps``: it checks the agent's steps, which must be known."""
        missing = _missing_steps(self._value) if steps else None
        if missing is not None:
            passed, ev = False, {**ev, "missing": missing}
        turn = self._value.turn_number if isinstance(self._value, RunResult) else None
        if turn is not None:  # a check on result.turn(n): reports show it beside turn n
            ev = {**ev, "turn": turn}
        return self._ctx.record(
            Signal(
                kind="deterministic",
                role="gate",
                name=name,
                passed=passed,
                score=1.0 if passed else 0.0,
                weight=weight,
                evidence=ev,
                location=context.caller_location(),
            )
        )


def evidence(expected: Any, actual: Any, **extra: Any) -> dict[str, Any]:
    """Evidence for a deterministic signal, made JSON-safe."""
    return {
        "expected": _safe(expected),
        "actual": _safe(actual),
        **{k: _safe(v) for k, v in extra.items()},
    }


def _safe(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_safe(v) for v in value]
    return repr(value)
