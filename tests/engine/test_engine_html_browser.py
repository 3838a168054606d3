"""The HTML report in a real headless Chromium, used the way a person uses it.

A real run (the example triage agent and a scripted judge model, both on loopback) writes
the report; Playwright opens ``index.html`` from ``file://`` (and once through
``agent-health show-report``), searches, filters, opens tests and reads what they show.
Every page is watched: a request for anything but the report itself, or any script error
or console error, fails the test.

The browser is Debian's ``chromium-headless-shell`` (``scripts/get-chromium.sh``, run by
``make test``). When it is missing these tests fail and say how to install it: they are
never skipped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import browser
import pytest
import triage_agent
from agent_health import cli
from agent_health.engine import reporters
from agent_health.engine.reports import rollup
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import Signal, TestResult
from playwright.sync_api import expect
from support import loopback
from support.helpers import Run, run_cli
from support.judge_servers import ScriptedModel, quoted_rule

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow

CONFIG = """
from agent_health import define_config

async def explain(result, traces, llm):
    if result.status == "passed":
        return None
    return {
        "summary": f"{result.status} after {result.metrics.get('tool_calls', 0)} tool calls",
        "why": "the agent never mentioned an upgrade",
        "recommendations": ["ask the agent to cite the log line it relied on"],
    }

config = define_config(judge={"model": "placeholder"}, insights=explain)
"""

SUITE = """
from agent_health import test

@test("payment RCA names the database", labels=["category:RCA"])
async def names_database(agent, expect, judge):
    result = await agent.run(
        "Diagnose why the payment service is failing.",
        context=[{"description": "Error log", "value": "Connection refused to db-primary:5432"}],
    )
    expect(result).to_have_called_tool("search_logs")
    await judge(result, 'says "db-primary"')

@test("payment RCA blames an upgrade", labels=["category:RCA"])
async def blames_upgrade(agent, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    await judge(result, 'says "kubernetes upgrade"')

@test("steady only on the first try", labels=["category:flaky"])
async def first_try(agent, expect, test_info):
    await agent.run("Is the search service healthy?")
    expect(test_info.repeat).to_equal(0)

@test("a broken fixture")
async def broken(agent):
    raise RuntimeError("the fixture database is down")
"""


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """A real run: 4 tests x 2 repeats against the triage agent, judged by a scripted model."""
    suite = tmp_path_factory.mktemp("suite")
    (suite / "agent-health.config.py").write_text(CONFIG)
    (suite / "test_rca.py").write_text(SUITE)
    out = tmp_path_factory.mktemp("html")

    async def run() -> Run:
        runners, url = await triage_agent.start()
        judge = await ScriptedModel.start("openai", default=quoted_rule)
        try:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("AGENT_HEALTH_JUDGE_BASE_URL", judge.url)
                env.setenv("AGENT_HEALTH_JUDGE_MODEL", "scripted-judge")
                env.setenv("AGENT_HEALTH_JUDGE_CACHE", str(suite / "judge.sqlite"))
                env.delenv("AGENT_HEALTH_SKIP_JUDGE", raising=False)
                return await run_cli(
                    suite,
                    "--agent",
                    f"rest+{url}",
                    "--repeat",
                    "2",
                    "--ledger",
                    f"file://{suite / 'ledger'}",
                    "--reporter",
                    f"html:{out}",
                )
        finally:
            await judge.close()
            for runner in runners:
                await runner.cleanup()

    # In a thread of its own: Playwright's sync API keeps an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(asyncio.run, run()).result()
    return done, out / "index.html"


def _open(seen: browser.Watched, url: str) -> None:
    seen.page.goto(url)
    seen.page.wait_for_selector("body[data-ready='1']", state="attached")


def _clean(seen: browser.Watched, url: str) -> None:
    assert seen.outside(url) == [], "the page made network requests"
    assert seen.errors == [], "the page hit script or console errors"


def test_find_a_failing_test_and_read_why(chromium: Any, judged_run: tuple[Run, Path]) -> None:
    run, page_path = judged_run
    assert run.code == 1
    url = page_path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        assert page.locator("#test-list .test-row").count() == 4
        page.fill("#search", "upgrade")
        expect(page.locator("#test-list .test-row")).to_have_count(1)
        assert page.inner_text("#list-count") == "1 of 4 tests"
        page.click("#test-list .test-row")
        inspector = page.locator("#inspector")
        assert inspector.locator("h2").inner_text() == "payment RCA blames an upgrade"
        text = inspector.inner_text()
        assert "✗ failed" in text
        # the judge's verdict and reasoning, as the scripted model gave them
        judge = inspector.locator(".verdict-card")
        assert judge.locator("strong").inner_text() == 'says "kubernetes upgrade"'
        assert "'kubernetes upgrade' missing" in judge.inner_text()
        assert "scripted-judge" in judge.inner_text()
        # the trajectory: the tool the agent called, with its arguments and result
        steps = inspector.locator(".timeline .step")
        assert steps.count() >= 3
        call = inspector.locator(".step.tool_call").first
        assert call.locator("code").inner_text() == "search_logs"
        assert '"service": "payment"' in call.inner_text()
        assert "db-primary" in inspector.locator(".step.tool_result").first.inner_text()
        # the insights panel, and the repeat tabs
        assert "ask the agent to cite the log line it relied on" in text
        assert page.locator(".repeat-tabs button").all_inner_texts() == ["[1/2] ✗", "[2/2] ✗"]
        _clean(seen, url)


def _pct(value: float) -> str:
    """As the page prints a share: one decimal, no trailing zero."""
    return f"{round(value * 1000) / 10:g}%"


def test_summary_explains_its_numbers_and_rolls_up_insights(
    chromium: Any, judged_run: tuple[Run, Path]
) -> None:
    run, page_path = judged_run
    url = page_path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        summary = seen.page.inner_text("#summary")
        s = run.report["summary"]
        assert f"{s['passed']}\npassed" in summary
        assert f"{s['errored']}\nerrored" in summary
        assert "4 tests × 2 repeats" in summary
        assert "pass@2" in summary
        assert "tests passing in at least 1 of 2 repeats" in summary
        assert "pass^2" in summary
        assert "tests passing in all 2 repeats" in summary
        # every rate and score with its interval, as the JSON report has it
        rate = s["pass_rate_interval"]
        assert f"95% CI {_pct(rate['low'])}–{_pct(rate['high'])}" in summary
        score = s["score_interval"]
        assert f"95% CI {score['low']:.2f}–{score['high']:.2f}" in summary
        (two,) = s["pass_at"]
        at = two["pass_at_k_interval"]
        assert f"95% CI {_pct(at['low'])}–{_pct(at['high'])}" in summary
        assert "Insights across the suite" in summary
        assert "ask the agent to cite the log line it relied on" in summary
        # The scripted judge answers the rollup question in prose: grouped, and it says why.
        rolled = s["insights"]
        assert rolled["source"] == "grouped"
        assert "grouped by wording" in summary
        assert rolled["error"]
        assert rolled["error"] in summary
        line = seen.page.inner_text("#provenance-line")
        assert "judge openai/scripted-judge" in line
        assert re.search(r"agent rest\+http://127\.0\.0\.1:\d+/run \(rest\)", line)
        _clean(seen, url)


def test_a_synthesised_rollup_shows_its_summary_tests_and_patterns(
    chromium: Any, tmp_path: Path
) -> None:
    def failing(name: str) -> TestResult:
        return TestResult(
            id=f"t.py::{name}", name=name, title=name, file="t.py", line=1, status="failed",
            run_id="r", insights={"summary": "no db", "recommendations": ["cite the log line"]},
        )  # fmt: skip

    made = rollup.Rollup(
        source="llm",
        summary="Both RCA tests miss the database.",
        recommendations=[rollup.Item(text="cite the log line", tests=["t.py::a", "t.py::b"])],
        patterns=["says db-primary failed in 2 of 2 tests"],
    )
    report = RunReport.build([failing("a"), failing("b")], duration_ms=1.0, rollup=made)
    url = reporters.write("html", tmp_path, report).as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        part = seen.page.locator("#summary .rollup")
        text = part.inner_text()
        assert "synthesised by the judge model" in text
        assert "Both RCA tests miss the database." in text
        assert "2 tests: cite the log line" in text
        which = part.locator(".recommendations li").first.get_attribute("title")
        assert which == "t.py::a\nt.py::b"  # the tests it applies to, on hover
        assert "says db-primary failed in 2 of 2 tests" in text
        _clean(seen, url)


def test_filters_repeats_and_links(chromium: Any, judged_run: tuple[Run, Path]) -> None:
    _, page_path = judged_run
    url = page_path.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        # no test passed on a retry: there is nothing to call flaky, and no chip says so
        assert page.locator("#status-filters button[data-status='flaky']").count() == 0
        assert page.locator("#test-list .flaky").count() == 0
        page.click("#status-filters button[data-status='mixed']")
        rows = page.locator("#test-list .test-row")
        assert rows.count() == 1
        assert rows.first.locator(".title").inner_text() == "steady only on the first try"
        assert rows.first.locator(".mixed").inner_text() == "mixed"
        assert rows.first.locator(".right").inner_text() == "1/2 passed"
        rows.first.click()
        # a flaky test opens on its failing repeat; the other is one click away
        assert page.locator(".repeat-tabs button[aria-pressed='true']").inner_text() == "[2/2] ✗"
        page.click(".repeat-tabs button[data-repeat='0']")
        assert page.locator("#inspector .status").first.inner_text() == "✓ passed"
        assert "repeat=0" in page.evaluate("location.hash")
        page.click("#status-filters button[data-status='errored']")
        assert rows.count() == 1
        rows.first.click()
        alert = page.locator("#inspector .error-box").inner_text()
        assert "RuntimeError: the fixture database is down" in alert
        page.select_option("#label-filter", "category:RCA")
        page.click("#status-filters button[data-status='all']")
        assert rows.count() == 2
        # a link with the fragment opens the same view in a fresh page
        link = page.evaluate("location.href")
        _clean(seen, url)
    with browser.watched_page(chromium) as seen:
        seen.page.goto(link)
        seen.page.wait_for_selector("body[data-ready='1']", state="attached")
        assert seen.page.locator("#test-list .test-row").count() == 2
        assert seen.page.input_value("#label-filter") == "category:RCA"
        assert seen.page.locator("#inspector h2").inner_text() == "a broken fixture"
        _clean(seen, url)


def test_hostile_output_stays_text(chromium: Any, tmp_path: Path) -> None:
    hostile = (
        "</script><script>window.pwned = 1</script>"
        '<img src="http://127.0.0.1:9/x" onerror="window.pwned = 2">'
    )
    result = TestResult(
        id="t.py::hostile",
        name="hostile <b>name</b>",
        title="hostile <b>name</b>",
        file="t.py",
        line=1,
        status="failed",
        run_id="r",
        prompt=hostile,
        output=hostile,
        labels=("<i>label</i>",),
    )
    written = reporters.write("html", tmp_path, RunReport.build([result], duration_ms=1.0))
    url = written.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        assert "n/a\ntokens" in seen.page.inner_text("#summary")  # none reported: not a zero
        seen.page.click("#test-list .test-row")
        assert seen.page.locator("#inspector h2").inner_text() == "hostile <b>name</b>"
        assert hostile in seen.page.locator("#inspector").inner_text()
        assert seen.page.evaluate("window.pwned") is None
        assert seen.page.locator("#inspector img, #inspector b, #test-list i").count() == 0
        _clean(seen, url)


def test_a_replayed_run_says_so_in_the_summary_list_and_inspector(
    chromium: Any, tmp_path: Path
) -> None:
    from agent_health.engine.reports import provenance

    result = TestResult(
        id="t.py::replayed one", name="replayed one", title="replayed one", file="t.py",
        line=1, status="passed", run_id="r", output="db-primary", replayed=True,
    )  # fmt: skip
    made = provenance.Provenance(replay="file:///runs/ledger")
    report = RunReport.build([result], duration_ms=1.0, provenance=made)
    url = reporters.write("html", tmp_path, report).as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        banner = seen.page.inner_text(".replayed-banner")
        assert banner.startswith("Replayed from file:///runs/ledger: every agent.run() was")
        assert "replayed from file:///runs/ledger" in seen.page.inner_text("#provenance-line")
        row = seen.page.locator("#test-list .test-row").first
        assert "replayed" in row.inner_text()
        row.click()
        assert "replayed" in seen.page.locator("#inspector .insp-head").inner_text()
        _clean(seen, url)


def test_a_version_1_report_renders_and_says_what_it_lacks(chromium: Any, tmp_path: Path) -> None:
    v1 = {
        "version": 1,
        "summary": {
            "total": 1,
            "passed": 0,
            "failed": 1,
            "errored": 0,
            "skipped": 0,
            "pass_rate": 0.0,
            "score": 0.0,
            "duration_ms": 5.0,
            "tokens": 10,
        },
        "tests": [
            {
                "id": "t.py::old",
                "name": "old",
                "file": "t.py",
                "line": 1,
                "labels": [],
                "repeat": 0,
                "status": "failed",
                "score": 0.0,
                "error": None,
                "skip_reason": None,
                "run_id": "r",
                "prompt": "hello",
                "duration_ms": 5.0,
                "content_hash": "h",
                "signals": [
                    {
                        "kind": "deterministic",
                        "role": "gate",
                        "name": "to_equal(2)",
                        "passed": False,
                        "score": 0.0,
                        "weight": 1.0,
                        "evidence": {"expected": 2, "actual": 1},
                        "reasoning": None,
                        "error": None,
                        "location": "t.py:4",
                    }
                ],
                "metrics": {},
                "insights": None,
            }
        ],
    }
    saved = tmp_path / "v1.json"
    saved.write_text(json.dumps(v1))
    out = tmp_path / "html"
    assert cli.main(["report", str(saved), "--reporter", f"html:{out}"]) == 0
    url = (out / "index.html").as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url + "#test=t.py%3A%3Aold")
        text = seen.page.inner_text("#inspector")
        assert "to_equal(2)" in text
        assert "expected 2, got 1" in text
        assert "Not in this report: JSON report version 1 does not record it." in text
        _clean(seen, url)


def test_show_report_serves_the_page(chromium: Any, judged_run: tuple[Run, Path]) -> None:
    _, page_path = judged_run
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "show-report",
            str(page_path.parent),
            "--port",
            "0",
            "--no-open",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/) ", line)
        assert match, line + (server.stderr.read() if server.stderr else "")
        url = match.group(1)
        with browser.watched_page(chromium) as seen:
            _open(seen, url)
            assert seen.page.locator("#test-list .test-row").count() == 4
            assert seen.outside(url) == [], "the page asked the server for more than itself"
            assert seen.errors == []
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_benchmark_prints_size_and_load_time(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "html_report.py"),
            "--tests",
            "30",
            "--repeats",
            "2",
            "--rounds",
            "1",
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "60 (30 tests x 2 repeats)",
        "HTML report size",
        "ratio size (HTML / JSON)",
        "load: HTML report, usable",
        "ratio load (report / bare page)",
        "search to list updated",
        "open a test",
    ):
        assert line in done.stdout, done.stdout
    saved = json.loads(figures.read_text())
    assert saved["results"] == 60
    assert saved["html_bytes"] > 0
    assert saved["load_s"] > 0
    assert saved["bare_load_s"] > 0


def test_a_flaky_test_shows_its_tries_and_what_it_printed(chromium: Any, tmp_path: Path) -> None:
    from agent_health.engine.running import session

    def result(status: Any, score: float, **extra: Any) -> TestResult:
        return TestResult(
            id="t.py::sometimes",
            name="sometimes",
            title="sometimes",
            file="t.py",
            line=1,
            status=status,
            score=score,
            run_id=f"r-{status}",
            **extra,
        )

    steady = TestResult(
        id="t.py::steady", name="steady", title="steady", file="t.py", line=9, status="passed",
        run_id="r-steady",
    )  # fmt: skip
    failed = result("failed", 0.0, error="the agent named the wrong service")
    passed = result("passed", 1.0, stdout="checked the payment service\n", stderr="warn: slow\n")
    flaky = session.retried([failed, passed])
    report = RunReport.build([flaky, steady], duration_ms=1.0)
    written = reporters.write("html", tmp_path, report)
    url = written.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        assert "1\nflaky" in page.inner_text("#summary")
        page.click("#status-filters button[data-status='flaky']")
        rows = page.locator("#test-list .test-row")
        assert rows.count() == 1
        rows.first.click()
        inspector = page.locator("#inspector")
        assert inspector.locator(".status").first.inner_text() == "~ flaky"
        text = inspector.inner_text()
        assert "Tries (2, --retries)" in text
        assert "✗ failed — the agent named the wrong service" in text
        assert "Printed by the body" in text
        assert "checked the payment service" in text
        assert "warn: slow" in text
        _clean(seen, url)


def test_a_failed_test_shows_its_failed_check_then_the_later_error(
    chromium: Any, tmp_path: Path
) -> None:
    # A body that raised after its check failed is failed, not errored: the inspector says
    # so, lists the check, and shows what went wrong after it.
    gate = Signal(
        kind="deterministic", role="gate", name="to_contain('db-primary')", passed=False,
        score=0.0, evidence={"expected": "db-primary", "actual": "all fine"},
    )  # fmt: skip
    crashed = TestResult(
        id="t.py::crashes", name="crashes", title="crashes", file="t.py", line=1,
        status="failed", score=0.0, run_id="r-1", signals=(gate,),
        error="RuntimeError: the helper blew up (at t.py:4)",
    )  # fmt: skip
    written = reporters.write("html", tmp_path, RunReport.build([crashed], duration_ms=1.0))
    url = written.as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        page.locator("#test-list .test-row").first.click()
        box = page.locator("#inspector .error-box.failed")
        text = box.inner_text()
        assert text.startswith("failed: 1 gate")
        assert "to_contain('db-primary')" in text
        checks, then = text.split("then:")
        assert "RuntimeError" not in checks
        assert then.strip() == "RuntimeError: the helper blew up (at t.py:4)"
        _clean(seen, url)


HOSTILE_SUITE = """
from agent_health import test

PROMPT = "Diagnose why the payment service is failing."


@test("answers 500")
async def answers_500(agent, expect):
    result = await agent.run(PROMPT + " [rewrite]")
    expect(result.output).to_contain("db-primary")


@test("garbles")
async def garbles(agent, expect):
    result = await agent.run(PROMPT + " [garble]")
    expect(result).to_have_called_tool("search_logs")


@test("stalls")
async def stalls(agent, expect):
    result = await agent.run(PROMPT + " [stall]", timeout=1)
    expect(result.output).to_contain("db-primary")
"""


def test_a_hostile_agents_text_and_a_timeout_read_right(chromium: Any, tmp_path: Path) -> None:
    # The hostile agent (its own process on 127.0.0.1) answers with terminal escapes, a
    # right-to-left override and characters XML forbids, and stalls mid-answer: the page
    # shows the characters as escapes, and says the stalled test timed out.
    from support.hostile_agent import REWRITE
    from support.hostile_support import free_port, hostile_target

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_hostile.py").write_text(HOSTILE_SUITE)
    out = tmp_path / "html"

    async def run() -> Run:
        port = free_port()
        async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="by-prompt",
                                  attacks=""):  # fmt: skip
            return await run_cli(
                suite, "--agent", f"rest+http://127.0.0.1:{port}/run", "--no-ledger",
                "--reporter", f"html:{out}",
            )  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(asyncio.run, run()).result()
    assert done.code == 1
    url = (out / "index.html").as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        inspector = page.locator("#inspector")
        page.locator("#test-list .test-row", has_text="answers 500").click()
        alert = inspector.locator(".error-box").inner_text()
        assert "answered HTTP 500: \\x1b[1A\\x1b[2K" in alert
        assert "\\u202edessap\\u202c" in alert  # the override shown, not obeyed
        assert "\u202e" not in alert
        page.locator("#test-list .test-row", has_text="garbles").click()
        steps = inspector.locator(".timeline").inner_text()
        assert "search\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed" in steps
        page.locator("#test-list .test-row", has_text="stalls").click()
        text = inspector.inner_text()
        assert "The agent did not run in this test." not in text
        assert "Timed out: the agent was called and sent no complete answer in time." in text
        assert "did not answer within 1 s" in text
        assert "Diagnose why the payment service is failing. [stall]" in text  # what it was sent
        # and what the agent had sent before it stopped, under "Timed out", as escapes
        sent = len(b'{"output": "' + REWRITE.encode("utf-8", "surrogatepass"))
        received = inspector.locator(".no-reply .received").inner_text()
        assert f"Before the timeout the agent had sent {sent} bytes of its answer:" in received
        assert '{"output": "\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed  test_demo.py' in received
        assert "\\x1b]0;all tests passed\\x07" in received
        assert "\\u202edessap\\u202c" in received
        assert "\u202e" not in received
        assert "\x1b" not in received
        assert inspector.locator(".no-reply .received").count() == 1  # under Output only
        _clean(seen, url)


AGUI_SUITE = """
from agent_health import test


@test("stalls mid-call")
async def stalls(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.", timeout=1)
    expect(result).to_have_called_tool("service_status")
"""


def test_an_agui_agent_that_stalls_shows_its_steps_so_far(chromium: Any, tmp_path: Path) -> None:
    # A real AG-UI stream on 127.0.0.1: a message, a tool call and its result, then a message
    # and a second call still open when the agent stops sending.
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_agui.py").write_text(AGUI_SUITE)
    out = tmp_path / "html"
    frames = loopback.half_a_run("It cannot reach db-pri\x1b[2K\u202e")

    async def run() -> Run:
        async with loopback.serving(loopback.stalling_sse(frames)) as url:
            return await run_cli(
                suite, "--agent", f"agui+{url}", "--no-ledger", "--reporter", f"html:{out}"
            )

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        done = pool.submit(asyncio.run, run()).result()
    assert done.code == 3
    url = (out / "index.html").as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        inspector = page.locator("#inspector")
        page.locator("#test-list .test-row", has_text="stalls mid-call").click()
        received = inspector.locator(".no-reply .received").inner_text()
        assert (
            f"Before the timeout the agent had sent {len(frames)} AG-UI events, "
            f"{sum(map(len, frames)):,} bytes; tool calls: search_logs, service_status:"
        ) in received
        assert "Checking the logs.\nIt cannot reach db-pri\\x1b[2K\\u202e" in received
        heads = inspector.locator("section.part h3").all_inner_texts()
        assert "Trajectory so far (5 steps, before the timeout)" in heads
        steps = inspector.locator(".timeline .step")
        assert steps.count() == 5
        assert "search_logs" in steps.nth(1).inner_text()
        assert '"lines": 3' in steps.nth(2).inner_text()  # the result that came back
        last = steps.nth(4).inner_text()
        assert "service_status" in last
        assert '"_raw": "{\\"name\\": \\"db-"' in last  # the arguments as far as they came
        _clean(seen, url)


def test_each_mcp_call_shows_with_its_server(chromium: Any, tmp_path: Path) -> None:
    calls = (
        {"server": "peer:time", "method": "tools/call", "name": "get_current_time",
         "arguments": {"timezone": "Europe/Oslo"}, "is_error": False, "error": None,
         "problem": None},
        {"server": "peer:tickets", "method": "tools/call", "name": "page_oncall",
         "arguments": {}, "is_error": True, "error": None, "problem": None},
        {"server": "peer:tickets", "method": "tools/call", "name": "drop_tables",
         "arguments": {}, "is_error": None,
         "error": {"code": -32602, "message": "Unknown tool: 'drop_tables'"}, "problem": None},
    )  # fmt: skip
    from agent_health.connectors.protocol import Step

    steps = (
        Step(type="tool_call", tool_name="get_current_time", server="peer:time"),
        Step(type="tool_call", tool_name="search", server="peer:tickets", source="gateway"),
    )
    result = TestResult(
        id="t.py::mcp", name="mcp", title="mcp", file="t.py", line=1, status="passed",
        run_id="r", output="done", mcp_calls=calls, trajectory=steps,
    )  # fmt: skip
    url = reporters.write("html", tmp_path, RunReport.build([result], duration_ms=1.0)).as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        seen.page.click("#test-list .test-row")
        rows = seen.page.locator("#inspector tr.mcp-call")
        assert rows.count() == 3
        first, second, third = (rows.nth(n).inner_text() for n in range(3))
        assert "peer:time" in first
        assert "get_current_time" in first
        assert "Europe/Oslo" in first
        assert "peer:tickets" in second
        assert "isError" in second
        assert "Unknown tool: 'drop_tables'" in third
        heading = seen.page.locator("#inspector").inner_text()
        assert "MCP calls, as the gateway read them (3)" in heading
        timeline = seen.page.locator("#inspector .timeline").inner_text()
        assert "@ peer:time" in timeline
        assert "seen by the gateway" in timeline
        _clean(seen, url)


def test_the_filter_chips_say_they_count_tests_and_the_cards_results(
    chromium: Any, tmp_path: Path
) -> None:
    """Two tests, three repeats, one failing twice: the card says 2 failed results of 6, the
    chip 1 failed test, and each says which it counts (they used to disagree unexplained)."""

    def result(name: str, repeat: int, status: Any) -> TestResult:
        return TestResult(
            id=f"t.py::{name}", name=name, title=name, file="t.py", line=1, repeat=repeat,
            status=status, run_id=f"r{repeat}", score=1.0 if status == "passed" else 0.0,
        )  # fmt: skip

    results = [result("steady", r, "passed") for r in range(3)]
    results += [result("wobbly", r, "passed" if r == 0 else "failed") for r in range(3)]
    report = RunReport.build(results, duration_ms=1.0, repeats=3)
    url = reporters.write("html", tmp_path, report).as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        card = page.locator("#summary .card.failed")
        assert card.locator(".value").inner_text() == "2"
        assert card.locator(".def").inner_text() == "results (of 6)"
        assert page.locator("#status-filters .chips-head").inner_text() == "tests:"
        chip = page.locator("#status-filters button[data-status='failed']")
        assert chip.inner_text() == "failed 1"
        assert chip.get_attribute("title") == (
            "1 test with at least one failed repeat (the card above counts results)"
        )
        passed = page.locator("#status-filters button[data-status='passed']")
        assert passed.inner_text() == "passed 2"  # both tests passed in some repeat
        assert page.locator("#summary .card.passed .value").inner_text() == "4"
        _clean(seen, url)
