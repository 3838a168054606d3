"""Derived metrics on hand-built trajectories with known answers."""

from __future__ import annotations

from typing import Any

from agent_health.connectors.protocol import Step, TokenUsage
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import metrics


def call(tool: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_call", "tool_name": tool, "tool_args": args or {}, **extra}


def ok(tool: str | None, latency: float | None = None, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "tool_result", "status": "ok", "tool_output": {"ok": 1}}
    if tool is not None:
        step["tool_name"] = tool
    if latency is not None:
        step["latency_ms"] = latency
    return {**step, **extra}


def err(tool: str | None, **extra: Any) -> dict[str, Any]:
    step = {"type": "tool_result", "status": "error", "tool_output": {"error": "boom"}, **extra}
    if tool is not None:
        step["tool_name"] = tool
    return step


def say(text: str) -> dict[str, Any]:
    return {"type": "assistant", "content": text}


def think(text: str = "hmm") -> dict[str, Any]:
    return {"type": "thinking", "content": text}


def run(*steps: dict[str, Any], **kwargs: Any) -> RunResult:
    return RunResult(
        run_id="r1",
        prompt="p",
        trajectory=tuple(Step.model_validate(s) for s in steps),
        **kwargs,
    )


def test_no_agent_run_has_no_metrics() -> None:
    assert metrics.derive(None) == {}


def test_no_tool_calls() -> None:
    m = metrics.derive(run(think(), say("hello")), tracesconfig.PriceTable())
    assert m["tool_calls"] == 0
    assert m["tool_histogram"] == {}
    assert m["llm_calls"] == 1
    assert (m["redundant_tool_calls"], m["ignored_tool_errors"], m["retries"]) == (0, 0, 0)
    assert m["step_latency_ms"] == {"count": 0, "total": 0.0, "mean": None, "max": None}
    # every key but a conversation's, which a single run leaves out
    assert set(metrics.METRIC_KEYS) - set(metrics.CONVERSATION_KEYS) <= set(m)
    assert not set(metrics.CONVERSATION_KEYS) & set(m)


def test_empty_trajectory() -> None:
    m = metrics.derive(run())
    assert (m["steps"], m["llm_calls"], m["tool_calls"]) == (0, 0, 0)


def test_tokens_latency_and_histogram() -> None:
    result = run(
        think(),
        call("search_logs", {"service": "payment"}),
        ok("search_logs", 12.5),
        think(),
        call("service_status", {"name": "db"}),
        call("search_logs", {"service": "auth"}),
        ok("service_status", 3.0),
        ok("search_logs", 4.5),
        say("done"),
        token_usage=TokenUsage(prompt=100, completion=40),
        duration_ms=250.4567,
    )
    m = metrics.derive(result)
    assert (m["input_tokens"], m["output_tokens"], m["total_tokens"]) == (100, 40, 140)
    assert m["latency_ms"] == 250.457
    assert m["tool_calls"] == 3
    assert m["tool_histogram"] == {"search_logs": 2, "service_status": 1}
    # think+call | think+call+call | say → three model turns
    assert m["llm_calls"] == 3
    assert m["step_latency_ms"] == {"count": 3, "total": 20.0, "mean": 6.667, "max": 12.5}
    assert m["redundant_tool_calls"] == 0


def test_duplicate_calls_with_reordered_args_are_redundant() -> None:
    result = run(
        call("q", {"a": 1, "b": {"x": [1, 2], "y": "two  words"}}),
        ok("q"),
        call("q", {"b": {"y": "two words ", "x": [1, 2.0]}, "a": 1.0}),
        ok("q"),
        call("q", {"a": 1, "b": {"x": [2, 1], "y": "two words"}}),  # list order matters
        ok("q"),
        call("other", {"a": 1, "b": {"x": [1, 2], "y": "two words"}}),  # another tool
        ok("other"),
        call("q", {"b": {"x": [1, 2], "y": "two words"}, "a": 1}),
        ok("q"),
        say("done"),
    )
    assert metrics.derive(result)["redundant_tool_calls"] == 2


def test_same_args_after_an_error_is_a_retry_not_a_duplicate() -> None:
    m = metrics.derive(
        run(call("q", {"a": 1}), err("q"), call("q", {"a": 1}), ok("q"), say("found it"))
    )
    assert (m["retries"], m["redundant_tool_calls"], m["ignored_tool_errors"]) == (1, 0, 0)
    assert m["tool_errors"] == 1


def test_all_errors_acknowledged_or_ignored() -> None:
    steps = (
        call("search_logs"),
        err("search_logs"),
        call("service_status"),
        err("service_status"),
        call("search_logs"),
        err("search_logs"),
    )
    acknowledged = metrics.derive(
        run(*steps, say("search_logs failed twice and I could not get the service status."))
    )
    assert acknowledged["tool_errors"] == 3
    assert acknowledged["retries"] == 1
    assert acknowledged["ignored_tool_errors"] == 0
    ignored = metrics.derive(run(*steps, say("Everything looks healthy.")))
    # the first error of search_logs was retried; the other two were ignored
    assert ignored["ignored_tool_errors"] == 2
    # acknowledging one tool's failure says nothing about the other's
    one = metrics.derive(run(*steps, say("The service_status tool was unavailable.")))
    assert one["ignored_tool_errors"] == 1
    # an admission that names no failed tool acknowledges nothing
    vague = metrics.derive(run(*steps, say("I could not reach the log service.")))
    assert vague["ignored_tool_errors"] == 2


def rca(tool_error: str, answer: str, *, in_output: bool = False) -> int:
    """ignored_tool_errors of a root-cause run: search_logs fails, then the agent answers."""
    steps = [
        call("search_logs", {"service": "payment"}),
        {
            "type": "tool_result",
            "tool_name": "search_logs",
            "status": "error",
            "tool_output": {"error": tool_error},
        },
        call("service_status", {"name": "db-primary"}),
        ok("service_status"),
    ]
    if not in_output:
        steps.append(say(answer))
    result = run(*steps, output=answer)
    count: int = metrics.derive(result)["ignored_tool_errors"]
    return count


def test_root_cause_answers_do_not_acknowledge_by_accident() -> None:
    """The words of a diagnosis ("cannot", "failed", "unable") speak of the system."""
    error = "log backend answered HTTP 503 Service Unavailable"
    for answer in (
        "Root cause: the payment service cannot reach its database db-primary.",
        "The payment-service failed because db-primary is unable to accept connections.",
        "search_logs shows the payment service cannot connect to db-primary:5432.",
        "According to search_logs, checkout requests failed with connection refused.",
        "Root cause: db-primary is down. Payments failed and refunds are unavailable.",
    ):
        assert rca(error, answer) == 1, answer
        assert rca(error, answer, in_output=True) == 1, answer


def test_root_cause_answers_that_own_the_failed_tool() -> None:
    error = "log backend answered HTTP 503 Service Unavailable"
    for answer in (
        "I could not search the logs, but db-primary reports as down: that is the root cause.",
        "Root cause: db-primary is down (search_logs failed, so this rests on service_status).",
        "The search_logs tool returned an error; the service status shows db-primary down.",
        "Log search was unavailable. The payment service cannot reach db-primary.",
        "The logs were not available (HTTP 503 Service Unavailable); db-primary is down.",
    ):
        assert rca(error, answer) == 0, answer
        # the final output acknowledges too, without a last assistant step
        assert rca(error, answer, in_output=True) == 0, answer


def test_acknowledgement_must_come_after_the_error() -> None:
    m = metrics.derive(run(say("that failed before"), call("a"), err("a"), say("All fine.")))
    assert m["ignored_tool_errors"] == 1
    silent = metrics.derive(run(call("a"), err("a")))
    assert silent["ignored_tool_errors"] == 1


def test_results_pair_by_call_id_and_by_order_without_names() -> None:
    result = run(
        call("a", {"n": 1}, tool_call_id="c1"),
        call("b", {"n": 2}, tool_call_id="c2"),
        err(None, tool_call_id="c2"),  # the error belongs to b, by id
        ok(None, tool_call_id="c1"),
        call("b", {"n": 2}),
        ok(None),  # no name, no id: the oldest open call (b)
        say("b failed once, then worked"),
    )
    m = metrics.derive(result)
    assert (m["retries"], m["redundant_tool_calls"], m["ignored_tool_errors"]) == (1, 0, 0)


def test_cost_from_the_price_table_or_none() -> None:
    table = tracesconfig.PriceTable(
        {
            "gpt-x": tracesconfig.Price(input_per_mtok=2.0, output_per_mtok=8.0),
            "default": tracesconfig.Price(input_per_mtok=1.0, output_per_mtok=1.0),
        }
    )
    usage = TokenUsage(prompt=1_000, completion=500)
    named = run(say("hi"), token_usage=usage, raw={"model": "gpt-x"})
    assert metrics.derive(named, table)["cost_usd"] == 0.006
    assert metrics.derive(named, table)["model"] == "gpt-x"
    other = run(say("hi"), token_usage=usage, raw={"model": "unknown"})
    assert metrics.derive(other, table)["cost_usd"] == 0.0015
    assert metrics.derive(named, tracesconfig.PriceTable())["cost_usd"] is None
    assert metrics.derive(named)["cost_usd"] is None
    no_tokens = run(say("hi"), raw={"model": "gpt-x"})
    assert metrics.derive(no_tokens, table)["cost_usd"] is None  # never a made-up zero


def test_canonical_args_ignore_key_order_and_cosmetics() -> None:
    assert metrics.canonical_args({"b": 1, "a": " x  y "}) == metrics.canonical_args(
        {"a": "x y", "b": 1.0}
    )
    assert metrics.canonical_args({"a": [1, 2]}) != metrics.canonical_args({"a": [2, 1]})


def test_many_steps_stay_linear_in_shape() -> None:
    steps = []
    for i in range(2_000):
        steps += [call("t", {"i": i % 100}), ok("t", 1.0)]
    m = metrics.derive(run(*steps, say("done")))
    assert m["tool_calls"] == 2_000
    assert m["redundant_tool_calls"] == 1_900
    assert m["llm_calls"] == 2_001


def test_derive_reads_the_usage_by_model_once(monkeypatch: Any) -> None:
    """A run's ``usage_by_model`` is read once for its metrics (its model and its cost
    took it twice: issue #40); the model is what ``model_of`` says."""
    read: list[Any] = []
    usage_parts = metrics.usage_parts

    def counted(found: Any) -> Any:
        read.append(found)
        return usage_parts(found)

    monkeypatch.setattr(metrics, "usage_parts", counted)
    run = RunResult(run_id="r", prompt="p", raw={"model": "m-1"}, token_usage=TokenUsage(total=2))
    derived = metrics.derive(run, tracesconfig.PriceTable())
    assert len(read) == 1
    assert derived["model"] == metrics.model_of(run) == "m-1"
