"""Before the first test, each agent the run needs is looked at: one that is not there is a
usage error naming its URL, not a run of errored tests that reads as a regression.

Through the real CLI against real agents on 127.0.0.1 (the example triage agent, small
aiohttp servers that record what they are asked, or that stop listening mid-run).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health.ledger import records
from aiohttp import web
from support import ledger_support
from support.gateway_support import serving
from support.helpers import run_cli

SUITE = """
from agent_health import test


@test("diagnoses the payment outage")
async def diagnoses(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result.output).to_contain("payment")


@test("checks the auth service")
async def auth(agent, expect):
    result = await agent.run("Check the auth service")
    expect(result.output).to_contain("auth")
"""

DATA_ONLY = """
from agent_health import test


@test("adds up")
async def adds_up(expect):
    expect(2 + 2).to_equal(4)
"""


class Agent:
    """A REST v1 agent on loopback that keeps every request's method and path, serving POST
    at ``/run`` and GET at ``/healthz``; ``dies_after`` answers stops it listening."""

    def __init__(self, dies_after: int | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        self.dies_after = dies_after
        self.answered = 0
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    async def run(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.answered += 1
        if self.dies_after is not None and self.answered >= self.dies_after:
            assert self._site is not None
            await self._site.stop()  # no new connection is taken: the agent is gone
        reply = {"output": f"on {body['prompt']}: the payment and auth services are fine",
                 "trajectory": [], "token_usage": {"prompt": 10, "completion": 5}}  # fmt: skip
        response = web.json_response(reply)
        response.force_close()  # nor is this one kept for the next call
        return response

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"ok": True})

    @web.middleware
    async def keep(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.seen.append((request.method, request.path))
        response: web.StreamResponse = await handler(request)
        return response

    async def __aenter__(self) -> Agent:
        app = web.Application(middlewares=[self.keep])
        app.router.add_post("/run", self.run)
        app.router.add_get("/healthz", self.healthz)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await self._site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    async with Agent() as served:
        yield served


def _config(suite: Path, agents: dict[str, dict[str, Any]]) -> None:
    (suite / "agent-health.config.py").write_text(
        f"from agent_health import define_config\nconfig = define_config(agents={agents!r})\n"
    )


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


async def test_an_agent_that_is_not_running_is_a_usage_error_before_any_test(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_a.py": SUITE})
    ledger = tmp_path / "ledger"
    run = await run_cli(suite, "--agent", "rest+http://127.0.0.1:9/run", "--ledger", str(ledger))
    assert run.code == 2
    assert run.report == {}  # nothing ran: no report of errored tests
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith("error: the agent (rest) at http://127.0.0.1:9/run does not answer: ")
    assert line.endswith("start it, or fix the host and port (checked before the first test; "
                         "nothing ran)")  # fmt: skip
    assert not ledger.exists()  # no ledger of a run that did not start


async def test_a_path_that_does_not_take_post_is_a_usage_error_naming_the_fix(
    write_suite: Any, agent: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_a.py": SUITE})
    _config(suite, {"triage": {"connector": "rest", "url": f"{agent.url}/healthz"}})
    run = await run_cli(suite, "--no-ledger")
    assert run.code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(
        f"error: agent 'triage' (rest) at {agent.url}/healthz takes GET, HEAD there, not POST"
    )
    assert "rest+http://HOST:PORT/run, if it serves /run" in line
    assert agent.seen == [("OPTIONS", "/healthz")]  # one look, and no test ran


async def test_a_wrong_path_answered_404_to_the_first_call_stops_the_run_as_a_usage_error(
    write_suite: Any, agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 404 to OPTIONS cannot tell a wrong path from a catch-all route in front of a working
    # agent: the first real call can. Answered 404 before any call was answered, the run
    # starts no more tests and ends as a usage error naming the URL and the fix.
    suite = write_suite(**{"test_a.py": SUITE, "test_b.py": SUITE.replace('"d', '"b d')})
    ledger = tmp_path / "ledger"
    run = await run_cli(
        suite, "--agent", f"rest+{agent.url}/runn", "-j", "1", "--ledger", str(ledger)
    )
    assert run.code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line == (
        f"error: the agent (rest) at {agent.url}/runn answered 404 Not Found to the run's "
        "first call: nothing is served at this path: check the agent's URL, path included "
        "(no more tests were started)"
    )
    [test] = run.report["tests"]  # the first, and no other
    assert (test["status"], test["cause"]) == ("errored", "agent")
    assert run.report["summary"]["stopped"] == line.removeprefix("error: ")
    assert run.report["summary"]["not_run"] == 3
    assert agent.seen == [("OPTIONS", "/runn"), ("POST", "/runn")]


async def test_a_rest_url_at_an_agui_agent_stops_at_the_first_call_naming_the_likely_fix(
    write_suite: Any, triage_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The look cannot see a protocol mismatch (that takes a request body, which would run
    # the agent): the example agent's AG-UI endpoint takes POST. The first call says it.
    suite = write_suite(**{"test_a.py": SUITE})
    agui = triage_url.removesuffix("/run") + "/agui"
    run = await run_cli(suite, "--agent", f"rest+{agui}", "--no-ledger")
    assert run.code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(f"error: the agent (rest) at {agui} answered 400 Bad Request to the ")
    assert "name it before its URL: rest+, agui+ or openai+" in line
    # Each call answered 400 is its test's error; a test in flight when the run halted ends
    # as it does.
    assert run.report["tests"]
    for test in run.report["tests"]:
        assert (test["status"], test["cause"]) == ("errored", "agent")
        assert test["error"].startswith(f"agent at {agui} answered HTTP 400: ")


async def test_once_the_agent_has_answered_a_404_is_that_tests_error_and_the_run_goes_on(
    write_suite: Any,
) -> None:
    # After the agent answered a call, a 404 is that test's error (cause agent), not the
    # run's setup: the run goes on.
    suite = write_suite(**{"test_a.py": SUITE})
    posts: list[str] = []

    async def run(request: web.Request) -> web.StreamResponse:
        prompt = (await request.json())["prompt"]
        posts.append(prompt)
        if "auth" in prompt:
            return web.json_response({"error": "no such service"}, status=404)
        return web.json_response({"output": "the payment service is down", "trajectory": []})

    app = web.Application()
    app.router.add_post("/run", run)
    async with serving(app) as base:
        result = await run_cli(suite, "--agent", f"rest+{base}/run", "-j", "1", "--no-ledger")
    assert result.code == 3
    first, second = result.report["tests"]
    assert first["status"] == "passed"
    assert (second["status"], second["cause"]) == ("errored", "agent")
    assert result.report["summary"]["stopped"] is None
    assert len(posts) == 2


async def test_each_agent_of_a_matrix_is_looked_at_and_none_runs_if_one_is_missing(
    write_suite: Any, agent: Agent, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_a.py": SUITE})
    _config(
        suite,
        {
            "here": {"connector": "rest", "url": f"{agent.url}/run"},
            "gone": {"connector": "agui", "url": "http://127.0.0.1:9/agui"},
        },
    )
    run = await run_cli(suite, "--agent", "here", "--agent", "gone", "--no-ledger")
    assert run.code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith("error: agent 'gone' (agui) at http://127.0.0.1:9/agui does not answer")
    assert "'here'" not in line
    assert agent.seen == [("OPTIONS", "/run")]  # looked at, never run


async def test_the_look_is_not_a_run_of_the_agent(
    write_suite: Any, agent: Agent, tmp_path: Path
) -> None:
    # One OPTIONS per agent, outside the connector: in no ledger, no token or cost figure.
    suite = write_suite(**{"test_a.py": SUITE})
    ledger = tmp_path / "ledger"
    run = await run_cli(suite, "--agent", f"rest+{agent.url}/run", "--ledger", f"file://{ledger}")
    assert run.code == 0, run.report
    assert agent.seen == [("OPTIONS", "/run"), ("POST", "/run"), ("POST", "/run")]
    assert run.report["summary"]["tokens"] == 30  # two runs of 15, nothing for the look
    cells = ledger_support.parsed(ledger).values()
    exchanges = [r for cell in cells for r in cell if isinstance(r, records.Exchange)]
    assert [e.method for e in exchanges] == ["POST", "POST"]
    assert sum(isinstance(r, records.RunResultRecord) for cell in cells for r in cell) == 2


async def test_an_agent_that_dies_mid_run_stays_errored_by_the_agent(write_suite: Any) -> None:
    suite = write_suite(**{"test_a.py": SUITE})
    async with Agent(dies_after=1) as dying:
        run = await run_cli(suite, "--agent", f"rest+{dying.url}/run", "-j", "1", "--no-ledger")
    assert run.code == 3
    statuses = [(t["status"], t["cause"]) for t in run.report["tests"]]
    assert statuses == [("passed", None), ("errored", "agent")]
    assert "cannot connect to agent at" in run.report["tests"][1]["error"]


async def test_a_started_agent_is_waited_for_then_looked_at(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # `command` agents are waited for as before (ready_url answers), then their url looked
    # at: here it names the agent's health check, not its endpoint.
    suite = write_suite(**{"test_a.py": SUITE})
    triage = Path(__file__).parents[2] / "examples" / "agents" / "triage_agent.py"
    _config(
        suite,
        {
            "triage": {
                "connector": "rest",
                "url": "http://127.0.0.1:{port}/healthz",
                "ready_url": "http://127.0.0.1:{port}/healthz",
                "command": [sys.executable, str(triage), "--port", "{port}"],
            }
        },
    )
    run = await run_cli(suite, "--no-ledger")
    assert run.code == 2
    assert "takes GET, HEAD there, not POST" in _one_line_error(capsys.readouterr().err)


async def test_a_subprocess_agent_whose_program_is_missing_is_a_usage_error(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_a.py": SUITE})
    run = await run_cli(suite, "--agent", "cmd:no-such-agent-program --flag", "--no-ledger")
    assert run.code == 2
    assert _one_line_error(capsys.readouterr().err) == (
        "error: the agent's command 'no-such-agent-program' is not on PATH; install it, or "
        "give its path (checked before the first test; nothing ran)"
    )


async def test_nothing_is_looked_at_when_no_test_takes_the_agent_or_when_told_not_to(
    write_suite: Any,
) -> None:
    suite = write_suite(**{"test_data.py": DATA_ONLY})
    _config(suite, {"triage": {"connector": "rest", "url": "http://127.0.0.1:9/run"}})
    data = await run_cli(suite, "--no-ledger")
    assert data.code == 0  # pure data tests need no agent: none is looked for
    (suite / "test_data.py").unlink()
    (suite / "test_a.py").write_text(SUITE)
    told = await run_cli(suite, "--no-ledger", "--no-preflight")
    assert told.code == 3  # as before the look existed: each test errored by the agent
    assert {(t["status"], t["cause"]) for t in told.report["tests"]} == {("errored", "agent")}


async def test_the_look_waits_no_longer_than_the_agents_own_timeout(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # An agent that takes the connection and never answers (a hung process).
    done = asyncio.Event()

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await done.wait()
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    suite = write_suite(**{"test_a.py": SUITE})
    _config(suite, {"triage": {"connector": "rest", "url": f"http://127.0.0.1:{port}/run",
                               "timeout": 0.5}})  # fmt: skip
    try:
        run = await run_cli(suite, "--no-ledger")
    finally:
        done.set()
        server.close()
    assert run.code == 2
    assert "did not answer within 0.5 s" in _one_line_error(capsys.readouterr().err)


async def test_no_credential_of_the_agents_url_is_in_any_error_line_or_report(
    write_suite: Any, agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An agent's URL may carry its credentials (user info, an API key in the query): every
    # message that names the agent by its URL names it without them.
    suite = write_suite(**{"test_a.py": SUITE})
    secret = "s3cret-pw-7731"
    with_creds = agent.url.replace("http://", f"http://bot:{secret}@")
    report = tmp_path / "report.html"
    run = await run_cli(
        suite,
        "--agent",
        f"rest+{with_creds}/runn?api_key={secret}",
        "--no-ledger",
        "--reporter",
        f"junit:{tmp_path / 'junit.xml'}",
        "--reporter",
        f"html:{report}",
    )
    assert run.code == 2  # answered 404 to its first call: a usage error
    errors = [test["error"] for test in run.report["tests"] if test["cause"] == "agent"]
    assert errors
    assert all(error.startswith(f"agent at {agent.url}/runn?… ") for error in errors)
    out = capsys.readouterr()
    written = await asyncio.to_thread(
        lambda: [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    )
    for text in [out.out, out.err, str(run.report), *written]:
        assert secret not in text
    gone = await run_cli(
        suite, "--agent", f"rest+http://bot:{secret}@127.0.0.1:9/run", "--no-ledger"
    )
    assert gone.code == 2
    line = _one_line_error(capsys.readouterr().err)
    assert secret not in line
    assert "at http://127.0.0.1:9/run does not answer" in line


async def test_once_the_agent_has_answered_its_calls_are_the_connectors_own() -> None:
    # Watched until the first answer; after it, a test's await reaches the connector's own
    # coroutine with no frame of ours between them, which every wake-up passed through.
    from agent_health.connectors import preflight
    from agent_health.connectors.protocol import AgentReply, AgentRequest

    async def call(request: AgentRequest) -> AgentReply:
        return AgentReply(output=f"{request.prompt}: pong")

    stopped: list[str] = []
    first = preflight.FirstAnswer(call, "the agent", stopped.append)
    request = AgentRequest(prompt="ping", run_id="r1")
    assert (await first(request)).output == "ping: pong"
    assert first.answered
    again = first(request)
    assert getattr(again, "cr_code", None) is call.__code__
    assert (await again).output == "ping: pong"
    assert not stopped
