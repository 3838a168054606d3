"""The gateway benchmark runs end to end at tiny sizes and prints every figure it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gateway_overhead.py"


@pytest.mark.slow
def test_the_benchmark_prints_latency_throughput_and_first_event_lines() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "40", "--concurrency", "4", "--rounds", "2",
         "--sse-runs", "3"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("gateway overhead: 40 requests, concurrency 4, recording ")
    expected = ["latency direct", "latency gateway", "added latency", "throughput", "sse first"]
    found = [line[: len(prefix)] for line, prefix in zip(lines[1:], expected, strict=True)]
    assert found == expected
    assert "p50 " in lines[3]
    assert "p99 " in lines[3]
    assert "ratio " in lines[4]
    assert "added " in lines[5]
