"""The gateway benchmark runs end to end at tiny sizes and prints every figure it promises."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gateway_overhead.py"


@pytest.mark.slow
def test_the_benchmark_prints_latency_both_workloads_cpu_and_first_event_lines() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "40", "--agent-requests", "8",
         "--latency", "5", "--concurrency", "4", "--rounds", "2", "--sse-runs", "3"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("gateway overhead: 40 requests, concurrency 4, 2 rounds per side")
    # Every request the recording gateway forwarded is in its ledger, spooled as in a pod:
    # warm-up 40 + 40, one at a time 40, 2 x 8 and 2 x 40 in the rounds, 3 streams
    assert "recording 219 exchanges to a file ledger (spooled)" in lines[0]
    expected = [
        "latency direct", "latency gateway", "added latency",
        "throughput, an agent's calls (5 ms upstream", "  direct", "  recording", "  no ledger",
        "  CPU/request of the others",
        "throughput, an instant upstream", "  direct", "  recording", "  no ledger",
        "  CPU/request of the others",
        "sse first",
    ]  # fmt: skip
    found = [line[: len(prefix)] for line, prefix in zip(lines[1:], expected, strict=True)]
    assert found == expected
    assert "p50 " in lines[3]
    assert "p99 " in lines[3]
    assert "target ratio >= 0.7: " in lines[4]
    for line in (lines[6], lines[7], lines[11], lines[12]):
        assert "ratio " in line
        assert "gateway CPU/request " in line
        assert "n/a" not in line  # Linux: /proc gives every process's CPU time
    assert "added " in lines[14]


@pytest.mark.slow
def test_the_mcp_benchmark_prints_both_sides_and_the_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--mcp", "--requests", "64", "--concurrency", "4",
         "--rounds", "2"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # Warm-up and two rounds of 64 calls a side (both sides at once, half the concurrency
    # each): every call the parsing side proxied is sealed.
    assert lines[0].startswith(
        "mcp parsing: 64 tools/call a round to each side at once, concurrency 2 each, 2 rounds"
    ), lines[0]
    assert "; 192 MCP calls sealed;" in lines[0]
    assert lines[1].startswith("  unparsed (protocol=http)  gateway CPU/call ")
    assert lines[2].startswith("  parsed   (protocol=mcp)   gateway CPU/call ")
    assert "(rounds: median " in lines[3]
    assert "target <= 1.10: " in lines[3]
    for line in lines[1:3]:  # the CPU broken into user and sys time
        assert " µs, sys " in line, line
        assert " minor faults)" in line, line
    assert lines[4].startswith("  parsed / unparsed in user time "), lines[4]


@pytest.mark.slow
def test_the_mcp_benchmark_counts_instructions_with_callgrind() -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (Debian's valgrind package)")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--mcp", "--instructions", "--requests", "32",
         "--concurrency", "4"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0] == "mcp parsing, instructions (callgrind): 32 tools/call per side, concurrency 4"
    )
    for line, side in zip(
        lines[1:3], ("unparsed (protocol=http)", "parsed   (protocol=mcp) "), strict=True
    ):
        assert line.startswith(f"  {side}"), line
        assert int(line.split()[-2].replace(",", "")) > 10_000, line  # counted, not zero
    assert lines[3].startswith("  parsed / unparsed ")
