"""The benchmark script runs end to end at tiny sizes and prints its figures.

No timing is asserted here: the figures depend on the machine. What must hold is that both
sides ran every test, the ratios and the efficiency were computed, and the script exited 0.
The last tests pin what users see through the engine changes the benchmark led to.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_health.engine.reporters import terminal
from agent_health.engine.running import session
from agent_health.sdk.results import TestResult
from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "engine_overhead.py"


def _bench(
    argv: list[str], *, cwd: Path = ROOT, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run a benchmark script as users do; its output kept, its exit code not checked."""
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_benchmark_prints_ratios_and_exits_0(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    args = ["--n", "20", "--rounds", "1", "--warmup", "0", "--concurrency-tests", "20"]
    done = _bench([sys.executable, str(SCRIPT), *args, "--json", str(figures)])
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in (
        "ratio wall (ours -j 1 / pytest)",
        "ratio peak RSS (ours -j 1 / pytest)",
        "ratio wall (ours default -j / pytest)",
        "ratio peak RSS (ours default -j / pytest)",
        "concurrency efficiency (session / ideal)",
        "via the built-in rest connector",
        "via the aiohttp connector from the config",
    ):
        assert line in out, out
    assert "target <= 1.00" in out
    assert "target <= 1.10" in out
    saved = json.loads(figures.read_text())
    assert [s["label"] for s in saved["sides"]] == [
        "pytest + pytest-asyncio",
        "agent-health -j 1",
        "agent-health (default -j)",
    ]
    assert all(s["wall_s"] > 0 and s["rss_mib"] > 0 for s in saved["sides"])
    assert [c["connector"] for c in saved["concurrency"]] == [
        "built-in rest connector",
        "built-in rest connector, recording the ledger (the default)",
        "aiohttp connector from the config",
        "bare aiohttp script, no harness",
    ]
    assert "floor efficiency (requests / ideal)" in out, out
    for conc in saved["concurrency"]:
        assert conc["tests"] == 20
        assert conc["ideal_s"] == pytest.approx(0.1)
        assert conc["session_s"] > 0


@pytest.mark.slow
def test_benchmark_refuses_bad_sizes() -> None:
    done = _bench([sys.executable, str(SCRIPT), "--n", "0"], timeout=60)
    assert done.returncode == 2
    assert "--n must be at least 1" in done.stderr


# Performance fixes the benchmark led to must not change what users see.


def test_outcome_repr_does_not_list_every_result() -> None:
    outcome = session.Outcome(results=[_result(f"t{i}") for i in range(500)], duration_ms=1.5)
    text = repr(outcome)
    assert text.startswith("Outcome(results=<500 results>, duration_ms=1.5")
    assert "t499" not in text


def test_progress_lines_print_titles_literally_when_not_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True)
    with terminal.LiveProgress(console, 2) as progress:
        progress.on_test_end(_result("uses [red]markup[/red] and \\[brackets]"))
        progress.on_test_end(_result("plain"))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("uses [red]markup[/red] and \\[brackets] (2 ms)"), lines
    assert lines[1].startswith("✓ passed  test_x.py › plain"), lines


def _result(title: str) -> TestResult:
    return TestResult(
        id=f"test_x.py::{title}",
        name=title,
        title=title,
        file="test_x.py",
        line=1,
        status="passed",
        run_id="r",
        duration_ms=2.0,
    )


DEFAULTS = ROOT / "bench" / "defaults.py"


@pytest.mark.slow
def test_the_defaults_benchmark_prints_every_row_with_its_target(tmp_path: Path) -> None:
    """bench/defaults.py at tiny sizes: every row of the issue's table, ours / baseline."""
    figures = tmp_path / "defaults.json"
    args = ["--rounds", "1", "--list-rounds", "1", "--warmup", "0", "--n", "10", "--calls", "8"]
    args += ["--calls-j", "4", "--calls-latency", "0.01", "--timeout", "0.3"]
    args += ["--history-n", "6", "--history-j", "2", "--history-latency", "0.01"]
    done = _bench([sys.executable, str(DEFAULTS), *args, "--json", str(figures)])
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "10 trivial tests (instant in-process agent), -j 1",
        "8 tests, one POST each to a 10 ms agent, -j 4",
        "`agent-health list` of one test",
        "`agent-health run` of one trivial test (instant in-process agent)",
        "a hanging agent, --timeout 0.3",
        "6 tests, one POST each to a 10 ms agent, -j 2: recording the history",
    ):
        assert line in done.stdout, done.stdout
    saved = json.loads(figures.read_text())
    assert [(r["name"], r["target"]) for r in saved] == [
        ("trivial", 0.5),
        ("calls", 1.15),
        ("list", 1.2),
        ("run", 1.5),
        ("hang", 1.2),
        ("history", 1.03),
    ]
    assert all(r["ratio"] > 0 for r in saved)
    # The calls row's baseline is the floor (the same calls from a bare aiohttp script), and
    # each side's run of one test takes its start-up out of the CPU per test. It and the run
    # row measure the harness with the history off, the defaults run beside.
    calls, run = saved[1], saved[3]
    assert [(s["label"], s["role"]) for s in calls["sides"]] == [
        ("bare aiohttp script, no harness", "baseline"),
        ("agent-health --no-history", "ours"),
        ("agent-health --no-history --no-ledger", "diagnostic"),
        ("agent-health (defaults)", "history"),
        ("plain 4-thread client", "reference"),
        ("bare aiohttp script importing pydantic and rich", "imports"),
        ("agent-health --no-history, one test", "one"),
        ("bare aiohttp script, one call", "floor-one"),
    ]
    assert [(s["label"], s["role"]) for s in run["sides"]] == [
        ('python -c "import pydantic, httpx"', "baseline"),
        ("agent-health run --no-history", "ours"),
        ("agent-health run (defaults)", "history"),
    ]
    assert calls["cpu_per_test_ms"] is not None
    assert calls["own_cpu_per_test_ms"] is not None
    assert "the harness's own CPU per test (each side's start-up taken out)" in done.stdout
    assert "the floor importing pydantic and rich, no harness code: wall " in done.stdout
    assert done.stdout.count("the history on added") == 2, done.stdout


@pytest.mark.slow
def test_the_defaults_benchmark_measures_the_package_under_package_root(tmp_path: Path) -> None:
    """--package-root: the commands import agent_health from that tree (another commit's
    checkout, to measure before and after), not from the installed one."""
    other = tmp_path / "before"
    shutil.copytree(
        ROOT / "operator" / "agent_health",
        other / "agent_health",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    args = ["--row", "list", "--list-rounds", "1", "--warmup", "0"]
    done = _bench([sys.executable, str(DEFAULTS), *args, "--package-root", str(other)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"agent_health from {other}" in done.stdout
    # The measured `agent-health list` loaded its CLI from the copy: its bytecode is there.
    assert list((other / "agent_health" / "cli").glob("__pycache__/*.pyc")), done.stdout


def test_the_defaults_benchmark_refuses_a_package_root_without_the_package(
    tmp_path: Path,
) -> None:
    done = _bench([sys.executable, str(DEFAULTS), "--row", "list", "--package-root", str(tmp_path)])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: --package-root {tmp_path}: no agent_health/__init__.py there; give the "
        "directory that holds the package (a checkout's operator/)"
    )


@pytest.mark.slow
def test_the_handover_benchmark_prints_each_switch_interval() -> None:
    done = _bench([sys.executable, str(ROOT / "bench" / "handover.py"), "--trips", "5"])
    assert done.returncode == 0, done.stdout + done.stderr
    for interval in ("5.0 ms", "1.0 ms", "0.5 ms"):
        assert f"switch interval  {interval}" in done.stdout, done.stdout
    assert done.stdout.count("ratio") == 3


def test_the_history_recording_benchmark_prints_each_stage_and_its_statements() -> None:
    script = ROOT / "bench" / "history_recording.py"
    args = ["--tests", "20", "--previous", "2", "--rounds", "2", "--profile", os.devnull]
    done = _bench([sys.executable, str(script), *args])
    assert done.returncode == 0, done.stdout + done.stderr
    for stage in ("import", "open", "prepare", "record", "line", "close"):
        assert f"  {stage} " in done.stdout, done.stdout
    assert "record: BEGIN ×1;" in done.stdout, done.stdout
    assert "over its last 3 runs" in done.stdout, done.stdout


@pytest.mark.slow
def test_the_connector_benchmark_prints_cpu_per_call_for_each_connector() -> None:
    done = _bench(
        [sys.executable, str(ROOT / "bench" / "connectors.py"), "--calls", "20", "--rounds", "1"]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("bare aiohttp POST (baseline)", "rest connector", "openai connector"):
        assert name in done.stdout, done.stdout
    assert done.stdout.count("target <= 0.20") == 3


@pytest.mark.slow
def test_the_conversation_benchmark_prints_added_time_per_turn(tmp_path: Path) -> None:
    """bench/conversations.py at tiny sizes: conversations next to single runs, per turn."""
    figures = tmp_path / "conversations.json"
    args = ["--tests", "4", "--turns", "3", "-j", "2", "--rounds", "1", "--warmup", "0"]
    args += ["--latency", "0.005", "--json", str(figures)]
    done = _bench([sys.executable, str(ROOT / "bench" / "conversations.py"), *args])
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "4 conversations of 3 turns",
        "12 single runs",
        "harness added per turn",
        "ratio session (conversations / singles)",
    ):
        assert line in done.stdout, done.stdout
    assert done.stdout.count("target < 1.00 ms") == 3
    saved = json.loads(figures.read_text())
    assert [(f["tests"], f["turns_per_test"]) for f in saved] == [(4, 3), (12, 1), (4, 3)]
    assert all(f["session_s"] > 0 and f["agent_s"] == pytest.approx(0.03) for f in saved)
    bad = _bench(
        [sys.executable, str(ROOT / "bench" / "conversations.py"), "--turns", "1"], timeout=60
    )
    assert bad.returncode == 2
    assert "--turns must be >= 2" in bad.stderr


@pytest.mark.slow
def test_the_otel_benchmark_prints_export_on_and_off_and_what_the_receiver_got() -> None:
    done = _bench(
        [
            sys.executable,
            str(ROOT / "bench" / "otel_overhead.py"),
            "--calls",
            "20",
            "--calls-j",
            "4",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ],
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "export off [baseline]" in done.stdout, done.stdout
    assert "--otlp to a local receiver / export off: wall" in done.stdout
    assert "target <= 1.05" in done.stdout
    assert "the receiver got" in done.stdout


HISTORY = ROOT / "bench" / "history.py"


@pytest.mark.slow
def test_the_history_benchmark_prints_each_part_with_its_target() -> None:
    """bench/history.py at tiny sizes: recording with and without the history (both runs
    passed, the history line said), the queries over a filled history, the bytes a result
    takes."""
    args = ["--n", "20", "--rounds", "1", "--warmup", "0", "--runs", "12", "--tests", "30"]
    done = _bench([sys.executable, str(HISTORY), *args, "--repeat", "1", "--backend", "sqlite"])
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in (
        "1. recording a 20-test run against a REST agent",
        "the worst case: the same 20 tests against an instant in-process agent",
        "ratio wall (with / without)",
        "verifying the run's ledger again as it ends",
        "2. sqlite: 12 runs x 30 tests = 360 results",
        "history (newest 20 runs)",
        "history TEST (a steady test, 50 runs)",
        "flaky (over the newest 50 runs)",
        "3. size: ",
        "bytes per result",
        "4. page: 100 runs x 30 tests = 3,000 cells",
        "bare page parsing the same JSON",
        "history page, interactive",
        "filter the grid to one test",
        "redraw the grid at its last row",
    ):
        assert line in out, out
    assert "target <= 1.03" in out
    assert "target <= 250" in out
    assert "target <= 2 s" in out


def test_the_history_benchmark_refuses_bad_sizes() -> None:
    done = _bench([sys.executable, str(HISTORY), "--runs", "0"], timeout=60)
    assert done.returncode == 2
    assert "--runs must be at least 1" in done.stderr


SERVE = ROOT / "bench" / "serve.py"


@pytest.mark.slow
def test_the_serve_benchmark_prints_the_page_and_the_live_followers() -> None:
    """bench/serve.py at tiny sizes: a run's page from PostgreSQL (or why it was skipped),
    and followers that each got every result, with the server's CPU beside no follower's."""
    args = ["--runs", "2", "--tests", "50", "--repeat", "5"]
    args += ["--followers", "2", "--rate", "100", "--seconds", "1"]
    done = _bench([sys.executable, str(SERVE), *args])
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "page: " in out, out
    assert "target p95 <= 50 ms" in out or "page: skipped" in out, out
    assert "CPU a page: the server" in out or "page: skipped" in out, out
    assert "2 followers got 200 of 200 (all)" in out, out
    assert "target < 1" in out, out
    assert "with no follower" in out, out


def test_the_serve_benchmark_refuses_bad_sizes() -> None:
    done = _bench([sys.executable, str(SERVE), "--followers", "-1"], timeout=60)
    assert done.returncode == 2
    assert "--followers must be at least 0" in done.stderr
