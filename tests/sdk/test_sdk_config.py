"""``define_config``: a typo gets "did you mean"; an agent's ``command`` may be one string."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_health import cli, define_config
from agent_health.connectors.base import ConnectorSpec
from agent_health.sdk import errors


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"agnets": {}}, "agnets: unknown key 'agnets'; did you mean 'agents'?"),
        (
            {"agents": {"a": {"url": "http://x", "comand": ["x"]}}},
            "agents.a.comand: unknown key 'comand'; did you mean 'command'?",
        ),
        ({"judge": {"model": "m", "modle": "x"}}, "judge.modle: unknown key 'modle'; did you mean"),
        (
            {"judge": {"model": "m", "retry": {"max_atempts": 3}}},
            "judge.retry.max_atempts: unknown key 'max_atempts'; did you mean 'max_attempts'?",
        ),
        ({"zzz": 1}, "zzz: unknown key 'zzz'; known keys: agents, connectors, default_agent"),
    ],
)
def test_a_typo_gets_did_you_mean(config: dict[str, Any], says: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        define_config(**config)
    assert says in str(caught.value)


def test_a_typo_in_the_config_file_names_the_file_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agent-health.config.py").write_text(
        "from agent_health import define_config\n"
        "config = define_config(judge={'provider': 'openai', 'modle': 'gpt'})\n"
    )
    (tmp_path / "test_x.py").write_text(
        "from agent_health import test\n@test('x')\nasync def x():\n    pass\n"
    )
    assert cli.main(["run", str(tmp_path), "--no-ledger"]) == 2
    err = capsys.readouterr().err
    assert "agent-health.config.py:2" in err
    assert "did you mean 'model'?" in err


def test_a_command_string_is_split_as_a_shell_would() -> None:
    config = define_config(
        agents={
            "a": {"url": "http://127.0.0.1:{port}/run", "command": "python 'my agent.py' {port}"}
        }
    )
    assert config.agents["a"].command == ("python", "my agent.py", "{port}")
    listed = define_config(agents={"a": {"command": ["python", "my agent.py"]}})
    assert listed.agents["a"].command == ("python", "my agent.py")
    assert ConnectorSpec.parse("cmd:python 'my agent.py' --fast").command == (
        "python",
        "my agent.py",
        "--fast",
    )


def test_a_command_that_cannot_be_split_says_why() -> None:
    with pytest.raises(errors.ConfigError, match=r"agents\.a\.command: .*No closing quotation"):
        define_config(agents={"a": {"command": "python 'agent.py"}})
    with pytest.raises(errors.ConfigError, match=r"agents\.a\.command: .*is empty"):
        define_config(agents={"a": {"command": "  "}})
