"""Ctrl-C stops cleanly: finished tests are reported, cut-short ones are errored, exit 130."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SUITE = """
import asyncio
from pathlib import Path
from agent_health import test

STARTED = Path(__file__).with_name("started")

async def workspace():
    yield 1
    Path(__file__).with_name("cleaned").write_text("yes")

test = test.extend(workspace=workspace)

@test("quick")
async def quick(expect):
    expect(1).to_equal(1)

@test("hangs")
async def hangs(workspace):
    STARTED.write_text("yes")
    await asyncio.Event().wait()

@test("never starts")
async def never():
    pass
"""


@pytest.mark.slow
def test_sigint_writes_reports_of_what_finished(tmp_path: Path) -> None:
    (tmp_path / "test_int.py").write_text(textwrap.dedent(SUITE))
    report = tmp_path / "report.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "run",
            str(tmp_path),
            "-j",
            "1",
            "--reporter",
            f"json:{report}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):  # wait (bounded) until the hanging test is inside its body
            if (tmp_path / "started").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), proc.communicate(timeout=5)
        time.sleep(0.5)  # so the cut-short test has run a measurable while
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    # One clean stop: no asyncio noise about futures nobody retrieved, no traceback.
    assert b"never retrieved" not in err, err.decode()
    assert b"Traceback" not in err, err.decode()
    data = json.loads(report.read_text())
    statuses = {t["name"]: (t["status"], t["error"]) for t in data["tests"]}
    assert statuses["quick"] == ("passed", None)
    assert statuses["hangs"] == ("errored", "interrupted before it finished")
    assert "never starts" not in statuses
    hangs = next(t for t in data["tests"] if t["name"] == "hangs")
    assert hangs["duration_ms"] >= 500  # the time it ran, not "(0 ms)"
    assert b"interrupted before it finished" in out
    assert b"(0 ms)" not in out.split(b"hangs", 1)[1].split(b"\n", 1)[0]
    assert data["summary"]["interrupted"] is True
    assert data["summary"]["not_run"] == 1
    assert (tmp_path / "cleaned").read_text() == "yes"  # teardown ran on interrupt
