"""Derived metrics over trajectories of 10, 1,000 and 100,000 steps: the time per step must stay
flat (one linear pass, no quadratic duplicate scan).

    python bench/metrics.py

Each trajectory mixes model turns, tool calls with repeated and reordered arguments,
errors, retries and assistant text, like a long-running agent would produce.
"""

from __future__ import annotations

import time

from agent_health.connectors.protocol import Step, TokenUsage
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import metrics

SIZES = (10, 1_000, 100_000)
TOOLS = ("search_logs", "service_status", "query_db", "read_file")


def trajectory(n: int) -> tuple[Step, ...]:
    """``n`` steps: think, call, result (some errors), sometimes an assistant message."""
    steps: list[Step] = []
    i = 0
    while len(steps) < n:
        tool = TOOLS[i % len(TOOLS)]
        args = {"service": f"svc-{i % 50}", "level": "error"}
        if i % 3:
            args = dict(reversed(list(args.items())))  # same call, keys reordered
        steps.append(Step(type="thinking", content=f"step {i}"))
        steps.append(Step(type="tool_call", tool_name=tool, tool_args=args))
        failed = i % 7 == 0
        steps.append(
            Step(
                type="tool_result",
                tool_name=tool,
                status="error" if failed else "ok",
                tool_output={"lines": i},
                latency_ms=float(i % 40),
            )
        )
        if i % 5 == 0:
            steps.append(Step(type="assistant", content=f"progress {i}: the {tool} call failed"))
        i += 1
    return tuple(steps[:n])


def per_step_us(result: RunResult, prices: tracesconfig.PriceTable) -> float:
    """Best of several timings (microseconds per step) to keep noise out of the ratio."""
    n = max(1, len(result.trajectory_steps))
    repeats = max(3, min(200, 200_000 // n))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            metrics.derive(result, prices)
        best = min(best, (time.perf_counter() - started) / repeats)
    return best / n * 1e6


def main() -> None:
    prices = tracesconfig.PriceTable(
        {"default": tracesconfig.Price(input_per_mtok=0.15, output_per_mtok=0.6)}
    )
    timings = {}
    print(f"{'steps':>8}  {'µs/step':>8}  {'total ms':>9}  redundant  ignored  retries")
    for n in SIZES:
        result = RunResult(
            run_id=f"bench-{n}",
            prompt="bench",
            trajectory=trajectory(n),
            token_usage=TokenUsage(prompt=10 * n, completion=2 * n),
            duration_ms=float(n),
        )
        us = per_step_us(result, prices)
        m = metrics.derive(result, prices)
        timings[n] = us
        print(
            f"{n:>8}  {us:>8.3f}  {us * n / 1000:>9.3f}  {m['redundant_tool_calls']:>9}  "
            f"{m['ignored_tool_errors']:>7}  {m['retries']:>7}"
        )
    ratio = timings[SIZES[-1]] / timings[SIZES[1]]
    print(f"time per step, {SIZES[-1]:,} vs {SIZES[1]:,} steps: {ratio:.2f}x (flat is ~1x)")


if __name__ == "__main__":
    main()
