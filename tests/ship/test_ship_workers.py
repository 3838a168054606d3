"""`make test` runs the suite in worker processes (pytest-xdist) and keeps each ``xdist_group``
on one worker (docs/architecture.md, "One command runs what CI runs").

The grouping is what builds the end-to-end test's cluster of each runtime (and the container
images) once: lost, nothing fails but every worker builds its own. pytest 9.2 lost it
silently (pytest-dev/pytest-xdist#1386), so it is checked here, on a suite of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.ship_support import ROOT

GROUPED = """
import os

import pytest


@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_make_test_runs_pytest_in_workers_that_keep_groups_together() -> None:
    done = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    [command] = [line for line in done.stdout.splitlines() if "/pytest" in line]
    words = command.split()
    assert words[words.index("-n") + 1].isdigit(), command
    assert words[words.index("--dist") + 1] == "loadgroup", command


@pytest.mark.slow
def test_the_tests_of_one_xdist_group_run_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("test_a.py", "test_b.py"):
        (suite / name).write_text(textwrap.dedent(GROUPED))
    log = tmp_path / "workers.log"
    # Its own session: nothing of the outer one's (its worker's name, PYTEST_ADDOPTS).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p",
         "no:cacheprovider", "-q", str(suite)],
        cwd=suite, env={**env, "WORKERS_LOG": str(log)},
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = log.read_text().split()
    assert len(workers) == 8, workers
    assert len(set(workers)) == 1, f"one group ran on {sorted(set(workers))}"
