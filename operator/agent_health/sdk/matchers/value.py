"""Matchers on any value: text, collections, equality, numbers, truth, a predicate, and
the judge's verdict (``to_pass``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from agent_health.sdk import check, context, errors
from agent_health.sdk.check import evidence
from agent_health.sdk.results import RunResult, Signal


def _number(value: Any, matcher: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.MatcherUsageError(
            f"expect(...).{matcher} needs a number, got {type(value).__name__}"
        )
    return float(value)


def _text(value: Any, matcher: str) -> str:
    if not isinstance(value, str):
        hint = " (use result.output)" if isinstance(value, RunResult) else ""
        raise errors.MatcherUsageError(
            f"expect(...).{matcher} needs a string, got {type(value).__name__}{hint}"
        )
    return value


class ValueMatchers(check.Check):
    """``expect(value)`` for strings, collections, numbers and verdicts."""

    __slots__ = ()

    # -- verdicts -----------------------------------------------------------------------

    def to_pass(self, *, weight: float = 1.0) -> Signal:
        """The judge's verdict passed: ``expect(await judge.observe(r, "...")).to_pass()``.

        A gate verdict already gates through its own signal: that signal is returned and no
        second one is recorded, so one failure counts once (``.or_throw()`` still stops the
        body). An ``observe`` verdict becomes a gate here. A skipped verdict passes (neutral);
        an errored one makes the test errored (cause judge).
        """
        from agent_health.sdk.verdict import Verdict  # made by the first judge() a run calls

        verdict = self._value
        if not isinstance(verdict, Verdict):
            raise errors.MatcherUsageError(
                "expect(...).to_pass needs a Verdict (what await judge(...) returned), "
                f"got {type(verdict).__name__}"
            )
        own = self._ctx.signal_of(verdict)
        if verdict.errored:
            self._ctx.record_error(
                f"judge errored on {verdict.criteria!r}: {verdict.error}", cause="judge"
            )
        if own is not None and (verdict.role == "gate" or verdict.skipped or verdict.errored):
            return own
        if verdict.skipped or verdict.errored:
            return self._ctx.record(
                Signal(
                    kind="judge",
                    role="neutral",
                    name=f"to_pass({verdict.criteria!r})",
                    passed=None,
                    error=verdict.error,
                    location=context.caller_location(),
                )
            )
        return self._record(
            f"to_pass({verdict.criteria!r})",
            verdict.passed is True,
            evidence(
                "passed",
                {"passed": verdict.passed, "score": verdict.score, "role": verdict.role},
                reasoning=verdict.reasoning,
            ),
            weight,
        )

    # -- values -------------------------------------------------------------------------

    def to_match(self, pattern: str | re.Pattern[str], *, weight: float = 1.0) -> Signal:
        text = _text(self._value, "to_match")
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return self._record(
            f"to_match({rx.pattern!r})",
            rx.search(text) is not None,
            evidence(rx.pattern, _clip(text)),
            weight,
        )

    def not_to_match(self, pattern: str | re.Pattern[str], *, weight: float = 1.0) -> Signal:
        text = _text(self._value, "not_to_match")
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return self._record(
            f"not_to_match({rx.pattern!r})",
            rx.search(text) is None,
            evidence(rx.pattern, _clip(text)),
            weight,
        )

    def to_contain(self, item: Any, *, weight: float = 1.0) -> Signal:
        return self._record(
            f"to_contain({item!r})",
            self._contains(item, "to_contain"),
            evidence(item, _clip(self._value)),
            weight,
        )

    def not_to_contain(self, item: Any, *, weight: float = 1.0) -> Signal:
        return self._record(
            f"not_to_contain({item!r})",
            not self._contains(item, "not_to_contain"),
            evidence(item, _clip(self._value)),
            weight,
        )

    def _contains(self, item: Any, matcher: str) -> bool:
        value = self._value
        if isinstance(value, str):
            if not isinstance(item, str):
                raise errors.MatcherUsageError(
                    f"expect(str).{matcher} needs a string to look for, got {type(item).__name__}"
                )
            return item in value
        if isinstance(value, (list, tuple, set, frozenset, dict)):
            return item in value
        raise errors.MatcherUsageError(
            f"expect(...).{matcher} needs a string, list, set or dict, got {type(value).__name__}"
        )

    def to_equal(self, expected: Any, *, weight: float = 1.0) -> Signal:
        return self._record(
            f"to_equal({_clip(expected)!r})",
            self._value == expected,
            evidence(expected, self._value),
            weight,
        )

    def not_to_equal(self, expected: Any, *, weight: float = 1.0) -> Signal:
        return self._record(
            f"not_to_equal({_clip(expected)!r})",
            self._value != expected,
            evidence(expected, self._value),
            weight,
        )

    def to_be_less_than(self, limit: float, *, weight: float = 1.0) -> Signal:
        got = _number(self._value, "to_be_less_than")
        return self._record(
            f"to_be_less_than({limit})", got < limit, evidence({"<": limit}, got), weight
        )

    def to_be_less_than_or_equal(self, limit: float, *, weight: float = 1.0) -> Signal:
        got = _number(self._value, "to_be_less_than_or_equal")
        return self._record(
            f"to_be_less_than_or_equal({limit})", got <= limit, evidence({"<=": limit}, got), weight
        )

    def to_be_greater_than(self, limit: float, *, weight: float = 1.0) -> Signal:
        got = _number(self._value, "to_be_greater_than")
        return self._record(
            f"to_be_greater_than({limit})", got > limit, evidence({">": limit}, got), weight
        )

    def to_be_greater_than_or_equal(self, limit: float, *, weight: float = 1.0) -> Signal:
        got = _number(self._value, "to_be_greater_than_or_equal")
        return self._record(
            f"to_be_greater_than_or_equal({limit})",
            got >= limit,
            evidence({">=": limit}, got),
            weight,
        )

    def to_be_truthy(self, *, weight: float = 1.0) -> Signal:
        return self._record(
            "to_be_truthy()", bool(self._value), evidence("truthy", _clip(self._value)), weight
        )

    def to_be_falsy(self, *, weight: float = 1.0) -> Signal:
        return self._record(
            "to_be_falsy()", not self._value, evidence("falsy", _clip(self._value)), weight
        )

    def to_satisfy(
        self,
        predicate: Callable[[Any], object],
        description: str | None = None,
        *,
        weight: float = 1.0,
    ) -> Signal:
        """``predicate(value)`` is truthy. A predicate that raises makes the test errored."""
        if not callable(predicate):
            raise errors.MatcherUsageError(
                f"to_satisfy needs a callable, got {type(predicate).__name__}"
            )
        what = description or getattr(predicate, "__name__", "predicate")
        return self._record(
            f"to_satisfy({what})",
            bool(predicate(self._value)),
            evidence(what, _clip(self._value)),
            weight,
        )


def _clip(value: Any, limit: int = 500) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value
