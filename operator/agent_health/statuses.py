"""The words a test's outcome is said in: its status and, when it errored, its cause.

One vocabulary for the whole house — the SDK's results, a ledger's ``cell-end``, the engine's
grading and reports, the operator's status, the history — so no module spells the words
again (docs/writing-tests.md, "Statuses"). Like :mod:`agent_health.timeouts`, every layer may
import it; it imports nothing of ours.
"""

from __future__ import annotations

from typing import Literal

Ended = Literal["passed", "failed", "errored", "skipped"]
"""What one run of one (test, repeat) ended as: a ledger cell's ``cell-end`` says one of these."""
Status = Literal[Ended, "flaky"]
"""A test's result. ``flaky``: failed or errored, then passed when retried (``--retries N``).
It does not fail the run (unless ``--fail-on-flaky``), and the pass rate counts it as not
passed: retries keep CI green on a flaky agent, they never raise its grade."""
ENDED: tuple[Ended, ...] = ("passed", "failed", "errored", "skipped")
STATUSES: tuple[Status, ...] = (*ENDED, "flaky")
NOT_PASSED: tuple[Status, ...] = ("failed", "errored")
"""A result that did not pass: what a retry runs again, ``--last-failed`` runs first and a
comparison calls a regression when it passed before."""
PASSING: tuple[Status, ...] = ("passed", "flaky")
"""A result that ended passing (``flaky``: on a retry)."""
TROUBLED: tuple[Status, ...] = ("failed", "errored", "flaky")
"""A result that did not pass the first time: what a reader of the failures looks at."""
UNSCORED: tuple[Status, ...] = ("errored", "skipped")
"""A result with no score: nothing it checked can be weighed."""
DECIDED: tuple[Status, ...] = ("passed", "failed", "flaky")
"""A result that says something of the agent, whatever its cause; an ``errored`` one does
too when the agent caused it (``Cause`` ``agent``), and the pass rate counts both."""

Cause = Literal["agent", "judge", "test", "infra"]
"""Why a test errored: who is to blame decides whether it counts in the pass rate.

* ``agent`` — the agent under test refused the connection, answered an error status, a
  malformed or incomplete reply, did not answer in time, or its container crashed. Counts
  against the agent: ``pass_rate = passed / (passed + failed + errored[agent])``.
* ``judge`` — the judge could not give a verdict (provider down, unparseable answer).
* ``test`` — the test's own code: the body, a fixture, a hook, a misconfigured connector.
* ``infra`` — scheduling, eviction, node loss, the gateway, an interrupted run.
"""
CAUSES: tuple[Cause, ...] = ("agent", "judge", "test", "infra")
