"""Run the real CLI in a worker thread (it owns its own event loop) and read its report."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_health import cli


@dataclass
class Run:
    code: int
    report: dict[str, Any]

    def by_name(self, name: str) -> dict[str, Any]:
        matches = [t for t in self.report["tests"] if t["name"] == name]
        assert matches, f"no test named {name!r} in {[t['name'] for t in self.report['tests']]}"
        return matches[0]


def run_cli_sync(suite: Path, *args: str) -> Run:
    out = (suite if suite.is_dir() else suite.parent) / ".report.json"
    out.unlink(missing_ok=True)
    code = cli.main(["run", str(suite), "--reporter", f"json:{out}", *args])
    report = json.loads(out.read_text()) if out.exists() else {}
    return Run(code, report)


async def run_cli(suite: Path, *args: str) -> Run:
    return await asyncio.to_thread(run_cli_sync, suite, *args)


# A suite of one test against an in-process agent (a connector in its config): a run that
# starts no server.
ONE_TEST = """
from agent_health import test


@test("one", default_prompt="ping")
async def one(agent, expect):
    result = await agent.run()
    expect(result.output).to_equal("pong")
"""
INPROC_CONFIG = """
from agent_health import define_config
from agent_health.connectors import AgentReply


class Inproc:
    def __init__(self, spec):
        pass

    async def run(self, request):
        return AgentReply(output="pong")

    async def aclose(self):
        pass


config = define_config(connectors={"inproc": Inproc}, agents={"a": {"connector": "inproc"}})
"""
