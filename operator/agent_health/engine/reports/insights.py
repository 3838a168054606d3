"""Insights: an opt-in function that explains one test after its body ran.

``define_config(insights=explain)`` (every test) or ``@test(..., insights=explain)`` (this
test; ``insights=False`` turns them off for it) with::

    async def explain(result, signals, metrics, tools, traces, llm):
        # result:  the TestResult (status, signals, metrics, error, ...)
        # signals: its signals, in body order;  metrics: its derived metrics
        # tools:   the run's trace_query tool pack (get_spans, get_logs, query, metrics),
        #          read-only and scoped to this run; None when the agent never ran
        # traces:  the run's TracesView (None when the agent never ran or traces are off)
        # llm:     async (prompt: str) -> str, or None when no judge model is configured;
        #          answered through the judge cache, so an unchanged question is free
        return {"summary": "...", "why": "...", "recommendations": ["..."]}

Parameters are passed by name, as fixtures are, so ``explain(result)`` alone is fine too;
``run`` gives the RunResult. It runs once per test that was not skipped. Whatever happens
inside it never changes the test's status or score: an error or a malformed answer is
recorded as ``{"error": "..."}`` on the test's ``insights``.

For a conversation the insights also name the turn where it went wrong, when one did
(:mod:`.offtrack`): ``"went_wrong": {"turn": 2, "why": "lookup_order returned an error"}``
(unless the function returned a ``went_wrong`` of its own). The metrics it is given carry
the per-turn numbers (``tokens_per_turn``, ``first_tool_error_turn``, ...).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_health.engine.reports import entries, offtrack
from agent_health.sdk.results import RunResult, TestResult

LLM = Callable[[str], Awaitable[str]]
"""The ``llm`` helper: one prompt in, the model's text out."""

PARAMETERS = ("result", "signals", "metrics", "tools", "traces", "llm", "run")


class Insights(BaseModel):
    """What an insights function returns."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    summary: str
    why: str | None = None
    recommendations: list[str] = Field(default_factory=list)


def tools_for(run: RunResult | None) -> Callable[[], Any] | None:
    """What makes the run's ``trace_query`` tool pack (the judge's) for an insights
    function that asks for ``tools``; ``None`` when the agent never ran."""
    if run is None:
        return None

    def pack() -> Any:
        from agent_health.judging import tools  # only an insights function that asks pays

        return tools.TracePack(tools.source_for(run), run.run_id)

    return pack


async def explain(
    fn: Callable[..., Any],
    result: TestResult,
    *,
    run: RunResult | None,
    traces: Any,
    llm: LLM | None,
    timeout: float,
    tools: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Call ``fn`` and return what goes on ``TestResult.insights`` (never raises).

    ``tools`` makes the run's tool pack; it is called only when ``fn`` asks for ``tools``.
    """
    name = getattr(fn, "__qualname__", repr(fn))
    available: Mapping[str, Callable[[], Any]] = {
        "result": lambda: result,
        "signals": lambda: result.signals,
        "metrics": lambda: result.metrics,
        "tools": tools or (lambda: None),
        "traces": lambda: traces,
        "llm": lambda: llm,
        "run": lambda: run,
    }
    try:
        kwargs = _arguments(fn, available)
    except TypeError as err:
        return {"error": f"insights function {name}: {err}"}
    except Exception as err:  # making the tool pack failed: say so, as for any other error
        return {"error": f"insights function {name}: cannot give its arguments: {err}"}
    try:
        async with asyncio.timeout(timeout):
            answer = fn(**kwargs)
            if inspect.isawaitable(answer):
                answer = await answer
    except TimeoutError:
        return {"error": f"insights function {name} timed out after {timeout:g} s"}
    except Exception as err:
        text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        return {"error": f"insights function {name} raised {text}"}
    try:
        found = Insights.model_validate(answer).model_dump(mode="json")
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        return {
            "error": f"insights function {name} returned {type(answer).__name__}, not "
            f"{{summary, why, recommendations}} ({where}: {first['msg']})"
        }
    if result.turns and "went_wrong" not in found:
        wrong = offtrack.find(entries.from_result(result))
        if wrong is not None:
            found["went_wrong"] = wrong
    return found


def _arguments(
    fn: Callable[..., Any], available: Mapping[str, Callable[[], Any]]
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name in available:
            kwargs[param.name] = available[param.name]()
        elif param.default is param.empty:
            raise TypeError(
                f"unknown parameter {param.name!r}; it may take {', '.join(PARAMETERS)}"
            )
    return kwargs
