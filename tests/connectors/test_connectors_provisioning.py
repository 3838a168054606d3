"""Structured provisioning: ``agent.run(env=..., files=..., provisioned=...)`` reaches the agent
through every built-in connector, as docs/agent-protocol.md says, and bad values are clear
errors naming the test and the entry. Agents are real servers on 127.0.0.1 (and a real
subprocess) that record what they received."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

from aiohttp import web
from support.helpers import run_cli
from support.loopback import run_finished, run_started, serving, sse_handler

PROVISIONED = {"db": {"host": "db-primary", "port": 5432}, "tickets": [101, 102], "on": True}
TESTS = """
from agent_health import test

@test("provisioned")
async def provisioned(agent, expect):
    result = await agent.run(
        "Diagnose the payment service",
        env={"FEATURE": "on"},
        files={"notes/runbook.md": "restart db-primary", "blob.bin": b"\\x00\\xff"},
        provisioned=PROVISIONED,
    )
    expect(result.output).to_contain("ok")

@test("nothing provisioned")
async def plain(agent):
    await agent.run("Diagnose the payment service")
""".replace("PROVISIONED", repr(PROVISIONED))

BAD = """
from agent_health import test

@test("escaping path")
async def escaping(agent):
    await agent.run("x", files={"../etc/passwd": "no"})

@test("absolute path")
async def absolute(agent):
    await agent.run("x", files={"/etc/passwd": "no"})

@test("not json")
async def not_json(agent):
    await agent.run("x", provisioned={"when": object()})

@test("structured env")
async def structured_env(agent):
    await agent.run("x", env={"PORT": 5432})
"""

FILES = [
    {"path": "notes/runbook.md", "content": "restart db-primary", "encoding": "utf-8"},
    {"path": "blob.bin", "content": base64.b64encode(b"\x00\xff").decode(), "encoding": "base64"},
]


def _suite(write_suite: Any, url: str, source: str = TESTS) -> Path:
    config = (
        "from agent_health import define_config\n"
        f"config = define_config(agents={{'a': {{'connector': 'rest', 'url': {url!r}}}}})\n"
    )
    return write_suite(**{"agent-health.config.py": config, "test_p.py": source})  # type: ignore[no-any-return]


def _recorder(bodies: list[dict[str, Any]], answer: Any) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await answer(request)

    return handler


async def _rest_answer(_: web.Request) -> web.StreamResponse:
    return web.json_response({"output": "ok", "trajectory": []})


async def test_rest_agents_get_files_and_provisioned_in_the_body(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    async with serving(_recorder(bodies, _rest_answer)) as url:
        run = await run_cli(_suite(write_suite, url), "--no-ledger")
    assert run.by_name("provisioned")["status"] == "passed", run.by_name("provisioned")
    given, plain = sorted(bodies, key=lambda b: "files" not in b)
    assert given["env"] == {"FEATURE": "on"}
    assert given["provisioned"] == PROVISIONED
    assert given["files"] == FILES
    # An agent that is given nothing new sees the body it always saw.
    assert sorted(plain) == ["context", "env", "prompt", "run_id"]


async def test_agui_agents_get_them_as_forwarded_props(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    stream = sse_handler(run_started(), run_finished(result="ok"))
    async with serving(_recorder(bodies, stream)) as url:
        run = await run_cli(_suite(write_suite, url), "--agent", f"agui+{url}", "--no-ledger")
    assert run.by_name("provisioned")["status"] == "passed", run.by_name("provisioned")
    given, plain = sorted(bodies, key=lambda b: "files" not in b["forwardedProps"])
    assert given["forwardedProps"] == {
        "env": {"FEATURE": "on"},
        "provisioned": PROVISIONED,
        "files": FILES,
    }
    assert plain["forwardedProps"] == {"env": {}}


async def _chat_answer(_: web.Request) -> web.StreamResponse:
    return web.json_response({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})


async def test_openai_compatible_agents_get_them_as_body_fields(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    async with serving(_recorder(bodies, _chat_answer), path="/v1/chat/completions") as url:
        base = url.removesuffix("/chat/completions")
        run = await run_cli(_suite(write_suite, url), "--agent", f"openai+{base}", "--no-ledger")
    assert run.by_name("provisioned")["status"] == "passed", run.by_name("provisioned")
    given, plain = sorted(bodies, key=lambda b: "files" not in b)
    assert given["metadata"] == {"FEATURE": "on"}
    assert (given["provisioned"], given["files"]) == (PROVISIONED, FILES)
    assert sorted(plain) == ["messages", "model"]


AGENT = """
import json, os, pathlib, sys
request = json.load(sys.stdin)
files_dir = os.environ.get("AGENT_HEALTH_FILES_DIR")
found = {}
if files_dir:
    root = pathlib.Path(files_dir)
    found = {str(p.relative_to(root)): p.read_bytes().hex() for p in root.rglob("*") if p.is_file()}
seen = {
    "stdin_provisioned": request.get("provisioned"),
    "stdin_files": request.get("files"),
    "env_provisioned": json.loads(os.environ.get("AGENT_HEALTH_PROVISIONED", "null")),
    "feature": os.environ.get("FEATURE"),
    "files_dir": files_dir,
    "files": found,
}
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(seen) + "\\n")
print(json.dumps({"output": "ok", "trajectory": []}))
"""


async def test_subprocess_agents_get_a_files_dir_and_json_in_the_environment(
    write_suite: Any, tmp_path: Path
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    log = tmp_path / "seen.jsonl"
    suite = _suite(write_suite, "http://127.0.0.1:9/unused")
    run = await run_cli(suite, "--agent", f"cmd:{sys.executable} {script} {log}", "--no-ledger")
    assert run.by_name("provisioned")["status"] == "passed", run.by_name("provisioned")
    seen = sorted(
        (json.loads(line) for line in log.read_text().splitlines()), key=lambda s: not s["files"]
    )
    given, plain = seen
    assert given["stdin_provisioned"] == given["env_provisioned"] == PROVISIONED
    assert given["stdin_files"] == FILES
    assert given["feature"] == "on"
    assert given["files"] == {"notes/runbook.md": b"restart db-primary".hex(), "blob.bin": "00ff"}
    assert not await asyncio.to_thread(Path(given["files_dir"]).exists)  # removed at the end
    assert (plain["files_dir"], plain["env_provisioned"], plain["stdin_files"]) == (
        None,
        None,
        None,
    )


async def test_bad_provisioning_is_a_clear_error_naming_the_entry(write_suite: Any) -> None:
    bodies: list[dict[str, Any]] = []
    async with serving(_recorder(bodies, _rest_answer)) as url:
        run = await run_cli(_suite(write_suite, url, BAD), "--no-ledger")
    assert bodies == []  # nothing reached the agent
    expected = {
        "escaping path": "entry '../etc/passwd': use a relative path",
        "absolute path": "entry '/etc/passwd': use a relative path",
        "not json": "value 'when' is not plain JSON",
        "structured env": "'PORT' is not (pass structured values as provisioned=...)",
    }
    for name, message in expected.items():
        test = run.by_name(name)
        assert (test["status"], test["cause"]) == ("errored", "test"), name
        assert message in test["error"], (name, test["error"])
        assert f"test {name!r}" in test["error"]


def test_a_run_of_a_prompt_alone_checks_no_part_it_left_out(
    write_suite: Any, monkeypatch: Any
) -> None:
    """``agent.run("ping")`` — most calls — gives no context, env, files, provisioned
    values, tools or turns: none of their checks runs (issue #40), and the request carries
    their empty values as before."""
    from agent_health.sdk import agent, conversation
    from support.helpers import INPROC_CONFIG, run_cli_sync

    def unexpected(*_: Any) -> Any:
        raise AssertionError("a part the call left out was checked")

    for name in ("_context_items", "_files", "_provisioned", "_tools"):
        monkeypatch.setattr(agent, name, unexpected)
    monkeypatch.setattr(conversation, "scripted", unexpected)
    monkeypatch.setattr(conversation, "turn_limit", unexpected)
    config = INPROC_CONFIG.replace(
        "    async def run(self, request):\n",
        "    async def run(self, request):\n"
        "        (Path(__file__).parent / 'seen.json').write_text(request.model_dump_json())\n",
    ).replace("from agent_health import", "from pathlib import Path\n\nfrom agent_health import")
    suite = write_suite(
        **{
            "agent-health.config.py": config,
            "test_one.py": """
            from agent_health import test

            @test("one")
            async def one(agent, expect):
                result = await agent.run("ping")
                expect(result.output).to_equal("pong")
            """,
        }
    )
    run = run_cli_sync(suite, "--agent", "a", "--no-history")
    assert run.code == 0, run.report
    request = json.loads((suite / "seen.json").read_text())
    assert {k: request[k] for k in ("context", "env", "files", "provisioned", "tools")} == {
        "context": [],
        "env": {},
        "files": [],
        "provisioned": {},
        "tools": [],
    }
    assert request.get("conversation", False) is False
