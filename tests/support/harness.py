"""An in-process run of a suite, for the engine's tests: no command line, no files out.

:func:`run_suite` drives the engine's rooms as ``agent-health run`` does — load the files,
choose the tests, run them in a session against the agent, build the report — and hands back
the :class:`~agent_health.engine.reports.RunReport` the reporters read, as kopf's
``KopfRunner`` or pytest's ``pytester`` drive their framework. A test asserts on the report
(``named(report, title)`` for one test's entry) instead of going through argparse and a JSON
file; what only the command line does (flags, exit codes, reporters, the ledger, the
history) stays tested through ``support.helpers.run_cli``::

    report = await run_suite(suite, agent=f"rest+{triage_url}", repeat=3)
    assert report.summary.passed == 3
    assert named(report, "payment RCA")["status"] == "passed"
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_health import connectors
from agent_health.engine import loading, reports, running


async def run_suite(
    *paths: Path,
    agent: str | None = None,
    repeat: int = 1,
    concurrency: int = 1,
    grep: Sequence[str] = (),
    labels: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
    retries: int = 0,
    max_failures: int | None = None,
    timeout: float | None = None,
) -> reports.RunReport:
    """Run the tests under ``paths`` (files or folders) and report, in this process.

    ``agent``: a config key or a URL (``rest+http://...``, ``cmd:...``), as ``--agent``
    takes; without one the config's default agent, or none for pure data tests. No judge is
    asked (its calls are neutral skips), nothing is recorded or written.
    """
    suite = loading.load(list(paths))
    config = loading.load_config(loading.find_config(suite.root))
    cases = loading.select_tests(suite.cases, grep=grep, labels=labels, shard=shard)
    async with contextlib.AsyncExitStack() as stack:
        caller = None
        if agent is not None or config.agents:
            connector = connectors.create(config.agent(agent), config.connectors)
            stack.push_async_callback(connector.aclose)
            caller = connector.run
        env = running.RunEnv(
            agent_caller=caller,
            skip_judge=True,
            skip_simulate=True,
            timeout=timeout or config.timeout,
            config=config,
            agent_name=config.agent_name(agent),
        )
        running.ready()
        outcome = await running.run(
            cases,
            suite.hooks,
            env,
            concurrency=concurrency,
            repeat=repeat,
            policy=running.Policy(retries=retries, max_failures=max_failures),
        )
    return reports.RunReport.build(
        outcome.results,
        duration_ms=outcome.duration_ms,
        repeats=repeat,
        load_errors=[str(e) for e in suite.errors],
        not_loaded=[e.file for e in suite.errors],
        hook_errors=outcome.hook_errors,
        rollup=outcome.rollup,
    )


def named(report: reports.RunReport, name: str) -> dict[str, Any]:
    """The one entry of ``report`` for the test ``name`` (its name or title)."""
    found = [t for t in report.tests if name in (t["name"], t.get("title"))]
    assert len(found) == 1, (
        f"{len(found)} tests named {name!r}: {[t['name'] for t in report.tests]}"
    )
    return found[0]
