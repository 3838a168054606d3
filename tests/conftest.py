"""Shared fixtures: the example agent as a real HTTP server on 127.0.0.1, suite helpers."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import support_agent
import triage_agent

ROOT = Path(__file__).resolve().parents[1]
# tests/data holds what tests read (suites among them, e.g. mcp_suite/test_mcp.py, an
# agent-health suite): pytest does not collect it as its own tests.
collect_ignore = ["data"]


@pytest.fixture(autouse=True)
def _not_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests behave alike on a laptop and in CI: ``CI`` (which turns on --forbid-only) is
    unset; a test about CI behaviour sets it itself."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def _no_judge_cache_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the judge's cache lives is the test's to say: ``AGENT_HEALTH_JUDGE_CACHE`` of
    whoever runs the suite is unset; a test about it sets it itself."""
    monkeypatch.delenv("AGENT_HEALTH_JUDGE_CACHE", raising=False)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's, ``scripts/get-chromium.sh``) for a module's pages, driven
    by Playwright (``scripts/browser.py``); a machine without it fails the test, naming why."""
    import browser

    try:
        with browser.chromium() as launched:
            yield launched
    except browser.BrowserMissing as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(autouse=True)
def _junit_files_parse(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every JUnit file a test left in its ``tmp_path`` is well-formed XML 1.0 and matches
    ``tests/data/junit.xsd``: read as a CI system reads it, whatever the test was about."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    # Asked for here, before the test runs, so that it is torn down after this check.
    tmp_path: Path = request.getfixturevalue("tmp_path")
    yield
    from support import junit_support

    junit_support.check_all(tmp_path)


@pytest.fixture
async def support_url() -> AsyncIterator[str]:
    """The example support agent (it asks before it answers: conversations), on a free
    loopback port for this test."""
    runner, url = await support_agent.start()
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest.fixture
async def triage_url() -> AsyncIterator[str]:
    """The example triage agent, served on a free loopback port for this test."""
    runners, url = await triage_agent.start()
    try:
        yield url
    finally:
        for runner in runners:
            await runner.cleanup()


@pytest.fixture
def write_suite(tmp_path: Path) -> Callable[..., Path]:
    """Write test files (name → source) into a fresh suite folder and return it."""

    def write(**files: str) -> Path:
        for name, source in files.items():
            path = tmp_path / name.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        return tmp_path

    return write


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A real PostgreSQL server for the session (tests/support/postgres_support.py); skipped where
    one cannot be started here."""
    from support import postgres_support

    why = postgres_support.unavailable()
    if why is not None:
        pytest.skip(why)
    with postgres_support.running() as server:
        yield server
