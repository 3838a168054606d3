"""``define_config``: a typo gets "did you mean"; an agent's ``command`` may be one string."""

from __future__ import annotations

import json
import subprocess
import sys
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


def test_the_defaults_of_traces_and_otlp_are_what_validating_nothing_makes() -> None:
    from agent_health.sdk import otlpconfig, tracesconfig

    # The config's defaults are made without validation (model_construct, below): the same
    # values, fields and equality as the validated ones, read the same way.
    config = define_config()
    assert config.traces == tracesconfig.TracesSettings.model_validate({})
    assert config.traces.otlp == tracesconfig.OtlpSettings.model_validate({})
    assert config.traces.model_fields_set == set()
    assert config.traces.model_dump() == tracesconfig.TracesSettings.model_validate({}).model_dump()
    given = define_config(traces={"otlp": {"listen": "127.0.0.1:4318"}})
    assert given.traces.otlp.listen == "127.0.0.1:4318"
    assert given.traces.otlp.max_spans == 2000
    url = "http://127.0.0.1:4318"
    resolved = otlpconfig.resolve(url, None, {})
    assert resolved == otlpconfig.resolve(url, otlpconfig.OtlpConfig.model_validate({}), {})


def test_a_config_without_traces_or_otlp_builds_no_validator_of_theirs() -> None:
    # Their defaults need none: a run whose config gives no traces and no otlp builds only
    # the config's own validator (about 6.6 M instructions of a run of one test, issue #40).
    code = (
        "import json\n"
        "from agent_health import define_config\n"
        "from agent_health.sdk import otlpconfig, tracesconfig\n"
        "config = define_config(agents={'a': {'url': 'http://127.0.0.1:9/run'}})\n"
        "otlpconfig.resolve('http://127.0.0.1:4318', config.otlp, {})\n"
        "models = (tracesconfig.TracesSettings, tracesconfig.OtlpSettings, otlpconfig.OtlpConfig)\n"
        "print(json.dumps([m.__name__ for m in models if m.__pydantic_complete__]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []
