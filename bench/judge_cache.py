"""Benchmark: 1,000 judge calls cold (scripted model on loopback) and warm (the SQLite cache).

    .venv/bin/python bench/judge_cache.py [--calls N]

Prints the cold and warm totals, the warm/cold ratio and the per-hit latency (median,
p99) of a warm ``judge()`` call through the real backend: key computation, the SQLite
lookup off the event loop, and the verdict. Target: a hit ≤ 1 ms median.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agent_health import judging
from agent_health.sdk.config import Config
from support.judge_servers import Answer, ScriptedModel, judge_config, judge_request


async def _pass(config: Any, requests: list[Any], *, expect_cached: bool) -> list[float]:
    latencies = []
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        for request in requests:
            started = time.perf_counter()
            verdict = await backend(request)
            latencies.append(time.perf_counter() - started)
            assert verdict.cached is expect_cached, verdict
            assert verdict.passed is True
    return latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(calls: int) -> None:
    server = await ScriptedModel.start("openai", default=Answer(True, 0.9, "ok"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = judge_config(server, Path(tmp))
            requests = [judge_request(criteria=f"claim number {i} holds") for i in range(calls)]
            cold = await _pass(config, requests, expect_cached=False)
            warm = await _pass(config, requests, expect_cached=True)  # a fresh backend: a rerun
    finally:
        await server.close()
    assert len(server.requests) == calls
    cold_total, warm_total = sum(cold), sum(warm)
    print(f"judge calls:        {calls} cold (scripted model on loopback), {calls} warm (cache)")
    cold_median = statistics.median(cold) * 1e3
    print(
        f"cold total:         {cold_total * 1000:9.1f} ms  ({cold_median:.3f} ms median per call)"
    )
    print(f"warm total:         {warm_total * 1000:9.1f} ms")
    speedup = cold_total / warm_total
    print(f"warm/cold ratio:    {warm_total / cold_total:9.3f}  ({speedup:.1f}x faster)")
    median, p99 = statistics.median(warm), _pct(warm, 0.99)
    print(f"per-hit latency:    median {median * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    print(f"target (hit <= 1 ms median): {'met' if median <= 0.001 else 'MISSED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    asyncio.run(main(parser.parse_args().calls))
