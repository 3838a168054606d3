# Over 350 lines: one Expectation class whose methods are the matcher API, kept in one place.
"""``expect(value).to_*`` — deterministic checks that record gate signals.

A failed check does not raise: it records a failed gate signal with evidence (what was
expected, what was seen) on the running test's own context, and the body goes on, so one
run reports every broken expectation. ``.or_throw()`` on the returned signal stops the body.
A check that cannot be made (``to_have_called_tool`` on a string) raises
:class:`~agent_health.sdk.errors.MatcherUsageError`: that is a bug in the test.

No silent zeros: a check on something the agent did not report — its token usage, or its
steps when it sent no trajectory at all — fails, and its evidence says what was missing
(``{"missing": ...}``). A zero it did not report would pass any "at most" gate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_health.connectors.protocol import Step
from agent_health.sdk import context as ctx_mod
from agent_health.sdk import errors
from agent_health.sdk.results import RunResult, Signal, Trajectory, Verdict, evidence


def _steps(value: Any, matcher: str) -> Sequence[Step]:
    if isinstance(value, RunResult):
        return value.trajectory_steps
    if isinstance(value, Trajectory):
        return value
    raise errors.MatcherUsageError(
        f"expect(...).{matcher} needs a RunResult (what agent.run() returned), "
        f"got {type(value).__name__}"
    )


NO_TRAJECTORY = (
    "the agent reported no trajectory (its reply has no 'trajectory' field), so its tool "
    "calls are unknown"
)
NO_USAGE = (
    "the agent reported no token usage (its reply has no 'token_usage' with a total), so the "
    "tokens it used are unknown"
)


def _missing_steps(value: Any) -> str | None:
    """Why the steps cannot be checked, or ``None`` when they can."""
    if isinstance(value, RunResult) and not value.trajectory_reported:
        return NO_TRAJECTORY
    return None


def _args_match(actual: Mapping[str, Any] | None, expected: Mapping[str, Any]) -> bool:
    actual = actual or {}
    for key, want in expected.items():
        if key not in actual:
            return False
        got = actual[key]
        if isinstance(want, re.Pattern):
            if not isinstance(got, str) or not want.search(got):
                return False
        elif callable(want):
            if not want(got):
                return False
        elif isinstance(want, Mapping) and isinstance(got, Mapping):
            if not _args_match(got, want):
                return False
        elif got != want:
            return False
    return True


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


class Expectation:
    """Checks on one value, recorded on one test's context."""

    __slots__ = ("_ctx", "_value")

    def __init__(self, value: Any, ctx: ctx_mod.TestContext) -> None:
        self._value = value
        self._ctx = ctx

    def _record(
        self, name: str, passed: bool, ev: dict[str, Any], weight: float, *, steps: bool = False
    ) -> Signal:
        """Record the signal; ``steps``: it checks the agent's steps, which must be known."""
        missing = _missing_steps(self._value) if steps else None
        if missing is not None:
            passed, ev = False, {**ev, "missing": missing}
        return self._ctx.record(
            Signal(
                kind="deterministic",
                role="gate",
                name=name,
                passed=passed,
                score=1.0 if passed else 0.0,
                weight=weight,
                evidence=ev,
                location=ctx_mod.caller_location(),
            )
        )

    # -- trajectory ---------------------------------------------------------------------

    def to_have_called_tool(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        times: int | None = None,
        weight: float = 1.0,
    ) -> Signal:
        """The agent called tool ``name`` (with ``args`` as a subset, ``times`` exactly)."""
        steps = _steps(self._value, "to_have_called_tool")
        calls = [s for s in steps if s.type == "tool_call"]
        named = [s for s in calls if s.tool_name == name]
        matching = [s for s in named if args is None or _args_match(s.tool_args, args)]
        passed = len(matching) == times if times is not None else bool(matching)
        label = f"to_have_called_tool({name!r}" + (f", times={times}" if times is not None else "")
        return self._record(
            label + ")",
            passed,
            evidence(
                {"tool": name, "args": args, "times": times if times is not None else ">=1"},
                {
                    "matching_calls": len(matching),
                    "calls_of_tool": [s.tool_args for s in named],
                    "tools_called": [s.tool_name for s in calls],
                },
            ),
            weight,
            steps=True,
        )

    def not_to_have_called_tool(
        self, name: str, args: Mapping[str, Any] | None = None, *, weight: float = 1.0
    ) -> Signal:
        steps = _steps(self._value, "not_to_have_called_tool")
        matching = [
            s
            for s in steps
            if s.type == "tool_call"
            and s.tool_name == name
            and (args is None or _args_match(s.tool_args, args))
        ]
        return self._record(
            f"not_to_have_called_tool({name!r})",
            not matching,
            evidence({"tool": name, "args": args, "times": 0}, [s.tool_args for s in matching]),
            weight,
            steps=True,
        )

    def to_have_called_tools_in_order(self, names: Sequence[str], *, weight: float = 1.0) -> Signal:
        """The tools were called in this order (other calls may come in between)."""
        steps = _steps(self._value, "to_have_called_tools_in_order")
        called = [s.tool_name for s in steps if s.type == "tool_call"]
        it = iter(called)
        passed = all(any(c == want for c in it) for want in names)
        return self._record(
            f"to_have_called_tools_in_order({list(names)!r})",
            passed,
            evidence(list(names), called),
            weight,
            steps=True,
        )

    def to_have_called_tools_in_steps(
        self, groups: Sequence[Sequence[str]], *, weight: float = 1.0
    ) -> Signal:
        """The tools of each step were all called, each step after the one before it.

        ``groups`` is a list of steps, each a list of tools in any order
        (``[["search_logs", "service_status"], ["restart_pod"]]``): every tool of a step is
        called after the previous step's tools have all been called; other calls may come
        between. A tool that two steps need must be called in both.
        """
        steps = _steps(self._value, "to_have_called_tools_in_steps")
        if isinstance(groups, str) or any(isinstance(group, str) for group in groups):
            raise errors.MatcherUsageError(
                "to_have_called_tools_in_steps takes a list of steps, each a list of tool "
                'names: [["search_logs"], ["restart_pod"]]'
            )
        wanted = [list(group) for group in groups]
        called = [s.tool_name for s in steps if s.type == "tool_call"]
        broken = _first_step_out_of_order(called, wanted)
        extra = {} if broken is None else {"broken_at": {"step": broken[0] + 1, "tool": broken[1]}}
        return self._record(
            f"to_have_called_tools_in_steps({wanted!r})",
            broken is None,
            evidence(wanted, called, **extra),
            weight,
            steps=True,
        )

    def to_have_no_tool_errors(self, *, weight: float = 1.0) -> Signal:
        steps = _steps(self._value, "to_have_no_tool_errors")
        failed = [s for s in steps if s.status == "error"]
        return self._record(
            "to_have_no_tool_errors()",
            not failed,
            evidence([], [{"tool": s.tool_name, "output": s.tool_output} for s in failed]),
            weight,
            steps=True,
        )

    def to_complete_within(
        self, seconds: float | None = None, *, ms: float | None = None, weight: float = 1.0
    ) -> Signal:
        if not isinstance(self._value, RunResult):
            raise errors.MatcherUsageError(
                "expect(...).to_complete_within needs a RunResult, "
                f"got {type(self._value).__name__}"
            )
        if (seconds is None) == (ms is None):
            raise errors.MatcherUsageError("to_complete_within takes seconds= or ms=, not both")
        limit_ms = ms if ms is not None else float(seconds or 0) * 1000
        took = self._value.duration_ms
        return self._record(
            f"to_complete_within({limit_ms:g} ms)",
            took <= limit_ms,
            evidence({"max_ms": limit_ms}, {"duration_ms": round(took, 3)}),
            weight,
        )

    def to_use_at_most_tokens(self, limit: int, *, weight: float = 1.0) -> Signal:
        if not isinstance(self._value, RunResult):
            raise errors.MatcherUsageError(
                "expect(...).to_use_at_most_tokens needs a RunResult, "
                f"got {type(self._value).__name__}"
            )
        used = self._value.token_usage.total
        if used is None:
            return self._record(
                f"to_use_at_most_tokens({limit})",
                False,
                evidence({"max_tokens": limit}, {"total_tokens": None}, missing=NO_USAGE),
                weight,
            )
        return self._record(
            f"to_use_at_most_tokens({limit})",
            used <= limit,
            evidence({"max_tokens": limit}, {"total_tokens": used}),
            weight,
        )

    # -- verdicts -----------------------------------------------------------------------

    def to_pass(self, *, weight: float = 1.0) -> Signal:
        """The judge's verdict passed: ``expect(await judge.observe(r, "...")).to_pass()``.

        A gate verdict already gates through its own signal: that signal is returned and no
        second one is recorded, so one failure counts once (``.or_throw()`` still stops the
        body). An ``observe`` verdict becomes a gate here. A skipped verdict passes (neutral);
        an errored one makes the test errored (cause judge).
        """
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
                    location=ctx_mod.caller_location(),
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


def _first_step_out_of_order(
    called: Sequence[str | None], groups: Sequence[Sequence[str]]
) -> tuple[int, str] | None:
    """(step index, tool) of the first required tool not called after the previous step
    completed, or ``None`` when every step is met in order. Greedy earliest matching is
    optimal: finishing a step as early as possible leaves the most calls for the next."""
    start = 0
    for index, group in enumerate(groups):
        done = start
        for tool in group:
            at = next((i for i in range(start, len(called)) if called[i] == tool), None)
            if at is None:
                return index, tool
            done = max(done, at + 1)
        start = done
    return None


def _clip(value: Any, limit: int = 500) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value


class Expect:
    """The ``expect`` entry point; stateless, it finds the running test's context."""

    __slots__ = ()

    def __call__(self, value: Any) -> Expectation:
        return Expectation(value, ctx_mod.current("expect()"))


class BoundExpect:
    """The ``expect`` fixture: bound to one test's context."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ctx_mod.TestContext) -> None:
        self._ctx = ctx

    def __call__(self, value: Any) -> Expectation:
        return Expectation(value, self._ctx)


expect = Expect()
