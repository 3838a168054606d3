"""Conversations in one agent.run(): scripted turns and user functions, through the real CLI,
on every built-in connector's wire, against the example support agent on loopback."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import support_agent
from aiohttp import web
from support.helpers import run_cli

AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "support_agent.py"

SUITE = """
from agent_health import Stop, test

@test("scripted")
async def scripted(agent, expect):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234", "thanks"])
    assert [t.number for t in result.turns] == [1, 2, 3]
    assert result.turns[0].output.endswith("What is your order number?")
    assert result.turns[1].user == "It is order 1234"
    assert "arrives on Thursday" in result.turns[1].output
    assert result.output == "You're welcome. Goodbye!"
    assert result.ended.reason == "turns-done"
    expect(result.turn(2)).to_have_called_tool("lookup_order", {"order_id": "1234"})
    expect(result.turn(1)).not_to_have_called_tool("lookup_order")
    assert [s.turn for s in result.tool_calls()] == [2]

@test("user function")
async def user_function(agent, expect):
    async def customer(conversation):
        if "order number" in conversation.last_output:
            return "Sorry, it is 5678"
        if "refunded" in conversation.last_output:
            return Stop.goal_met("got the refund status")
        return None

    result = await agent.run("Did my refund go through?", user=customer, max_turns=5)
    assert len(result.turns) == 2, result.turns
    assert result.ended.reason == "goal-met"
    assert result.ended.detail == "got the refund status"
    expect(result.output).to_contain("refunded in full")

@test("max turns")
async def max_turns(agent):
    result = await agent.run("Hello", user=lambda c: "still no number", max_turns=3)
    assert len(result.turns) == 3
    assert result.ended.reason == "max-turns"
"""


@pytest.mark.parametrize("kind", ["rest", "agui", "openai"])
async def test_conversations_on_each_http_wire(
    write_suite: Any, support_url: str, kind: str
) -> None:
    base = support_url.removesuffix("/run")
    url = {"rest": support_url, "agui": f"{base}/agui", "openai": f"{base}/v1"}[kind]
    suite = write_suite(**{"test_talk.py": SUITE})
    run = await run_cli(suite, "--agent", f"{kind}+{url}")
    for name in ("scripted", "user function", "max turns"):
        found = run.by_name(name)
        assert found["status"] == "passed", (name, found.get("error"), found.get("signals"))
    scripted = run.by_name("scripted")
    assert [t["user"] for t in scripted["turns"]] == [
        "Where is my parcel?",
        "It is order 1234",
        "thanks",
    ]
    assert scripted["ended"]["reason"] == "turns-done"


async def test_conversation_over_the_subprocess_line_protocol(write_suite: Any) -> None:
    suite = write_suite(**{"test_talk.py": SUITE})
    run = await run_cli(suite, "--agent", f"cmd:{sys.executable} {AGENT} --stdio")
    for name in ("scripted", "user function", "max turns"):
        found = run.by_name(name)
        assert found["status"] == "passed", (name, found.get("error"))


async def test_rest_wire_carries_the_conversation_so_far(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        return web.json_response({"output": f"answer {len(bodies)}"})

    app = web.Application()
    app.router.add_post("/run", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        suite = write_suite(
            **{
                "test_wire.py": """
            from agent_health import test

            @test("two turns")
            async def two(agent):
                await agent.run("first", turns=["second"])
            """
            }
        )
        run = await run_cli(suite, "--agent", f"http://127.0.0.1:{runner.addresses[0][1]}/run")
    finally:
        await runner.cleanup()
    assert run.by_name("two turns")["status"] == "passed"
    assert "messages" not in bodies[0]  # a single run's body
    assert "turn" not in bodies[0]
    assert bodies[1]["prompt"] == "second"
    assert bodies[1]["turn"] == 2
    assert bodies[1]["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer 1"},
    ]
    assert bodies[0]["run_id"] == bodies[1]["run_id"]


async def test_a_command_that_cannot_hold_a_conversation_is_told_so(
    write_suite: Any, tmp_path: Path
) -> None:
    once = tmp_path / "once.py"
    once.write_text(
        "import json, sys\n"
        "request = json.loads(sys.stdin.readline())\n"
        "print(json.dumps({'output': 'one answer only'}))\n"
    )
    suite = write_suite(
        **{
            "test_once.py": """
        from agent_health import test

        @test("two turns")
        async def two(agent):
            await agent.run("first", turns=["second"])
        """
        }
    )
    run = await run_cli(suite, "--agent", f"cmd:{sys.executable} {once}")
    found = run.by_name("two turns")
    assert found["status"] == "errored"
    assert found["cause"] == "agent"
    assert "cannot hold a conversation" in found["error"]
    assert "after answering turn 1" in found["error"]
    assert [t["output"] for t in found["turns"]] == ["one answer only"]  # kept


async def test_a_connector_without_conversations_is_refused_before_any_request(
    write_suite: Any,
) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": """
            from agent_health import define_config
            from agent_health.connectors.protocol import AgentReply

            class OneShot:
                calls = 0

                def __init__(self, spec):
                    pass

                async def run(self, request):
                    OneShot.calls += 1
                    return AgentReply(output="hi")

                async def aclose(self):
                    pass

            config = define_config(
                agents={"one": {"connector": "oneshot"}},
                connectors={"oneshot": OneShot},
            )
            """,
            "test_refused.py": """
            from agent_health import test

            @test("talks")
            async def talks(agent):
                await agent.run("first", turns=["second"])
            """,
        }
    )
    run = await run_cli(suite, "--agent", "one")
    found = run.by_name("talks")
    assert found["status"] == "errored"
    assert "holds_conversations = True" in found["error"]
    assert found["output"] is None  # nothing was sent


@pytest.mark.parametrize(
    ("call", "words"),
    [
        ('agent.run("x", turns="not a list")', "takes a list of follow-up messages"),
        ('agent.run("x", turns=["ok", ""])', "turns=...)[1] must be a non-empty string"),
        ('agent.run("x", user=42)', "takes a function of the conversation"),
        ('agent.run("x", max_turns=3)', "give it turns=[...] or user=... too"),
        ('agent.run("x", user=lambda c: 7, max_turns=3)', "returned 7 after turn 1"),
        ('agent.run("x", turns=["y"], max_turns=0)', "at least 1"),
    ],
)
async def test_bad_conversation_arguments_are_clear(
    write_suite: Any, support_url: str, call: str, words: str
) -> None:
    suite = write_suite(
        **{
            "test_bad.py": f"""
        from agent_health import test

        @test("bad")
        async def bad(agent):
            await {call}
        """
        }
    )
    run = await run_cli(suite, "--agent", support_url)
    found = run.by_name("bad")
    assert found["status"] == "errored", found
    assert words in found["error"]
    assert "'bad'" in found["error"]


def test_turn_out_of_range_and_single_run_turns() -> None:
    from agent_health.sdk.results import RunResult

    single = RunResult(run_id="r", prompt="p", output="o")
    assert single.turn(1) is single
    assert [(t.number, t.user, t.output) for t in single.turns] == [(1, "p", "o")]
    with pytest.raises(Exception, match="has turns 1 to 1"):
        single.turn(2)
    assert json.loads(single.model_dump_json())["conversation"] == []


async def test_a_conversation_replays_turn_by_turn_and_refuses_a_changed_one(
    write_suite: Any, tmp_path: Path
) -> None:
    runner, url = await support_agent.start()
    try:
        suite = write_suite(**{"test_talk.py": SUITE})
        first = await run_cli(suite, "--agent", url)
    finally:
        await runner.cleanup()  # the replays below have no agent to call
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(first.report))
    again = await run_cli(suite, "--replay", str(recorded))
    for name in ("scripted", "user function", "max turns"):
        was, now = first.by_name(name), again.by_name(name)
        assert (now["status"], now["replayed"]) == ("passed", True), now.get("error")
        assert now["turns"] == was["turns"]
        assert now["ended"] == was["ended"]
        assert now["trajectory"] == was["trajectory"]

    (suite / "test_talk.py").write_text(
        textwrap.dedent(SUITE)
        .replace('"It is order 1234"', '"It is order 9012"')
        .replace("max_turns=3", "max_turns=2")
    )
    changed = await run_cli(suite, "--replay", str(recorded))
    scripted = changed.by_name("scripted")
    assert (scripted["status"], scripted["cause"]) == ("errored", "test")
    assert "differs from the recording at turn 2" in scripted["error"]
    assert "It is order 9012" in scripted["error"]
    shorter = changed.by_name("max turns")
    assert (shorter["status"], shorter["cause"]) == ("errored", "test")
    assert "ended after 2 turns, the recorded one went on to 3" in shorter["error"]


async def test_a_goal_met_on_the_last_turn_allowed_is_goal_met(
    write_suite: Any, support_url: str
) -> None:
    suite = write_suite(
        **{
            "test_last.py": """
            from agent_health import Stop, test

            @test("met on the last turn")
            async def last(agent, expect):
                def customer(conversation):
                    if "refunded" in conversation.last_output:
                        return Stop.goal_met("refund confirmed")
                    return "It is order 5678"

                result = await agent.run("Did my refund go through?", user=customer, max_turns=2)
                assert len(result.turns) == 2
                assert result.ended.reason == "goal-met", result.ended
                expect(result).to_meet_user_goal()

            @test("cut off with more to say")
            async def cut(agent):
                result = await agent.run("Hello", user=lambda c: "one more thing", max_turns=2)
                assert (result.ended.reason, result.ended.detail) == ("max-turns", "one more thing")
            """
        }
    )
    run = await run_cli(suite, "--agent", support_url)
    for name in ("met on the last turn", "cut off with more to say"):
        found = run.by_name(name)
        assert found["status"] == "passed", (name, found.get("error"), found.get("signals"))
