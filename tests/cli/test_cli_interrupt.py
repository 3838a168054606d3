"""Ctrl-C stops cleanly: finished tests are reported, cut-short ones are errored, exit 130.

A closed output (``agent-health run | head -1``) stops the run the same way, exit 141.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from agent_health import cli
from agent_health.engine.recording import recording
from aiohttp import web
from support.loopback import serving

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
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
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
            "--reporter",
            f"junit:{junit}",
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
    # the last line says so, and so do both reports: JUnit with an error for the test that
    # never started (the exit code, 130, is not a pass)
    last = out.decode().splitlines()[-1]
    assert last.startswith("interrupted, 1 never started; 1 passed, 0 failed, 1 errored"), last
    assert data["summary"]["did_not_run"] == ["interrupted, 1 never started"]
    never = ET.parse(junit).find("testsuite[@name='not run']/testcase/error")
    assert never is not None
    assert never.get("message") == "interrupted, 1 never started"
    assert (tmp_path / "cleaned").read_text() == "yes"  # teardown ran on interrupt


PIPED = """
import asyncio
from pathlib import Path
from agent_health import test

CLOSED = Path(__file__).with_name("closed")


@test("answers at once")
async def quick(agent, expect):
    expect((await agent.run("quick")).output).to_contain("ok")


@test("the agent is still thinking")
async def slow(agent, expect):
    expect((await agent.run("slow")).output).to_contain("ok")


@test("ends once the reader is gone")
async def later(agent, expect):
    for _ in range(6000):  # bounded: until the reader has closed its end of the pipe
        if CLOSED.exists():
            break
        await asyncio.sleep(0.01)
    # Past FLUSH_EVERY_S since the first line was flushed: this test's line is flushed as it
    # is written, so the run learns the reader is gone before another test can start,
    # whether stdout is buffered or not (PYTHONUNBUFFERED).
    await asyncio.sleep(0.2)
    expect((await agent.run("quick")).output).to_contain("ok")


@test("never starts")
async def never(agent):
    await agent.run("quick")
"""


def _environment(unbuffered: bool) -> dict[str, str]:
    """This environment with ``PYTHONUNBUFFERED`` set or taken out: a user's shell seldom
    sets it, CI images often do, and the run's standard output is buffered or not by it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
async def test_a_run_whose_reader_goes_away_stops_as_interrupted_and_blames_nobody(
    tmp_path: Path, unbuffered: bool
) -> None:
    # `agent-health run | head -1`: the reader takes one line and closes the pipe. The run
    # must not end silently with exit 141 and nothing written, leaving a ledger that
    # `grade` blames on the agent for the test it cut short.
    slow_arrived = asyncio.Event()

    async def agent(request: web.Request) -> web.StreamResponse:
        prompt = (await request.json())["prompt"]
        if prompt == "slow":
            slow_arrived.set()
            await asyncio.Event().wait()  # answers only when the run is long gone
        return web.json_response({"output": f"ok {prompt}", "trajectory": []})

    (tmp_path / "test_piped.py").write_text(textwrap.dedent(PIPED))
    report, ledger = tmp_path / "report.json", tmp_path / "ledger"
    program = Path(sys.executable).parent / "agent-health"
    async with serving(agent, path="/run") as url:
        read_end, write_end = os.pipe()  # the pipe `| head -1` reads
        proc = await asyncio.create_subprocess_exec(
            str(program), "run", str(tmp_path), "-j", "2", "--agent", f"rest+{url}",
            "--reporter", f"json:{report}", "--ledger", f"file://{ledger}",
            stdout=write_end, stderr=asyncio.subprocess.PIPE, env=_environment(unbuffered),
        )  # fmt: skip
        os.close(write_end)
        try:
            assert proc.stderr is not None
            first = await asyncio.to_thread(_first_line_then_close, read_end, slow_arrived)
            assert first.startswith("✓ passed  test_piped.py › answers at".encode()), first
            (tmp_path / "closed").write_text("yes")
            err = await asyncio.wait_for(proc.stderr.read(), 120)
            code = await asyncio.wait_for(proc.wait(), 120)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert code == 141, err.decode()
    assert b"Traceback" not in err, err.decode()
    warning = err.decode().strip().splitlines()[-1]
    assert warning.startswith("warning: stdout was closed by its reader: the run stopped as ")
    assert f"kept: json report {report}, ledger file://{ledger}" in warning

    data = json.loads(report.read_text())  # the reports are written
    statuses = {t["name"]: (t["status"], t["cause"], t["error"]) for t in data["tests"]}
    assert statuses == {
        "answers at once": ("passed", None, None),
        "the agent is still thinking": ("errored", "infra", "interrupted before it finished"),
        "ends once the reader is gone": ("passed", None, None),
    }
    assert data["summary"]["interrupted"] is True
    assert data["summary"]["stopped"] == "stdout was closed by its reader"
    assert data["summary"]["not_run"] == 1

    # The ledger is sealed, and graded again it blames nobody: the cut-short test is the
    # interruption's (infra), out of the pass rate, as the run's own report said.
    key = recording.key_path(f"file://{ledger}")
    verified = await asyncio.to_thread(
        cli.main, ["ledger", "verify", str(ledger), "--key-file", str(key)]
    )
    assert verified == 0
    regraded = tmp_path / "regraded.json"
    await asyncio.to_thread(
        cli.main, ["grade", f"file://{ledger}", "--reporter", f"json:{regraded}"]
    )
    again = json.loads(regraded.read_text())
    assert {t["name"]: (t["status"], t["cause"]) for t in again["tests"]} == {
        name: (status, cause) for name, (status, cause, _) in statuses.items()
    }
    assert again["summary"]["errored_by_cause"]["agent"] == 0


def _first_line_then_close(fd: int, waiting_for: asyncio.Event) -> bytes:
    """What `head -1` does: read one line, then close the pipe (here once the slow test's
    agent call has begun, so that the run has a test in flight to cut short)."""
    with open(fd, "rb") as reader:
        line = reader.readline()
        for _ in range(12_000):  # bounded: the agent's loop sets it soon after
            if waiting_for.is_set():
                break
            time.sleep(0.01)
    return line
