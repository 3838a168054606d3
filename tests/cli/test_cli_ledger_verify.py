"""``ledger verify`` finds the key a local run wrote beside its ledger, and the command a run
prints works as printed, from where the user ran it, however they invoked agent-health."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from agent_health import cli
from agent_health.cli import common

ROOT = Path(__file__).resolve().parents[2]
# A test records a ledger cell when it runs the agent: the example agent as a subprocess.
AGENT = f"cmd:{sys.executable} {ROOT / 'examples' / 'agents' / 'triage_cli.py'}"
SUITE = """
from agent_health import test

@test("one")
async def one(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result.output).to_contain("db-primary")
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_HEALTH_LEDGER_KEY"}
    # A PATH without the venv: agent-health is not on it, as for a user after `make demo`.
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    return env


@pytest.mark.slow
@pytest.mark.parametrize("how", ["module", "script"])
def test_the_printed_verify_command_runs_as_printed(tmp_path: Path, how: str) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text(SUITE)
    where = tmp_path / "elsewhere"  # not the suite's folder: paths must hold from here
    where.mkdir()
    script = ROOT / ".venv" / "bin" / "agent-health"
    if how == "script" and not script.exists():
        pytest.skip("no .venv/bin/agent-health in this checkout")
    program = (
        [sys.executable, "-m", "agent_health.cli"]
        if how == "module"
        else [os.path.relpath(script, where)]
    )
    ran = subprocess.run(
        [*program, "run", os.path.relpath(suite, where), "--agent", AGENT],
        cwd=where,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    printed = re.search(r"check it with: (.+)$", ran.stdout, re.MULTILINE)
    assert printed, ran.stdout
    command = shlex.split(printed[1])
    assert command[: len(program)] == program  # as the user can invoke it
    assert "--key-file" not in command  # the key is found beside the ledger
    checked = subprocess.run(
        command, cwd=where, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr
    # the ledger is the suite's (beside its first path, there being no config), not here's
    key_dir = suite / ".agent-health" / "ledger"
    assert f"1 cells verified (run file sealed) with the key file {key_dir}/" in checked.stdout
    assert not (where / ".agent-health").exists()


def test_verify_finds_the_key_beside_the_ledger_given_its_folder_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENT_HEALTH_LEDGER_KEY", raising=False)
    (tmp_path / "test_one.py").write_text(SUITE)
    ledger = tmp_path / "runs" / "first"
    assert cli.main(["run", str(tmp_path), "--agent", AGENT, "--ledger", f"file://{ledger}"]) == 0
    assert (tmp_path / "runs" / "first.key").is_file()
    [run_file] = list(ledger.rglob("*.jsonl"))
    assert cli.main(["ledger", "verify", str(ledger)]) == 0
    assert cli.main(["ledger", "verify", str(run_file)]) == 0
    assert cli.main(["grade", f"file://{ledger}"]) == 0
    capsys.readouterr()
    # Without the key beside it, the error says where a local run puts it.
    (tmp_path / "runs" / "first.key").rename(tmp_path / "elsewhere.key")
    assert cli.main(["ledger", "verify", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert "--key-file" in err
    assert "DIR.key beside its ledger DIR" in err
    assert cli.main(["ledger", "verify", str(ledger), "--key-file", "elsewhere.key"]) == 0


def test_invocation_names_the_command_as_the_user_can_type_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "agent-health"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert common.invocation(str(tool), sys.executable) == "agent-health"  # on PATH
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert common.invocation("../bin/agent-health", sys.executable) == "../bin/agent-health"
    module = common.invocation("/x/agent_health/cli/__main__.py", sys.executable)
    assert module == f"{shlex.quote(sys.executable)} -m agent_health.cli"
    assert common.invocation("/odd path/agent-health", sys.executable) == "'/odd path/agent-health'"
