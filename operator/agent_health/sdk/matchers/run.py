"""Matchers on what ``agent.run()`` returned: the tools it called, in which order, their
errors, how long it took and the tokens it used.

No silent zeros: tokens the agent did not report fail ``to_use_at_most_tokens``, with
``{"missing": ...}`` in the evidence; steps it did not report fail every step matcher
(:mod:`.check`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_health.connectors.protocol import Step
from agent_health.sdk import check, errors
from agent_health.sdk.check import evidence
from agent_health.sdk.results import RunResult, Signal, Trajectory


def _steps(value: Any, matcher: str) -> Sequence[Step]:
    if isinstance(value, RunResult):
        return value.trajectory_steps
    if isinstance(value, Trajectory):
        return value
    raise errors.MatcherUsageError(
        f"expect(...).{matcher} needs a RunResult (what agent.run() returned), "
        f"got {type(value).__name__}"
    )


NO_USAGE = (
    "the agent reported no token usage (its reply has no 'token_usage' with a total), so the "
    "tokens it used are unknown"
)


def _of_server(step: Step, server: str | None) -> bool:
    """Whether ``step`` may be a call of ``server``'s tool: it names that server, or none."""
    said = step.server
    if server is None or said is None:
        return True
    return said.removeprefix("peer:") == server.removeprefix("peer:")


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


class RunMatchers(check.Check):
    """``expect(result)`` on a :class:`~agent_health.sdk.results.RunResult`; the step
    matchers also take its :class:`~agent_health.sdk.results.Trajectory`."""

    __slots__ = ()

    def to_have_called_tool(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        times: int | None = None,
        server: str | None = None,
        weight: float = 1.0,
    ) -> Signal:
        """The agent called tool ``name`` (with ``args`` as a subset, ``times`` exactly; of
        the MCP server ``server`` — its peer name — when given).

        A tool of a peer the gateway records (a RunSpec peer's declared tools, an MCP
        server's) is held to the gateway's record when the test is graded: a call the agent
        claims and the gateway did not see fails, and for an MCP tool so does one the gateway
        saw of another server or without these ``args``. On the agent's word, a step that
        names its server (a ``server`` field) counts only for that server."""
        steps = _steps(self._value, "to_have_called_tool")
        calls = [s for s in steps if s.type == "tool_call"]
        named = [s for s in calls if s.tool_name == name and _of_server(s, server)]
        matching = [s for s in named if args is None or _args_match(s.tool_args, args)]
        passed = len(matching) == times if times is not None else bool(matching)
        label = f"to_have_called_tool({name!r}" + (f", times={times}" if times is not None else "")
        label += f", server={server!r}" if server is not None else ""
        expected: dict[str, Any] = {
            "tool": name,
            "args": args,
            "times": times if times is not None else ">=1",
        }
        if server is not None:
            expected["server"] = server
        return self._record(
            label + ")",
            passed,
            evidence(
                expected,
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
        failed = [s for s in steps if s.failed]
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
