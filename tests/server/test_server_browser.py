"""agent-health serve's pages in a real headless Chromium: the runs, a run and its
inspector, two runs compared, a test across runs, and a run's results arriving live while
it runs. Every page is watched: a request to another origin, or any script or console
error, fails the test."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import browser
import httpx
import pytest
from agent_health import history
from playwright.sync_api import expect
from support.helpers import INPROC_CONFIG, ONE_TEST, run_cli_sync
from support.server_support import recorded_history, serving

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow


def _clean(seen: browser.Watched, origin: str) -> None:
    assert seen.errors == []
    assert [u for u in seen.requests if not u.startswith(origin)] == []


def _open(seen: browser.Watched, url: str) -> None:
    seen.page.goto(url)
    expect(seen.page.locator("body[data-ready='1']")).to_have_count(1)


def test_runs_a_run_its_results_and_its_inspector(chromium: Any, tmp_path: Path) -> None:
    with serving(recorded_history(tmp_path)) as running, browser.watched_page(chromium) as seen:
        page = seen.page
        _open(seen, running.url + "/")
        rows = page.locator("#runs tbody tr")
        expect(rows).to_have_count(3)
        expect(rows.first).to_have_attribute("data-run", "run-2")
        page.select_option("select[name=status]", "green")
        page.click("#filters button")
        expect(page.locator("#runs tbody tr")).to_have_count(1)
        page.click("#runs tbody tr a")
        expect(page.locator("h2")).to_have_text("Run run-0")
        _open(seen, running.url + "/runs/run-2")
        expect(page.locator("#results tbody tr")).to_have_count(3)
        expect(page.locator("#ledger")).to_have_text("ledger verified")
        page.click("#status-filter a:text('failed')")
        expect(page.locator("#results tbody tr")).to_have_count(1)
        expect(page.locator("#results tbody tr")).to_have_attribute("data-test", "t.py::b")
        page.click("#open-inspector")
        inspector = page.frame_locator("iframe.inspector")
        expect(inspector.locator("#test-list li")).to_have_count(3)
        _clean(seen, running.url)


def test_a_runs_ledger_is_verified_from_its_page_and_a_tampered_one_named(
    chromium: Any, tmp_path: Path
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text(ONE_TEST)
    (suite / "agent-health.config.py").write_text(INPROC_CONFIG)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    done: list[Any] = []  # the command's own event loop, beside the browser's
    worker = threading.Thread(
        target=lambda: done.append(run_cli_sync(suite, "--agent", "a", "--history", url))
    )
    worker.start()
    worker.join(120)
    assert done[0].code == 0
    with history.open_history(url, create=False) as opened:
        (run,) = opened.runs()
    uid = run.uid
    ledger = Path(str(run.ledger_url).removeprefix("file://")) / "run.jsonl"
    with serving(url) as running, browser.watched_page(chromium) as seen:
        page = seen.page
        _open(seen, f"{running.url}/runs/{uid}")
        expect(page.locator("#ledger")).to_have_text("ledger verified")  # as recorded
        page.click("#verify-ledger")
        expect(page.locator("#ledger-check")).to_have_text(
            "verified now: 1 cells, 4 records, its seal holds"
        )
        lines = ledger.read_text().splitlines()
        lines[1] = lines[1].replace('"output":"pong"', '"output":"PONG"', 1)  # the answer, edited
        ledger.write_text("\n".join(lines) + "\n")
        page.click("#verify-ledger")
        expect(page.locator("#ledger-check")).to_contain_text(
            "FAILED verification at cell test_one.py-one."
        )
        expect(page.locator("#ledger-check")).to_contain_text(
            "line 2 (seq 1): edited: mac mismatch"
        )
        _clean(seen, running.url)


def test_two_runs_picked_in_the_page_are_compared(chromium: Any, tmp_path: Path) -> None:
    with serving(recorded_history(tmp_path)) as running, browser.watched_page(chromium) as seen:
        page = seen.page
        _open(seen, running.url + "/compare")
        page.select_option("#pick-base", "run-0")
        page.select_option("#pick-new", "run-2")
        page.click("#compare-form button")
        expect(page.locator("#newly-failing tbody tr")).to_have_count(2)
        failing = page.locator("#newly-failing tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.test)"
        )
        assert sorted(failing) == ["t.py::b", "t.py::c"]
        expect(page.locator("#delta-pass-rate")).to_contain_text("100.0% → 33.3% (-66.7 pts)")
        expect(page.locator("#paired")).to_contain_text("p = ")
        _clean(seen, running.url)


def test_a_test_across_runs_shows_its_strip_and_its_break(chromium: Any, tmp_path: Path) -> None:
    with serving(recorded_history(tmp_path)) as running, browser.watched_page(chromium) as seen:
        page = seen.page
        _open(seen, running.url + "/tests?id=t.py::b")
        strip = page.locator("[data-strip='t.py::b'] a")
        expect(strip).to_have_count(3)
        assert strip.evaluate_all("links => links.map(a => a.className)") == [
            "passed",
            "failed",
            "failed",
        ]
        expect(page.locator("#break")).to_contain_text("last passed in")
        expect(page.locator("#break")).to_contain_text("Nothing recorded changed")
        _open(seen, running.url + "/trends")
        expect(page.locator("svg.plot circle")).to_have_count(12)  # 3 runs × 4 plots
        _clean(seen, running.url)


GATED = textwrap.dedent(
    """
    import asyncio
    from pathlib import Path

    from agent_health import test

    GATE = Path(__file__).parent / "gate"


    @test("quick one")
    async def quick(expect):
        expect(1).to_equal(1)


    @test("waits for the gate")
    async def waits(expect):
        for _ in range(1200):  # at most a minute: the test opens the gate
            if GATE.exists():
                break
            await asyncio.sleep(0.05)
        expect(GATE.exists()).to_be_truthy()
    """
)


def test_a_runs_results_arrive_live_while_it_runs(chromium: Any, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_gated.py").write_text(GATED)
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    with serving(f"sqlite:///{tmp_path / 'h.db'}") as running:
        done: list[Any] = []
        worker = threading.Thread(
            target=lambda: done.append(
                run_cli_sync(suite, "--serve", running.url, "--no-ledger", "-j", "2")
            )
        )
        worker.start()
        uid = None
        for _ in range(600):
            board = httpx.get(running.url + "/api/live").json()
            if board["runs"]:
                uid = board["runs"][0]["uid"]
                break
            time.sleep(0.05)
        assert uid is not None, "the run never showed up live"
        with browser.watched_page(chromium) as seen:
            page = seen.page
            _open(seen, f"{running.url}/live/{uid}")
            quick = page.locator("#results tr[data-test$='quick one']")
            expect(quick).to_have_count(1)
            expect(page.locator("#in-flight li")).to_have_count(1)
            expect(page.locator("#live-state")).to_have_text("running")
            expect(page.locator("#passed")).to_have_text("1")
            (suite / "gate").write_text("open")
            expect(page.locator("#results tbody tr")).to_have_count(2)
            expect(page.locator("#passed")).to_have_text("2")
            expect(page.locator("#pass-rate")).to_have_text("100.0%")
            expect(page.locator("#in-flight li")).to_have_count(0)
            expect(page.locator("#live-state")).to_contain_text("ended")
            _clean(seen, running.url)
        worker.join(60)
        assert done[0].code == 0


def test_a_run_started_and_cancelled_from_the_page(chromium: Any, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_gated.py").write_text(GATED)  # its gate never opens: it runs until cancelled
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    with serving(f"sqlite:///{tmp_path / 'h.db'}", root=tmp_path) as running:
        with browser.watched_page(chromium) as seen:
            page = seen.page
            _open(seen, running.url + "/")
            page.fill("#start-local input[name=paths]", "suite")
            page.click("#start-local button")
            page.wait_for_url(f"{running.url}/live/**")
            expect(page.locator("body[data-ready='1']")).to_have_count(1)
            # A worker is a new process: it takes its time to import and start its tests.
            started = page.locator("#results tr[data-test$='quick one']")
            expect(started).to_have_count(1, timeout=60_000)
            expect(page.locator("#in-flight li")).to_have_count(1)
            page.click("button[data-action=cancel]")
            expect(page.locator("#live-state")).to_contain_text(
                "ended (interrupted)", timeout=60_000
            )
            _clean(seen, running.url)
        for _ in range(1200):  # the process writes its reports and history after its feed ends
            workers = httpx.get(running.url + "/api/workers").json()
            if workers[0]["state"] == "ended":
                break
            time.sleep(0.05)
        assert [w["state"] for w in workers] == ["ended"]
        assert workers[0]["exit_code"] == 130  # the run's own Ctrl-C
        report = Path(workers[0]["report"])
        assert report.is_file()  # a cancelled run still writes its report
