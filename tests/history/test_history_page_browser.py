"""The history page in a real headless Chromium, used the way a person uses it.

Real runs (``agent-health run``, data tests that pass or fail as a file says, each writing
its JSON report) fill a history; ``agent-health history --html DIR`` draws it; Playwright
opens the page from ``file://``, reads the plots, points at the grid's cells, filters it,
clicks a cell through to that run's report at that test, and reads the flaky tests and
regressions. A second history, recorded through the face with two agents, checks a line
per agent and the significance marks. Every page is watched: a request for anything but
the pages themselves, or any script or console error, fails the test.

The browser is Debian's ``chromium-headless-shell`` (``scripts/get-chromium.sh``); when it
is missing these tests fail and say how to install it.
"""

from __future__ import annotations

import concurrent.futures
import json
import textwrap
from pathlib import Path
from typing import Any

import browser
import pytest
from agent_health import cli, history
from playwright.sync_api import expect
from support.history_support import named, report

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow

SUITE = textwrap.dedent(
    """
    from pathlib import Path

    from agent_health import test

    HERE = Path(__file__).parent


    @test("steady")
    async def steady(expect):
        expect(1).to_equal(1)


    @test("wobbly")
    async def wobbly(expect):
        expect((HERE / "outcome.txt").read_text()).to_equal("pass")
    """
)
OUTCOMES = ("pass", "pass", "fail", "pass", "fail")


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Five real runs of a two-test suite (``wobbly`` passing as OUTCOMES say), each with its
    JSON report, then the page; the page's path and the reports, oldest first."""
    # In a thread of its own: Playwright's sync API may keep an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_draw, tmp_path_factory).result()


def _draw(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    suite = tmp_path_factory.mktemp("suite")
    (suite / "test_wobbly.py").write_text(SUITE)
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    reports = []
    with pytest.MonkeyPatch.context() as env:
        env.delenv("AGENT_HEALTH_HISTORY", raising=False)
        env.chdir(suite)
        for i, said in enumerate(OUTCOMES):
            (suite / "outcome.txt").write_text(said)
            saved = suite / "reports" / f"run-{i}.json"
            cli.main(["run", str(suite), "--no-ledger", "--reporter", f"json:{saved}"])
            reports.append(json.loads(saved.read_text()))
        page = tmp_path_factory.mktemp("page")
        db = suite / ".agent-health" / "history.db"
        assert cli.main(["history", "--html", str(page), "--history", f"sqlite:///{db}"]) == 0
    return page / "index.html", reports


def _open(seen: browser.Watched, url: str) -> None:
    seen.page.goto(url)
    seen.page.wait_for_selector("body[data-ready='1']", state="attached")


def _clean(seen: browser.Watched, *allowed: str) -> None:
    outside = [u for u in seen.requests if u.split("#", 1)[0] not in allowed]
    assert outside == [], "the page made network requests"
    assert seen.errors == [], "the page hit script or console errors"


def _cell(page: Any, row: int, col: int) -> tuple[float, float]:
    """Where the grid's cell (row, col) is on the screen (the canvas says its geometry)."""
    page.evaluate("document.getElementById('grid-section').scrollIntoView()")
    canvas = page.locator("#grid-canvas")
    box = canvas.bounding_box()
    size = {k: float(v) for k, v in canvas.evaluate("c => ({...c.dataset})").items()}
    x = box["x"] + size["labelWidth"] + (col + 0.5) * size["cellWidth"]
    y = box["y"] + size["headHeight"] + (row + 0.5) * size["rowHeight"]
    return x, y


def test_the_trend_is_a_point_and_an_interval_per_run_on_one_line(
    chromium: Any, drawn: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, reports = drawn
    url = path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        assert "5 runs" in page.inner_text("#scope")
        assert "2 tests" in page.inner_text("#scope")
        trend = page.locator("#trend-plot")
        assert trend.locator("circle.point").count() == 5
        assert trend.locator("line.bar").count() == 5  # each run's 95% interval
        assert trend.locator("polyline.series").count() == 1  # one agent, one line
        # each point says its run, and links to the run's report
        first = reports[2]["summary"]
        said = trend.locator("circle.point").nth(2).locator("title").text_content()
        assert "pass rate 50%" in said
        assert f"{first['passed']} passed, {first['failed']} failed" in said
        assert trend.locator("a").count() == 5
        # the cost, tokens and latency plots draw a point per run with a value (data tests
        # have no cost or tokens: they say so rather than draw zeros)
        assert page.locator("#latency-plot circle.point").count() == 5
        assert "no run recorded this" in page.inner_text("#cost-plot")
        _clean(seen, url)


def test_the_grid_shows_each_test_run_by_run_and_a_cell_opens_that_runs_report(
    chromium: Any, drawn: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, reports = drawn
    url = path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        assert page.inner_text("#grid-count") == "2 of 2 tests"
        # newest failures first: wobbly (failed in the newest run) is the first row
        x, y = _cell(page, 0, 4)
        page.mouse.move(x, y)
        readout = page.inner_text("#grid-readout")
        assert readout.startswith("wobbly (test_wobbly.py::wobbly)")
        assert ": failed." in readout
        x, y = _cell(page, 0, 3)
        page.mouse.move(x, y)
        assert ": passed." in page.inner_text("#grid-readout")
        x, y = _cell(page, 1, 2)
        page.mouse.move(x, y)
        assert page.inner_text("#grid-readout").startswith("steady (test_wobbly.py::steady)")
        # filtering: only the tests that did not always pass
        page.check("#grid-problems")
        expect(page.locator("#grid-count")).to_have_text("1 of 2 tests")
        page.uncheck("#grid-problems")
        page.fill("#grid-search", "steady")
        expect(page.locator("#grid-count")).to_have_text("1 of 2 tests")
        page.fill("#grid-search", "")
        expect(page.locator("#grid-count")).to_have_text("2 of 2 tests")
        # a click on wobbly's cell in the third run opens that run's report at wobbly
        x, y = _cell(page, 0, 2)
        page.mouse.click(x, y)
        page.wait_for_selector("body[data-ready='1']", state="attached")
        opened = page.url
        assert "/runs/" in opened
        assert "test=test_wobbly.py%3A%3Awobbly" in opened
        inspector = page.locator("#inspector")
        expect(inspector.locator("h2")).to_have_text("wobbly")
        assert "✗ failed" in inspector.inner_text()
        assert reports[2]["provenance"]["run_id"] in opened  # that run's page, named for it
        _clean(seen, url, opened.split("#", 1)[0])


def test_the_grid_is_driven_by_the_keyboard_too(
    chromium: Any, drawn: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, _ = drawn
    url = path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        page.focus("#grid-canvas")
        page.keyboard.press("ArrowDown")  # the newest run of the first test
        assert page.inner_text("#grid-readout").startswith("wobbly")
        page.keyboard.press("ArrowLeft")
        assert ": passed." in page.inner_text("#grid-readout")
        page.keyboard.press("Enter")
        page.wait_for_selector("body[data-ready='1']", state="attached")
        assert "/runs/" in page.url
        expect(page.locator("#inspector h2")).to_have_text("wobbly")
        _clean(seen, url, page.url.split("#", 1)[0])


def test_flaky_tests_and_regressions_are_listed_and_lead_to_the_test(
    chromium: Any, drawn: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, reports = drawn
    url = path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        flaky = page.locator("#flaky-list li")
        expect(flaky).to_have_count(1)
        assert flaky.get_attribute("data-test") == "test_wobbly.py::wobbly"
        text = flaky.inner_text()
        assert "3 flips over 5 runs" in text
        assert flaky.locator(".rate svg").get_attribute("aria-label").startswith("fails 40%")
        assert flaky.locator(".strip rect").count() == 5
        # regressions: wobbly broke in the third and the fifth run, the newest first
        runs = page.locator("#regressions-list .regression-run")
        expect(runs).to_have_count(2)
        newest, older = (reports[4]["provenance"]["run_id"], reports[2]["provenance"]["run_id"])
        assert [runs.nth(i).get_attribute("data-run") for i in range(2)] == [newest, older]
        assert runs.nth(0).get_attribute("open") is not None
        assert "to_equal" in runs.nth(0).inner_text()  # the failed gate, as recorded
        link = runs.nth(0).locator("a")
        assert link.get_attribute("href").startswith("runs/")
        # a flaky test's name finds it in the grid
        flaky.locator("button").click()
        expect(page.locator("#grid-count")).to_have_text("1 of 2 tests")
        _clean(seen, url)


def test_two_agents_are_two_lines_and_a_significant_drop_is_marked(
    chromium: Any, tmp_path: Path
) -> None:
    url_db = f"sqlite:///{tmp_path / 'history.db'}"
    with history.open_history(url_db) as opened:
        for i in range(3):
            opened.record(report(named(30), run_id=f"a{i}", at=2 * i, agent="alpha"))
            opened.record(report(named(30), run_id=f"b{i}", at=2 * i + 1, agent="beta"))
        # beta's newest run fails 20 of the 30 tests it passed before: significantly worse
        opened.record(report({**named(30), **named(20, "failed")}, run_id="b3", at=9, agent="beta"))
        written = history.write_page(tmp_path / "page", opened)
    assert (written.runs, written.tests, written.reports) == (7, 30, 0)
    url = written.path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        trend = page.locator("#trend-plot")
        assert trend.locator("polyline.series").count() == 2
        assert page.locator("#agents .agent").all_inner_texts() == ["alpha", "beta"]
        marks = trend.locator("text.mark-worse")
        expect(marks).to_have_count(1)
        assert marks.text_content() == "▼"
        assert "▼ worse than the agent's previous run" in (
            trend.locator("g.run[data-run='b3'] title").text_content()
        )
        # no report at hand: the points are not links, and a cell says so
        assert trend.locator("a").count() == 0
        x, y = _cell(page, 0, 6)
        page.mouse.move(x, y)
        assert "its report is not at hand" in page.inner_text("#grid-readout")
        regressions = page.locator("#regressions-list .regression-run")
        expect(regressions).to_have_count(1)
        assert "20 tests broke" in regressions.inner_text()
        _clean(seen, url)


def test_an_empty_history_is_a_page_that_says_so(chromium: Any, tmp_path: Path) -> None:
    with history.open_history(f"sqlite:///{tmp_path / 'history.db'}") as opened:
        written = history.write_page(tmp_path / "page", opened)
    url = written.path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        assert "No run in the history matches yet" in seen.page.inner_text("#empty")
        assert seen.page.locator("#trend").is_hidden()
        _clean(seen, url)
