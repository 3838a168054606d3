"""A case's ``tools`` (and ``agent.run(tools=...)``) reach the agent through every built-in
connector in its own protocol's form, as docs/agent-protocol.md says; a run without tools
sends what it always sent. The agents are real servers on 127.0.0.1 (and a real subprocess)
that record what they received."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web
from support.helpers import run_cli
from support.loopback import run_finished, run_started, serving, sse_handler

TOOL = {
    "name": "search_logs",
    "description": "Search a service's logs",
    "parameters": {
        "type": "object",
        "properties": {"service": {"type": "string", "description": "the service"}},
        "required": ["service"],
    },
}
CASE = {
    "category": "RCA",
    "difficulty": "Easy",
    "initialPrompt": "Diagnose the payment service",
    "expectedOutcomes": ["answers"],  # judged (skipped here: no judge): the agent runs
}
CASES = [{**CASE, "name": "offers a tool", "tools": [TOOL]}, {**CASE, "name": "offers none"}]


def _suite(write_suite: Any) -> Path:
    return write_suite(**{"tools.cases.json": json.dumps(CASES)})  # type: ignore[no-any-return]


def _recorder(bodies: list[dict[str, Any]], answer: Any) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await answer(request)

    return handler


def _by_prompt_tools(bodies: list[dict[str, Any]], has: Any) -> tuple[dict[str, Any], ...]:
    given = [b for b in bodies if has(b)]
    plain = [b for b in bodies if not has(b)]
    assert (len(given), len(plain)) == (1, 1), bodies
    return given[0], plain[0]


async def _rest_answer(_: web.Request) -> web.StreamResponse:
    return web.json_response({"output": "ok", "trajectory": []})


async def test_rest_agents_get_the_tools_in_the_body(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    async with serving(_recorder(bodies, _rest_answer)) as url:
        run = await run_cli(_suite(write_suite), "--agent", f"rest+{url}", "--no-ledger")
    assert run.by_name("offers a tool")["error"] is None, run.report
    given, plain = _by_prompt_tools(bodies, lambda b: "tools" in b)
    assert given["tools"] == [TOOL]
    assert sorted(plain) == ["context", "env", "prompt", "run_id"]  # as it always was


async def test_agui_agents_get_them_as_agui_tools(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    stream = sse_handler(run_started(), run_finished(result="ok"))
    async with serving(_recorder(bodies, stream)) as url:
        run = await run_cli(_suite(write_suite), "--agent", f"agui+{url}", "--no-ledger")
    assert run.by_name("offers a tool")["error"] is None, run.report
    given, plain = _by_prompt_tools(bodies, lambda b: bool(b["tools"]))
    assert given["tools"] == [TOOL]
    assert plain["tools"] == []


async def _chat_answer(_: web.Request) -> web.StreamResponse:
    return web.json_response({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})


async def test_openai_compatible_agents_get_them_as_function_tools(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    async with serving(_recorder(bodies, _chat_answer), path="/v1/chat/completions") as url:
        base = url.removesuffix("/chat/completions")
        run = await run_cli(_suite(write_suite), "--agent", f"openai+{base}", "--no-ledger")
    assert run.by_name("offers a tool")["error"] is None, run.report
    given, plain = _by_prompt_tools(bodies, lambda b: "tools" in b)
    assert given["tools"] == [{"type": "function", "function": TOOL}]
    assert sorted(plain) == ["messages", "model"]


AGENT = """
import json, os, sys
request = json.load(sys.stdin)
offered = os.environ.get("AGENT_HEALTH_TOOLS", "null")
seen = {"stdin": request.get("tools"), "env": json.loads(offered)}
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(seen) + "\\n")
print(json.dumps({"output": "ok", "trajectory": []}))
"""


async def test_subprocess_agents_get_them_on_stdin_and_in_the_environment(
    write_suite: Any, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    log = tmp_path / "seen.jsonl"
    suite = _suite(write_suite)
    run = await run_cli(suite, "--agent", f"cmd:{sys.executable} {script} {log}", "--no-ledger")
    assert run.by_name("offers a tool")["error"] is None, run.report
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    given, plain = _by_prompt_tools(seen, lambda s: s["stdin"] is not None)
    assert given == {"stdin": [TOOL], "env": [TOOL]}
    assert plain == {"stdin": None, "env": None}


BAD = """
from agent_health import test

@test("a tool without a name")
async def nameless(agent):
    await agent.run("x", tools=[{"description": "no name"}])

@test("not a list")
async def not_a_list(agent):
    await agent.run("x", tools={"name": "search_logs"})
"""


async def test_bad_tools_are_a_clear_error_naming_the_entry(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    suite = write_suite(**{"test_bad.py": BAD})
    async with serving(_recorder(bodies, _rest_answer)) as url:
        run = await run_cli(suite, "--agent", f"rest+{url}", "--no-ledger")
    assert bodies == []  # nothing reached the agent
    nameless = run.by_name("a tool without a name")
    assert (nameless["status"], nameless["cause"]) == ("errored", "test")
    assert "agent.run(tools=...)[0].name: Field required" in nameless["error"]
    listed = run.by_name("not a list")
    assert "takes a list of tool definitions" in listed["error"]
