"""The HTML inspector's chat view of a conversation, in a real headless Chromium.

A real run (the example support agent and a scripted judge model, both on loopback) writes
the report; Playwright opens it from ``file://`` and reads, turn by turn, what the user
said, the tool calls under each turn, the agent's answers, and the checks and judge verdicts
beside the turns they were made on. A second run talks to an agent (a real HTTP server on
loopback) whose every answer and tool call is an HTML injection: it stays text. Every page
is watched for requests and script errors, as in ``tests/engine/test_engine_html_browser.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any

import browser
import pytest
import support_agent
from aiohttp import web
from playwright.sync_api import expect
from support.helpers import Run, run_cli
from support.judge_servers import ScriptedModel, quoted_rule

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow

CONFIG = """
from agent_health import define_config

config = define_config(judge={"model": "placeholder"})
"""

SUITE = """
from agent_health import Stop, test


@test("asks for the order number")
async def order(agent, expect, judge):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234", "thanks"])
    expect(result.turn(1)).not_to_have_called_tool("lookup_order")
    await judge(result.turn(2), 'says "arrives on Thursday"')
    await judge(result.turn(3), 'says "order 1234"')
    await judge(result, 'says "Goodbye"')


@test("a refund")
async def refund(agent, expect):
    def customer(conversation):
        if "order number" in conversation.last_output:
            return "It is 5678"
        return Stop.goal_met("got the refund status")

    await agent.run("Did my refund go through?", user=customer, max_turns=4)
"""


def _in_a_thread(made: Any) -> Any:
    # Playwright's sync API keeps an event loop running in this thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, made).result()


def _open(seen: browser.Watched, url: str) -> None:
    seen.page.goto(url)
    seen.page.wait_for_selector("body[data-ready='1']", state="attached")


def _clean(seen: browser.Watched, url: str) -> None:
    assert seen.outside(url) == [], "the page made network requests"
    assert seen.errors == [], "the page hit script or console errors"


def test_a_conversation_reads_as_a_chat_with_its_verdicts_beside_their_turns(
    chromium: Any, tmp_path: Path
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent-health.config.py").write_text(CONFIG)
    (suite / "test_talk.py").write_text(SUITE)
    out = tmp_path / "html"

    async def run() -> Run:
        runner, url = await support_agent.start()
        judge = await ScriptedModel.start("openai", default=quoted_rule)
        try:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("AGENT_HEALTH_JUDGE_BASE_URL", judge.url)
                env.setenv("AGENT_HEALTH_JUDGE_MODEL", "scripted-judge")
                env.setenv("AGENT_HEALTH_JUDGE_CACHE", str(suite / "judge.sqlite"))
                env.delenv("AGENT_HEALTH_SKIP_JUDGE", raising=False)
                return await run_cli(
                    suite, "--agent", url, "--repeat", "2", "--no-ledger",
                    "--reporter", f"html:{out}",
                )  # fmt: skip
        finally:
            await judge.close()
            await runner.cleanup()

    done = _in_a_thread(run())
    assert done.code == 1  # turn 3 does not say "order 1234"
    url = (out / "index.html").as_uri()
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        row = page.locator("#test-list .test-row", has_text="asks for the order number")
        assert row.locator(".tag.turns").inner_text() == "3 turns, turns-done"
        row.click()
        inspector = page.locator("#inspector")
        chat = inspector.locator(".chat")
        assert inspector.locator("h3", has_text="Conversation").inner_text() == (
            "Conversation (3 turns, turns-done)"
        )
        assert "Ended turns-done — the scripted turns ran out" in inspector.inner_text()
        turns = chat.locator(".turn")
        assert turns.count() == 3
        first, second, third = (turns.nth(i) for i in range(3))
        # turn by turn: the user's message, then the agent's answer
        assert first.locator(".bubble.user pre").inner_text() == "Where is my parcel?"
        assert first.locator(".bubble.agent pre").inner_text() == (
            "I can help with that. What is your order number?"
        )
        assert second.locator(".bubble.user pre").inner_text() == "It is order 1234"
        assert "arrives on Thursday" in second.locator(".bubble.agent pre").inner_text()
        assert third.locator(".bubble.agent pre").inner_text() == "You're welcome. Goodbye!"
        # the tool calls under the turn that made them, and none under the others
        assert first.locator(".turn-steps").count() == 0
        call = second.locator(".turn-steps .step.tool_call")
        assert call.locator("code").inner_text() == "lookup_order"
        assert '"order_id": "1234"' in call.inner_text()
        assert "shipped on Monday" in second.locator(".step.tool_result").inner_text()
        # each check and verdict beside the turn it was made on; the whole run's is not
        assert first.locator(".turn-verdict").all_inner_texts()[0].startswith("✓ pass")
        assert (
            "not_to_have_called_tool('lookup_order')"
            in first.locator(".turn-verdicts").inner_text()
        )
        judged = second.locator(".turn-verdict.kind-judge")
        assert judged.count() == 1
        assert 'says "arrives on Thursday"' in judged.inner_text()
        assert judged.inner_text().startswith("✓ pass")
        failing = third.locator(".turn-verdict.kind-judge")
        assert 'says "order 1234"' in failing.inner_text()
        assert failing.inner_text().startswith("✗ fail")
        assert "missing" in failing.locator(".reasoning").inner_text()  # the judge's reasoning
        assert chat.locator(".turn-verdict", has_text='says "Goodbye"').count() == 0
        assert inspector.locator(".verdict-card", has_text='says "Goodbye"').count() == 1
        # the failure names the turn, the trajectory marks each step's turn
        assert " · turn 3" in inspector.locator(".error-box.failed").inner_text()
        marks = inspector.locator("section.part", has_text="Trajectory (").locator(".turn-mark")
        assert set(marks.all_inner_texts()) == {"turn 1", "turn 2", "turn 3"}
        # over the repeats, how the conversation ended
        assert "Over the repeats: turns-done 2/2" in inspector.inner_text()
        # a simulated user's conversation says why it ended, in the user's words
        page.locator("#test-list .test-row", has_text="a refund").click()
        ended = inspector.locator(".chat-ended").inner_text()
        assert ended == "Ended goal-met — the user's goal was met: got the refund status"
        # a search finds a conversation by what was said in a later turn
        page.fill("#search", "It is 5678")
        expect(page.locator("#test-list .test-row")).to_have_count(1)
        assert page.locator("#test-list .test-row").inner_text().startswith("✓\na refund")
        _clean(seen, url)


HOSTILE = (
    "</script><script>window.pwned = 1</script>"
    '<img src="http://127.0.0.1:9/x" onerror="window.pwned = 2">\u202edessap\u202c\x1b[2J'
)
HOSTILE_SUITE = """
from agent_health import Stop, test

HOSTILE = {hostile!r}


@test("talks to an injecting agent")
async def talks(agent, judge):
    result = await agent.run(
        "hello", user=lambda c: HOSTILE if c.number < 2 else Stop.gave_up(HOSTILE),
        max_turns=3,
    )
    await judge.observe(result.turn(2), "says nothing harmful")
"""


def test_a_hostile_conversation_stays_text(chromium: Any, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_hostile.py").write_text(HOSTILE_SUITE.format(hostile=HOSTILE))
    out = tmp_path / "html"

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        turn = body.get("turn", 1)
        return web.json_response(
            {
                "output": f"{HOSTILE} (turn {turn})",
                "trajectory": [
                    {"type": "tool_call", "tool_name": HOSTILE, "tool_args": {HOSTILE: HOSTILE}},
                    {"type": "tool_result", "tool_name": HOSTILE, "tool_output": HOSTILE,
                     "status": "error"},
                ],
            }
        )  # fmt: skip

    async def run() -> Run:
        app = web.Application()
        app.router.add_post("/run", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            port = runner.addresses[0][1]
            return await run_cli(
                suite, "--agent", f"http://127.0.0.1:{port}/run", "--no-ledger", "--no-judge",
                "--reporter", f"html:{out}",
            )  # fmt: skip
        finally:
            await runner.cleanup()

    done = _in_a_thread(run())
    talked = done.by_name("talks to an injecting agent")
    assert len(talked["turns"]) == 2, talked.get("error")
    url = (out / "index.html").as_uri()
    shown = HOSTILE.replace("\u202e", "\\u202e").replace("\u202c", "\\u202c")
    shown = shown.replace("\x1b", "\\x1b")
    with browser.watched_page(chromium) as seen:
        _open(seen, url)
        page = seen.page
        page.click("#test-list .test-row")
        chat = page.locator("#inspector .chat")
        assert chat.locator(".turn").count() == 2
        second = chat.locator(".turn").nth(1)
        assert second.locator(".bubble.user pre").inner_text() == shown
        assert second.locator(".bubble.agent pre").inner_text() == f"{shown} (turn 2)"
        assert shown in second.locator(".turn-steps .step.tool_call code").inner_text()
        assert "trouble" in (second.get_attribute("class") or "")  # its tool result failed
        assert shown in page.locator("#inspector .chat-ended").inner_text()
        text = page.locator("#inspector").inner_text()
        assert "\u202e" not in text
        assert "\x1b" not in text
        assert page.evaluate("window.pwned") is None
        assert page.locator("#inspector img, #inspector script").count() == 0
        _clean(seen, url)
