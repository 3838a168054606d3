"""The connector table: built-in kinds, user kinds from the config, and the --agent forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import agui, errors, openai_chat, rest, subprocess
from support.helpers import run_cli_sync


def test_builtin_kinds() -> None:
    assert connectors.known() == ["agui", "openai", "rest", "subprocess"]
    url = "http://127.0.0.1:9/x"
    made = {
        kind: connectors.create(connectors.ConnectorSpec(connector=kind, url=url))
        for kind in ("rest", "agui", "openai")
    }
    assert isinstance(made["rest"], rest.RestConnector)
    assert isinstance(made["agui"], agui.AguiConnector)
    assert isinstance(made["openai"], openai_chat.OpenAIChatConnector)
    cmd = connectors.create(connectors.ConnectorSpec.parse("cmd:python agent.py"))
    assert isinstance(cmd, subprocess.SubprocessConnector)
    for conn in [*made.values(), cmd]:
        assert isinstance(conn, connectors.Connector)


@pytest.mark.parametrize(
    ("value", "kind", "url"),
    [
        ("rest+http://h:1/run", "rest", "http://h:1/run"),
        ("agui+http://h:1/agui", "agui", "http://h:1/agui"),
        ("openai+https://h/v1", "openai", "https://h/v1"),
        ("http://h:1/run", "rest", "http://h:1/run"),
    ],
)
def test_url_forms(value: str, kind: str, url: str) -> None:
    spec = connectors.ConnectorSpec.parse(value)
    assert (spec.connector, spec.url) == (kind, url)


def test_user_kinds_win_and_unknown_kinds_are_named() -> None:
    class Mine:
        def __init__(self, spec: connectors.ConnectorSpec) -> None:
            self.spec = spec

        async def run(self, request: connectors.AgentRequest) -> connectors.AgentReply:
            return connectors.AgentReply(output=request.prompt)

        async def aclose(self) -> None:
            return None

    extra = connectors.register("rest", Mine)
    made = connectors.create(connectors.ConnectorSpec(url="http://h/run"), extra)
    assert isinstance(made, Mine)
    assert connectors.known({"zeta": Mine}) == ["agui", "openai", "rest", "subprocess", "zeta"]
    with pytest.raises(
        errors.ConnectorConfigError,
        match="unknown connector 'nope'; known: agui, openai, rest, subprocess, zeta",
    ):
        connectors.create(connectors.ConnectorSpec(connector="nope"), {"zeta": Mine})


CONFIG = '''
from agent_health import define_config
from agent_health.connectors import AgentReply, Step


class Scripted:
    """A user's own connector: answers from its options, records what it was sent."""

    def __init__(self, spec):
        self.tool = spec.options["tool"]

    async def run(self, request):
        return AgentReply(
            output=f"scripted answer to: {request.prompt}",
            trajectory=(
                Step(type="tool_call", tool_name=self.tool, tool_args={"run": request.run_id}),
                Step(type="tool_result", tool_name=self.tool, tool_output="ok", status="ok"),
            ),
        )

    async def aclose(self):
        return None


config = define_config(
    connectors={"scripted": Scripted},
    agents={"mine": {"connector": "scripted", "options": {"tool": "lookup"}}},
    default_agent="mine",
)
'''

SUITE = """
from agent_health import test


@test("user connector")
async def user_connector(agent, expect):
    result = await agent.run("hello")
    expect(result).to_have_called_tool("lookup")
    expect(result.output).to_equal("scripted answer to: hello")
"""


def test_user_defined_connector_from_the_config_file(write_suite: Any) -> None:
    suite: Path = write_suite(**{"agent-health.config.py": CONFIG, "test_mine.py": SUITE})
    run = run_cli_sync(suite)
    assert run.code == 0, run.report
    assert run.by_name("user connector")["status"] == "passed"


def test_unknown_connector_in_the_config_is_a_usage_error(write_suite: Any, capsys: Any) -> None:
    config = CONFIG.replace('"connector": "scripted"', '"connector": "missing"')
    suite: Path = write_suite(**{"agent-health.config.py": config, "test_mine.py": SUITE})
    run = run_cli_sync(suite)
    assert run.code == 2
    assert "unknown connector 'missing'" in capsys.readouterr().err
