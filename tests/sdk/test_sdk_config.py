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


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"judge": {}}, "judge.model: Field required"),
        ({"judge": 5}, "judge: Input should be a valid dictionary or instance of JudgeConfig"),
        (
            {"judge": {"model": "m", "retry": {"max_attempts": 0}}},
            "judge.retry.max_attempts: Input should be greater than or equal to 1",
        ),
        ({"peers": {"time": {"url": "ftp://x"}}}, "peers.time.url: String should match pattern"),
        (
            {"peers": {"time": {"command": "x y", "protocol": "http"}}},
            "peers.time: Value error, a command is an MCP server over stdio: protocol must be mcp",
        ),
        ({"peers": {"time": {"url": "http://x", "lisen": "1"}}}, "did you mean 'listen'?"),
        ({"peers": {"Bad_Name": {"url": "http://x"}}}, "peers.Bad_Name.[key]: String should"),
        (
            {"traces": {"enabled": "x"}},
            "traces.enabled.bool: Input should be a valid boolean, unable to interpret input; "
            "traces.enabled.list[str]: Input should be a valid list",
        ),
        ({"traces": {"opensearch": {"hosts": ["h"], "indx": "x"}}}, "did you mean 'index'?"),
        ({"traces": 7}, "traces: Input should be a valid dictionary or instance of TracesSettings"),
        ({"prices": {"m": {"input_per_mtok": 1}}}, "prices.m.output_per_mtok: Field required"),
        ({"prices": {"m": {"input_per_mtok": 1, "output_per_mtok": 2, "x": 1}}}, "known keys:"),
        ({"otlp": {"protocol": "grpc"}}, "otlp.protocol: Input should be 'http/protobuf' or"),
        (
            {"otlp": "http://x"},
            "otlp: Input should be a valid dictionary or instance of OtlpConfig",
        ),
    ],
)
def test_a_section_s_mistake_is_told_at_its_place(config: dict[str, Any], says: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        define_config(**config)
    assert says in str(caught.value)


def test_the_config_s_validator_holds_no_schema_of_a_section_until_a_config_gives_it() -> None:
    from agent_health.sdk import config as config_mod
    from agent_health.sdk import otlpconfig, tracesconfig

    # A section is validated by its own model (config._OnFirstUse): a config without it
    # compiles none of its schema (about 9 M instructions of a run of one test, issue #40).
    config_mod.Config.model_rebuild(force=True)
    schema = repr(config_mod.Config.__pydantic_core_schema__)
    sections = (
        config_mod.JudgeConfig,
        config_mod.RetryConfig,
        config_mod.PeerSpec,
        tracesconfig.TracesSettings,
        tracesconfig.OpenSearchSettings,
        tracesconfig.OtlpSettings,
        tracesconfig.Price,
        otlpconfig.OtlpConfig,
    )
    assert "ConnectorSpec" in schema  # the agents: in every config that reaches one
    assert [m.__name__ for m in sections if m.__name__ in schema] == []
    judge = config_mod.JudgeConfig(model="m")
    given = define_config(judge=judge, otlp={"endpoint": "http://127.0.0.1:4318"})
    assert given.judge is judge  # an instance is taken as it is, as a model field takes one
    assert given.otlp == otlpconfig.OtlpConfig(endpoint="http://127.0.0.1:4318")


def test_a_runs_environment_merges_the_price_table_once_for_every_test() -> None:
    from agent_health.engine import running

    config = define_config(
        prices={"default": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}},
        traces={"prices": {"m": {"input_per_mtok": 3.0, "output_per_mtok": 4.0}}},
    )
    env = running.RunEnv(config=config)
    assert env.prices.price("m") == config.price_table().price("m")  # merged where read
    merged = env.with_prices()
    assert merged.prices is merged.prices  # once, not at each test's read
    assert merged.prices.price("other") == config.price_table().price("other")
    lane = merged._replace(lane="b")  # an agent matrix's lane shares it
    assert lane.prices is merged.prices
    assert running.RunEnv().prices.price("m") is None
