"""An agent agent-health starts (``command`` in its config, or the subprocess connector)
inherits only an allow-list of agent-health's environment and what its config's ``env``
gives it: never the judge's key, the ledger's key or the OTLP export's headers. Through the
real CLI, with real agent processes that answer with the environment they were started in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli_sync

JUDGE_KEY = "sk-judge-4f8a2c91"
LEDGER_KEY = "ledger-key-7d3e55b0"
HEADERS = "x-honeycomb-team=hc-2b9f61aa"
AGENT_KEY = "sk-agent-0c1d2e3f"

HTTP_AGENT = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Agent(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        body = json.dumps({"output": json.dumps(dict(os.environ))}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Agent).serve_forever()
"""
COMMAND_AGENT = """
import json, os, sys
sys.stdin.read()
print(json.dumps({"output": json.dumps(dict(os.environ))}))
"""
SUITE = """
from agent_health import test


@test("says what it was started with", default_prompt="Which variables do you see?")
async def says(agent, expect):
    result = await agent.run()
    expect(result.output).to_contain("PATH")
"""
CONFIG = """
from agent_health import define_config

config = define_config(
    agents={{
        "served": {{
            "command": ["python", "http_agent.py", "{{port}}"],
            "url": "http://127.0.0.1:{{port}}/run",
            "env": {env},
        }},
        "command": {{
            "connector": "subprocess",
            "command": ["python", "command_agent.py"],
            "env": {env},
        }},
    }},
    judge={{"provider": "openai", "model": "m", "api_key_env": "JUDGE_OPENAI_KEY"}},
    otlp={{"headers_env": "EXPORT_HEADERS"}},
)
"""
GIVEN = '{"MODE": "test", "OPENAI_API_KEY": {"from_env": "RCA_OPENAI_KEY"}}'


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """agent-health's environment: credentials of its own, and a variable of the user's."""
    monkeypatch.setenv("JUDGE_OPENAI_KEY", JUDGE_KEY)
    monkeypatch.setenv("AGENT_HEALTH_LEDGER_KEY", LEDGER_KEY)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    monkeypatch.setenv("EXPORT_HEADERS", HEADERS)
    monkeypatch.setenv("RCA_OPENAI_KEY", AGENT_KEY)
    monkeypatch.setenv("SOME_SETTING_OF_THE_USERS", "anything")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    monkeypatch.setenv("AGENT_HEALTH_SKIP_JUDGE", "1")


def _suite(write_suite: Any, env: str = GIVEN) -> Path:
    return write_suite(
        **{
            "test_env.py": SUITE,
            "http_agent.py": HTTP_AGENT,
            "command_agent.py": COMMAND_AGENT,
            "agent-health.config.py": CONFIG.format(env=env),
        }
    )


@pytest.mark.parametrize("agent", ["served", "command"])
def test_a_started_agent_gets_an_allow_list_and_its_env_never_a_credential(
    write_suite: Any, environment: None, agent: str
) -> None:
    suite = _suite(write_suite)
    run = run_cli_sync(suite, "--agent", agent, "--no-ledger")
    assert run.code == 0, run.report
    seen = json.loads(run.by_name("says what it was started with")["output"])
    # None of agent-health's credentials, nor anything else of its environment ...
    for secret in (JUDGE_KEY, LEDGER_KEY, HEADERS):
        assert secret not in json.dumps(seen)
    assert "SOME_SETTING_OF_THE_USERS" not in seen
    assert not [name for name in seen if name.startswith("AGENT_HEALTH_") and "KEY" in name]
    # ... but what a program needs to run, and what its config gives it.
    assert seen["PATH"]
    assert seen["HOME"]
    assert seen["LC_TIME"] == "C"
    assert seen["https_proxy"] == "http://proxy.internal:3128"
    assert seen["MODE"] == "test"
    assert seen["OPENAI_API_KEY"] == AGENT_KEY
    if agent == "served":  # told where the run's own OTLP receiver listens
        assert seen["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://127.0.0.1:")
    else:  # what the subprocess protocol gives each run
        assert seen["AGENT_HEALTH_PROMPT"] == "Which variables do you see?"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            '{"OPENAI_API_KEY": {"from_env": "JUDGE_OPENAI_KEY"}}',
            "agents.served.env.OPENAI_API_KEY: from_env names $JUDGE_OPENAI_KEY, the judge's "
            "API key; an agent never gets agent-health's credentials",
        ),
        (
            '{"SIGNER": {"from_env": "AGENT_HEALTH_LEDGER_KEY"}}',
            "agents.served.env.SIGNER: from_env names $AGENT_HEALTH_LEDGER_KEY, the ledger's key",
        ),
        (
            '{"H": {"from_env": "EXPORT_HEADERS"}}',
            "agents.served.env.H: from_env names $EXPORT_HEADERS, the OTLP export's headers",
        ),
        (  # a value read in the config itself: the same key, by another name
            '{"OPENAI_API_KEY": __import__("os").environ["JUDGE_OPENAI_KEY"]}',
            "agents.served.env.OPENAI_API_KEY: its value is the judge's API key",
        ),
        (
            '{"OPENAI_API_KEY": {"from_env": "NOT_SET_ANYWHERE"}}',
            "agents.served.env.OPENAI_API_KEY: from_env names $NOT_SET_ANYWHERE, which is not set",
        ),
    ],
)
def test_an_env_that_would_hand_over_a_credential_stops_the_run_before_it_starts(
    write_suite: Any, environment: None, capsys: Any, env: str, says: str
) -> None:
    suite = _suite(write_suite, env)
    capsys.readouterr()
    run = run_cli_sync(suite, "--agent", "served", "--no-ledger")
    err = capsys.readouterr().err
    assert run.code == 2
    assert says in err
    assert run.report == {}  # no test ran, no agent started


def test_env_is_only_for_an_agent_agent_health_starts(
    write_suite: Any, environment: None, capsys: Any
) -> None:
    suite = write_suite(
        **{
            "test_env.py": SUITE,
            "agent-health.config.py": (
                "from agent_health import define_config\n"
                "config = define_config(agents={'remote': {'url': 'http://127.0.0.1:9/run',"
                " 'env': {'MODE': 'test'}}})\n"
            ),
        }
    )
    capsys.readouterr()
    run = run_cli_sync(suite, "--no-ledger")
    assert run.code == 2
    assert "env is for an agent agent-health starts" in capsys.readouterr().err
