"""Metrics derived from a RunResult, computed for every test that ran the agent.

One pass over the trajectory, so the cost per step stays flat from 10 to 100,000 steps
(``bench/metrics.py`` measures it). The keys, also written to the JSON report:

* ``total_tokens``, ``input_tokens``, ``output_tokens`` — as the agent reported them;
  ``None`` for a count it did not report, never a made-up zero.
* ``cost_usd`` — from the price table (``define_config(prices={...})``), each model's tokens
  at that model's price (``model``, or ``usage_by_model`` when the run used several);
  ``None`` when the table has no price for a model tokens were spent on, or the agent
  reported no tokens (or not split into input and output).
* ``model`` — the model the agent named (``None``: none, or several); ``usage_by_model`` —
  with several, each one's tokens (``model``, ``prompt``, ``completion``, ``total``);
  ``unpriced_models`` — with a price table, each model tokens were spent on that it has no
  price for (``model``, ``None`` for one the agent did not name, and ``tokens``).
* ``latency_ms`` — end to end; ``step_latency_ms`` — count/total/mean/max over the steps that
  carry a latency.
* ``llm_calls`` — model turns: a run of consecutive model steps (thinking, assistant text,
  tool calls issued together) between tool results is one call to the model.
* ``tool_calls``, ``tool_histogram`` — calls per tool.
* ``redundant_tool_calls`` — a call whose tool and canonical arguments (dict key order,
  whitespace and ``1`` vs ``1.0`` do not matter) repeat an earlier call that did not fail.
* ``retries`` — a call of a tool whose previous result was an error.
* ``ignored_tool_errors`` — an error result after which the agent neither called that tool
  again nor acknowledged that failure in later text: naming the tool with an admission
  close to it, or repeating the tool's error message (:mod:`~agent_health.traces.acknowledge`).

Every count read from the trajectory (``llm_calls``, ``tool_calls``, ``tool_histogram``,
the smells, ``step_latency_ms``) is ``None`` when the agent reported no trajectory at all:
unknown, not zero.

A conversation (``agent.run(turns=...)`` or ``user=...``) adds, per turn, first to last:

* ``turns`` — how many; ``tokens_per_turn`` — each turn's total tokens (``None`` for a turn
  whose tokens were not reported); ``latency_per_turn_ms`` — each turn's duration;
  ``tool_calls_per_turn`` — each turn's tool calls (``None`` without a trajectory);
* ``slowest_turn`` — the number of the turn that took longest;
* ``first_tool_error_turn`` — the number of the first turn with a failed tool result
  (``None``: none failed).

A single run has none of these keys: it is one turn, and its totals say it all.
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agent_health.connectors import protocol
from agent_health.connectors.protocol import Step
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult, Signal

if TYPE_CHECKING:
    from pydantic import TypeAdapter

CONVERSATION_KEYS = (
    "turns",
    "tokens_per_turn",
    "latency_per_turn_ms",
    "tool_calls_per_turn",
    "slowest_turn",
    "first_tool_error_turn",
)
METRIC_KEYS = (
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "llm_calls",
    "tool_calls",
    "tool_histogram",
    "redundant_tool_calls",
    "ignored_tool_errors",
    "retries",
    *CONVERSATION_KEYS,
)
MODEL_STEPS = frozenset({"thinking", "assistant", "tool_call"})


def derive(
    result: RunResult | None, prices: tracesconfig.PriceTable | None = None
) -> dict[str, Any]:
    """Tokens, cost, latency and tool use of one run (empty when the agent never ran)."""
    if result is None:
        return {}
    usage = result.token_usage
    parts = _parts(result)
    # (Without a price table, a run that named one model needs no parts: the common case.)
    cost, unpriced = costing(prices, parts or usage_by_model(result)) if prices else (None, [])
    derived: dict[str, Any] = {
        "total_tokens": usage.total,
        "input_tokens": usage.prompt,
        "output_tokens": usage.completion,
        "cost_usd": cost,
        "model": _model(result, parts),
        "latency_ms": round(result.duration_ms, 3),
    }
    if len(parts) > 1:
        derived["usage_by_model"] = protocol.usage_json(parts)
    if unpriced:
        derived["unpriced_models"] = unpriced
    if result.conversation:
        derived |= per_turn(result)
    if not result.trajectory_reported:
        derived.update(dict.fromkeys(_TRAJECTORY_KEYS))
        return derived
    stats = tool_stats(result.trajectory_steps, final=result.output)
    derived.update(
        {
            "step_latency_ms": stats.latency(),
            "llm_calls": stats.llm_calls,
            "tool_calls": stats.tool_calls,
            "tool_histogram": stats.histogram,  # made for this result alone
            "redundant_tool_calls": stats.redundant,
            "ignored_tool_errors": stats.ignored_errors,
            "retries": stats.retries,
            "tool_errors": stats.tool_errors,
            "steps": stats.steps,
        }
    )
    return derived


_TRAJECTORY_KEYS = (
    "step_latency_ms",
    "llm_calls",
    "tool_calls",
    "tool_histogram",
    "redundant_tool_calls",
    "ignored_tool_errors",
    "retries",
    "tool_errors",
    "steps",
)


def per_turn(result: RunResult) -> dict[str, Any]:
    """A conversation's metrics turn by turn (the module docstring lists the keys)."""
    turns = result.conversation
    reported = result.trajectory_reported
    failed = (
        t.number for t in turns if any(s.type == "tool_result" and s.failed for s in t.trajectory)
    )
    slowest = max(turns, key=lambda t: t.duration_ms)  # the first of equals
    return {
        "turns": len(turns),
        "tokens_per_turn": [t.token_usage.total for t in turns],
        "latency_per_turn_ms": [round(t.duration_ms, 3) for t in turns],
        "tool_calls_per_turn": [
            sum(1 for s in t.trajectory if s.type == "tool_call") if reported else None
            for t in turns
        ],
        "slowest_turn": slowest.number,
        "first_tool_error_turn": next(failed, None) if reported else None,
    }


def model_of(result: RunResult) -> str | None:
    """The model the agent says it used (``"model"`` in its reply, else the one model its
    ``usage_by_model`` names); ``None`` when it names none, or several."""
    return _model(result, _parts(result))


def _model(result: RunResult, parts: tuple[protocol.ModelUsage, ...]) -> str | None:
    """:func:`model_of` given the run's ``usage_by_model`` already read (``parts``)."""
    if not parts:  # most answers name no models' usage: only "model" can name one
        model = result.raw.get("model")
        return model if isinstance(model, str) and model else None
    models = {part.model for part in parts}
    if len(models) > 1:
        return None
    model = result.raw.get("model")
    if isinstance(model, str) and model:
        return model
    return next(iter(models), None)


@functools.cache
def _parts_adapter() -> TypeAdapter[tuple[protocol.ModelUsage, ...]]:
    # Built (and pydantic's TypeAdapter imported) for the first run that names several
    # models: most runs never do.
    from pydantic import TypeAdapter

    return TypeAdapter(tuple[protocol.ModelUsage, ...])


def _parts(result: RunResult) -> tuple[protocol.ModelUsage, ...]:
    return usage_parts(result.raw.get("usage_by_model"))


def usage_parts(found: Any) -> tuple[protocol.ModelUsage, ...]:
    """``usage_by_model`` as JSON data (a run's raw, its metrics) read back; checked when
    the reply was read, so what does not fit (a hand-edited ledger) reads as none."""
    if not found:
        return ()
    try:
        return _parts_adapter().validate_python(found)
    except ValidationError:
        return ()


def usage_by_model(result: RunResult) -> tuple[protocol.ModelUsage, ...]:
    """The run's tokens per model: its ``usage_by_model``, else all of them on
    :func:`model_of`'s model."""
    parts = _parts(result)
    if parts:
        return parts
    usage = result.token_usage
    return (protocol.ModelUsage(model=model_of(result), **usage.model_dump()),)


def costing(
    prices: tracesconfig.PriceTable | None, parts: Sequence[protocol.ModelUsage]
) -> tuple[float | None, list[dict[str, Any]]]:
    """The cost of ``parts`` at ``prices``, and the parts spent on a model the table has no
    price for (``{"model", "tokens"}``). The cost is known only when every part that
    reported tokens is priced and split into input and output (priced apart)."""
    if not prices:
        return None, []
    cost, known, unpriced = 0.0, True, []
    reported = [part for part in parts if part.reported]
    for part in reported:
        price = prices.price(part.model)
        if price is None:
            unpriced.append({"model": part.model, "tokens": part.total})
            known = False
        elif part.prompt is None or part.completion is None:
            known = False
        else:
            cost += price.cost(part.prompt, part.completion)
    return (round(cost, 8) if known and reported else None), unpriced


def canonical_args(args: Any) -> str:
    """Arguments as one string that ignores dict key order and cosmetic differences."""
    return json.dumps(_normal(args), sort_keys=True, separators=(",", ":"), default=repr)


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(eq=False, repr=False)
class ToolStats:
    """What one pass over a trajectory found."""

    steps: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    redundant: int = 0
    retries: int = 0
    ignored_errors: int = 0
    histogram: dict[str, int] = field(default_factory=dict)
    """Calls per tool, in the order first called (a plain dict: a ``Counter`` made for every
    test cost a test three calls of Python, issue #40)."""
    latency_count: int = 0
    latency_total: float = 0.0
    latency_max: float = 0.0

    def latency(self) -> dict[str, float | int | None]:
        count = self.latency_count
        return {
            "count": count,
            "total": round(self.latency_total, 3),
            "mean": round(self.latency_total / count, 3) if count else None,
            "max": round(self.latency_max, 3) if count else None,
        }


def tool_stats(steps: Sequence[Step], final: str | None = None) -> ToolStats:
    """Count calls, turns, duplicates, retries and ignored errors in one linear pass.

    ``final`` is the run's output: it may acknowledge an error even when the agent did not
    repeat it as a last ``assistant`` step.
    """
    stats = ToolStats(steps=len(steps))
    live_keys: set[tuple[str, str]] = set()  # calls made that have not failed
    awaiting: dict[str, deque[tuple[int, tuple[str, str]]]] = {}  # tool → calls without result
    by_id: dict[str, tuple[int, tuple[str, str]]] = {}
    last_call: dict[str, int] = {}
    failed_last: set[str] = set()
    error_results: list[tuple[int, str, str]] = []
    answers: list[tuple[int, str]] = []
    in_turn = False
    for i, step in enumerate(steps):
        kind = step.type
        if kind in MODEL_STEPS:
            if not in_turn:
                stats.llm_calls += 1
                in_turn = True
        else:
            in_turn = False
        if step.latency_ms is not None:
            stats.latency_count += 1
            stats.latency_total += step.latency_ms
            stats.latency_max = max(stats.latency_max, step.latency_ms)
        if kind == "tool_call":
            name = step.tool_name or "?"
            stats.tool_calls += 1
            stats.histogram[name] = stats.histogram.get(name, 0) + 1
            key = (name, canonical_args(step.tool_args or {}))
            if name in failed_last:
                stats.retries += 1
                failed_last.discard(name)
            elif key in live_keys:
                stats.redundant += 1
            live_keys.add(key)
            last_call[name] = i
            call_id = _call_id(step)
            if call_id is not None:
                by_id[call_id] = (i, key)
            else:
                awaiting.setdefault(name, deque()).append((i, key))
        elif kind == "tool_result":
            call = _match(step, awaiting, by_id)
            name = step.tool_name or (call[1][0] if call else "?")
            if step.failed:
                # Read only for a failed tool call: a run whose tools all worked never loads it.
                from agent_health.traces import acknowledge

                stats.tool_errors += 1
                failed_last.add(name)
                error_results.append(
                    (i, name, acknowledge.error_text(step.tool_output, step.content))
                )
                if call is not None:
                    live_keys.discard(call[1])
            else:
                failed_last.discard(name)
        elif kind == "assistant" and step.content:
            answers.append((i, step.content))
    if final and (not answers or answers[-1][1] != final):
        answers.append((len(steps), final))
    # An error the agent retried (called the tool again) is handled, whatever it said.
    unretried = [e for e in error_results if last_call.get(e[1], -1) < e[0]]
    if unretried:
        from agent_health.traces import acknowledge

        stats.ignored_errors = acknowledge.count_ignored(unretried, answers)
    return stats


def _call_id(step: Step) -> str | None:
    extra = step.model_extra
    value = extra.get("tool_call_id") if extra else None
    return str(value) if value is not None else None


def _match(
    step: Step,
    awaiting: dict[str, deque[tuple[int, tuple[str, str]]]],
    by_id: dict[str, tuple[int, tuple[str, str]]],
) -> tuple[int, tuple[str, str]] | None:
    """The call a result answers: by ``tool_call_id``, else the oldest open call of the tool."""
    call_id = _call_id(step)
    if call_id is not None and call_id in by_id:
        return by_id.pop(call_id)
    if step.tool_name is not None:
        queue = awaiting.get(step.tool_name)
        return queue.popleft() if queue else None
    oldest = min((q[0] for q in awaiting.values() if q), default=None)
    if oldest is None:
        return None
    return awaiting[oldest[1][0]].popleft()


def metric_signals(derived: Mapping[str, Any]) -> list[Signal]:
    """Each derived metric as an observe-role ``metric`` signal (never gates, never scores).

    Made on demand from a result's ``metrics`` (reports list them after the body's own
    signals), so thousands of results do not each hold a dozen signal objects.
    """
    return [
        Signal(
            kind="metric", role="observe", name=key, passed=None, evidence={"value": derived[key]}
        )
        for key in METRIC_KEYS
        if key in derived
    ]
