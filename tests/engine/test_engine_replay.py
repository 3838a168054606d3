"""``agent-health run --replay``: the current bodies, ``agent.run()`` answered from a recording.

The agent is a real REST server on 127.0.0.1 that counts the calls it gets; the judge a
scripted model server that counts its requests. A replay must reproduce every status
without a single agent call (and, through the judge cache, without a judge call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from aiohttp import web
from support.judge_servers import ScriptedModel, quoted_rule

HUGE = 1_000_001  # one character over the recording's cap on an output


class CountingAgent:
    """A REST v1 agent that answers by prompt and counts every call."""

    def __init__(self) -> None:
        self.calls = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        prompt = (await request.json())["prompt"]
        if "explode" in prompt:
            return web.json_response({"error": "on fire"}, status=500)
        if "slowly" in prompt:
            await asyncio.sleep(0.3)
        output = (
            "x" * HUGE
            if "huge" in prompt
            else f"The payment service cannot reach db-primary ({prompt})"
        )
        return web.json_response(
            {
                "output": output,
                "trajectory": [
                    {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"q": prompt}},
                    {"type": "tool_result", "tool_name": "search_logs", "tool_output": "refused"},
                    {"type": "assistant", "content": output[:40]},
                ],
                "token_usage": {"prompt": 100, "completion": 20, "total": 120},
                "model": "counted-model",  # beyond the protocol: the price table reads it
            }
        )


@contextlib.asynccontextmanager
async def counting_agent() -> AsyncIterator[CountingAgent]:
    agent = CountingAgent()
    app = web.Application(client_max_size=4 * HUGE)
    app.router.add_post("/run", agent.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    agent.url = f"http://127.0.0.1:{runner.addresses[0][1]}/run"
    try:
        yield agent
    finally:
        await runner.cleanup()


CONFIG = """
from agent_health import define_config

config = define_config(
    agents={{"counted": {{"connector": "rest", "url": "{url}"}}}},
    default_agent="counted",
    prices={{"counted-model": {{"input_per_mtok": 3.0, "output_per_mtok": 15.0}}}},
)
"""

SUITE = """
from agent_health import test


@test("names the database", labels=["kind:rca"])
async def names(agent, expect, judge):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("search_logs")
    expect(result.output).to_contain("db-primary")
    await judge(result, 'says "db-primary"')


@test("wants a restart", labels=["kind:rca"])
async def restart(agent, expect):
    result = await agent.run("What should we restart?")
    expect(result.output).to_contain("restart the pool")


@test("a slow answer misses its budget")
async def slow(agent, expect):
    result = await agent.run("Answer slowly")
    expect(result).to_complete_within(seconds=0.2)


@test("the agent answers 500")
async def explodes(agent, expect):
    result = await agent.run("Please explode")
    expect(result.output).to_contain("never")


@test("pure arithmetic")
async def pure(expect):
    expect(1 + 1).to_equal(2)
"""

HUGE_TEST = """

@test("a huge answer")
async def huge(agent, expect):
    result = await agent.run("Give a huge answer")
    expect(len(result.output)).to_be_greater_than(10)
"""

EXPECTED = {
    "names the database": ("passed", None),
    "wants a restart": ("failed", None),
    "a slow answer misses its budget": ("failed", None),
    "the agent answers 500": ("errored", "agent"),
    "pure arithmetic": ("passed", None),
}


def outcomes(report: dict[str, Any]) -> dict[tuple[str, int], tuple[str, str | None]]:
    return {(t["name"], t["repeat"]): (t["status"], t["cause"]) for t in report["tests"]}


def cli_run(suite: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """The real CLI, from the suite's folder (as a user runs it); its JSON report."""
    out = suite / f"report-{len(list(suite.glob('report-*.json')))}.json"
    with contextlib.chdir(suite):
        code = cli.main(
            ["run", *args, "--reporter", f"json:{out.name}", "--reporter", "junit:j.xml"]
        )
    return code, (json.loads(out.read_text()) if out.exists() else {}), out.name


@pytest.fixture
def judge_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    monkeypatch.delenv("AGENT_HEALTH_SKIP_JUDGE", raising=False)


def use_judge(monkeypatch: pytest.MonkeyPatch, server: ScriptedModel) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_PROVIDER", "openai")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_MODEL", "scripted-judge")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_BASE_URL", server.url)
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_API_KEY_ENV", "SCRIPTED_JUDGE_KEY")
    monkeypatch.setenv("SCRIPTED_JUDGE_KEY", "sk-scripted")


def write(suite: Path, name: str, source: str) -> None:
    (suite / name).write_text(textwrap.dedent(source))


@pytest.mark.slow
async def test_a_replay_reproduces_every_status_without_calling_the_agent_or_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_env: None
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    async with (
        ScriptedModel.serving("openai", default=quoted_rule, api_key="sk-scripted") as judge,
        counting_agent() as agent,
    ):
        use_judge(monkeypatch, judge)
        write(suite, "agent-health.config.py", CONFIG.format(url=agent.url))
        write(suite, "test_replayed.py", SUITE)
        code, first, first_name = await asyncio.to_thread(cli_run, suite, "--repeat", "2")
        calls, judged = agent.calls, len(judge.requests)
        assert (code, calls, judged) == (1, 8, 2)  # 4 agent tests x 2; 1 judged x 2

        code, again, _ = await asyncio.to_thread(cli_run, suite, "--replay", first_name)
        ledger_dir = first["provenance"]["ledger"]
        from_ledger = await asyncio.to_thread(cli_run, suite, "--replay", ledger_dir)
        assert (agent.calls, len(judge.requests)) == (calls, judged)  # none, either way

    want = {(name, r): status for name, status in EXPECTED.items() for r in (0, 1)}
    assert outcomes(first) == want
    assert code == 1
    # identical statuses, repeats taken from the recording (no --repeat given)
    assert outcomes(again) == outcomes(first)
    assert outcomes(from_ledger[1]) == outcomes(first)
    assert again["summary"]["repeats"] == 2
    assert again["summary"]["pass_rate"] == first["summary"]["pass_rate"]
    for was, now in zip(first["tests"], again["tests"], strict=True):
        assert now["replayed"] is True
        assert was["replayed"] is False
        if was["ledger_cell"]:  # the recorded run ids: the run's traces are found again
            assert now["run_id"] == was["run_id"]
        if was["output"] is not None:
            assert now["output"] == was["output"]
            # what the metrics read: tokens, the model's price, the recorded duration
            for key in ("total_tokens", "cost_usd", "latency_ms", "tool_calls"):
                assert now["metrics"][key] == was["metrics"][key], (was["name"], key)
    judged_now = next(
        s
        for t in again["tests"]
        if t["name"] == "names the database"
        for s in t["signals"]
        if s["kind"] == "judge"
    )
    assert judged_now["evidence"]["cached"] is True
    assert again["provenance"]["replay"] == ledger_dir
    assert again["provenance"]["ledger"] is None  # a replay records no ledger
    assert again["provenance"]["agent"] is None
    junit = (suite / "j.xml").read_text()
    assert '<property name="replayed" value="true" />' in junit
    assert f'<property name="replayed_from" value="{ledger_dir}" />' in junit


@pytest.mark.slow
async def test_a_changed_body_is_replayed_and_a_changed_prompt_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_env: None
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    monkeypatch.setenv("AGENT_HEALTH_SKIP_JUDGE", "1")
    async with counting_agent() as agent:
        write(suite, "agent-health.config.py", CONFIG.format(url=agent.url))
        write(suite, "test_replayed.py", SUITE + HUGE_TEST)
        _, first, first_name = await asyncio.to_thread(cli_run, suite)
        calls = agent.calls
        # Iterate on the checks: the failing assertion fixed, a prompt changed, a test added.
        edited = (SUITE + HUGE_TEST).replace(
            'to_contain("restart the pool")', 'to_contain("db-primary")'
        ).replace('"Answer slowly"', '"Answer slowly, please"') + textwrap.dedent("""
            @test("a new test")
            async def new(agent):
                await agent.run("Something never asked")
            """)
        write(suite, "test_replayed.py", edited)
        code, replayed, _ = await asyncio.to_thread(cli_run, suite, "--replay", first_name)
        assert agent.calls == calls

    by_name = {t["name"]: t for t in replayed["tests"]}
    assert by_name["wants a restart"]["status"] == "passed"  # the new check, the old answer
    slow = by_name["a slow answer misses its budget"]
    assert (slow["status"], slow["cause"]) == ("errored", "test")
    assert "prompt differs from the recording" in slow["error"]
    assert "test 'a slow answer misses its budget'" in slow["error"]  # names the test
    assert "run it against the agent to record the new prompt" in slow["error"]  # what to do
    assert "'Answer slowly'" in slow["error"]
    assert "'Answer slowly, please'" in slow["error"]
    new = by_name["a new test"]
    assert (new["status"], new["cause"]) == ("errored", "test")
    assert "no recording of test 'a new test'" in new["error"]
    assert "run it against the agent to record it" in new["error"]
    huge = by_name["a huge answer"]  # its recording was cut: not the whole answer
    assert next(t["status"] for t in first["tests"] if t["name"] == "a huge answer") == "passed"
    assert (huge["status"], huge["cause"]) == ("errored", "infra")
    assert "cut to its caps (output)" in huge["error"]
    assert by_name["the agent answers 500"]["cause"] == "agent"
    assert "(replayed)" in by_name["the agent answers 500"]["error"]
    assert code == 3  # errored tests only: nothing failed


def test_what_replay_refuses_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path
    write(
        suite,
        "test_pure.py",
        'from agent_health import test\n\n@test("t")\nasync def t():\n    pass\n',
    )
    cases = [
        (["--replay", "nowhere.json"], "nowhere.json: no such report or ledger"),
        (["--replay", "x.json", "--agent", "rest+http://127.0.0.1:9/run"], "drop --agent"),
        (["--replay", "x.json", "--ledger", "file://l"], "drop --ledger"),
    ]
    (suite / "x.json").write_text(json.dumps({"version": 2, "summary": {}, "tests": []}))
    (suite / "html").mkdir()
    (suite / "html" / "index.html").write_text("<html></html>")
    cases += [
        (["--replay", "x.json"], "this run kept no recording (it ran with --no-ledger"),
        (["--replay", "html"], "is an HTML report; replay the run's JSON report"),
    ]
    for args, message in cases:
        with contextlib.chdir(suite):
            assert cli.main(["run", *args]) == 2, args
        assert message in capsys.readouterr().err, args


CELL_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    expect(result.output).to_contain("db-primary")
"""


@pytest.mark.slow
async def test_a_cluster_cell_graded_from_its_ledger_replays(
    tmp_path: Path, judge_env: None
) -> None:
    """A cell pod's controller and gateway (as the operator runs them), its ledger graded by
    ``agent-health grade``, and that report replayed: no call reaches the agent."""
    from agent_health.engine.controller import cell
    from support import cell_support

    async with counting_agent() as agent:
        port = int(agent.url.rsplit(":", 1)[1].split("/")[0])
        proxy = await cell_support.cell_gateway(tmp_path, port, "http://127.0.0.1:9/unused")
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, CELL_SUITE)
            code, _ = await cell.run_cell(settings)
        finally:
            await proxy.stop()
        assert (code, agent.calls) == (0, 1)
        graded = tmp_path / "graded.json"
        argv = ["grade", f"file://{tmp_path / 'ledger'}", "--key-file", str(tmp_path / "key")]
        assert await asyncio.to_thread(cli.main, [*argv, "--reporter", f"json:{graded}"]) == 0
        code, replayed, _ = await asyncio.to_thread(
            cli_run, tmp_path / "suite", "--replay", str(graded)
        )
        assert agent.calls == 1
    report = json.loads(graded.read_text())
    assert (
        outcomes(replayed)
        == outcomes(report)
        == {("diagnoses the payment outage", 0): ("passed", None)}
    )
    (test,) = replayed["tests"]
    assert test["replayed"] is True
    assert test["run_id"] == report["tests"][0]["run_id"]
    assert replayed["provenance"]["replay"] == f"file://{tmp_path / 'ledger'}"
    assert code == 0
