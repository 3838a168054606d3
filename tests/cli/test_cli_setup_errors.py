"""What a new user meets first: a missing agent or a missing extra is one line and exit 2.

Each command runs as a real ``agent-health`` process. A missing extra is made missing the way
an install without it is: the subprocess blocks its modules (``sys.modules[name] = None``,
so ``import`` raises ``ModuleNotFoundError``) before it runs the CLI; none of our code is
patched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRIAGE = ROOT / "examples" / "agents" / "triage_cli.py"
AGENT_TESTS = """
from agent_health import test

@test("diagnoses", default_prompt="Why is the payment service failing?")
async def diagnoses(agent, expect):
    result = await agent.run()
    expect(result).to_have_called_tool("search_logs")
"""
DATA_TESTS = """
from agent_health import test

@test("adds up")
async def adds(expect):
    expect(2 + 2).to_equal(4)
"""
FIXTURE_TESTS = """
from agent_health import test

async def answer(agent):
    yield await agent.run("ping")

test = test.extend(answer=answer)

@test("reads the answer through a fixture")
async def through(answer, expect):
    expect(answer.output).to_contain("")

@test.skip("skipped, so it needs nothing")
async def later(agent):
    await agent.run("ping")
"""


def agent_health(
    args: list[str], cwd: Path, *, blocked: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agent-health ARGS`` in a fresh interpreter in which ``blocked`` cannot be imported."""
    code = (
        "import sys\n"
        f"for name in {list(blocked)!r}:\n"
        "    sys.modules[name] = None\n"
        "from agent_health.cli import app\n"
        f"sys.exit(app.main({args!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=300,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# -- no agent --------------------------------------------------------------------------------


def test_a_run_with_no_agent_is_a_usage_error_before_any_test_runs(tmp_path: Path) -> None:
    (tmp_path / "test_agent.py").write_text(AGENT_TESTS)
    (tmp_path / "test_data.py").write_text(DATA_TESTS)
    (tmp_path / "test_more.cases.json").write_text(
        '[{"name": "a case", "category": "RCA", "difficulty": "Easy", "initialPrompt": "hi",'
        ' "expectedOutcomes": ["greets"]}]'
    )
    done = agent_health(["run", "."], tmp_path)
    line = one_error_line(done)
    assert line.startswith("error: no agent to run: 2 of 3 selected tests take the agent fixture")
    assert "--agent NAME|URL" in line
    assert "agent-health.config.py" in line
    assert done.stdout == ""  # no test ran, no summary
    assert not (tmp_path / ".agent-health").exists()  # nothing recorded either

    # Discovery needs no agent.
    listed = agent_health(["run", ".", "--list"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "3 tests in 3 files" in listed.stdout
    listed = agent_health(["list", "."], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "test_agent.py::diagnoses" in listed.stdout


def test_tests_that_take_no_agent_run_without_one(tmp_path: Path) -> None:
    (tmp_path / "test_data.py").write_text(DATA_TESTS)
    done = agent_health(["run", ".", "--no-ledger"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_an_agent_asked_for_through_a_fixture_counts_and_a_skipped_test_does_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_fixture.py").write_text(FIXTURE_TESTS)
    line = one_error_line(agent_health(["run", "."], tmp_path))
    assert "1 of 2 selected tests take the agent fixture" in line
    assert "test_fixture.py::reads the answer through a fixture" in line
    # --grep leaves the skipped test alone: it needs no agent.
    done = agent_health(["run", ".", "--grep", "skipped", "--no-ledger"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    # With an agent, the same suite runs.
    agent = f"cmd:{sys.executable} {TRIAGE}"
    done = agent_health(["run", ".", "--agent", agent, "--no-ledger"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


# -- missing extras --------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["kopf", "prometheus_client", "re2"])
@pytest.mark.parametrize("args", [["operator", "--help"], ["operator"]])
def test_the_operator_without_its_extra_says_which_to_install(
    tmp_path: Path, module: str, args: list[str]
) -> None:
    line = one_error_line(agent_health(args, tmp_path, blocked=(module,)))
    assert line == (
        f"error: agent-health operator needs the operator extra (no module {module!r}): "
        "pip install 'agent-health[operator]'"
    )


def test_operator_help_with_its_extra_lists_the_flags(tmp_path: Path) -> None:
    done = agent_health(["operator", "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: agent-health operator")


@pytest.mark.parametrize(
    ("url", "blocked", "extra", "module"),
    [
        ("s3://ledgers/run-1", ("s3fs",), "s3", "s3fs"),
        ("gs://ledgers/run-1", ("gcsfs",), "gcs", "gcsfs"),
        ("gs://ledgers/run-1", ("fsspec",), "gcs", "fsspec"),
    ],
)
def test_an_object_store_ledger_without_its_extra_says_which_to_install(
    tmp_path: Path, url: str, blocked: tuple[str, ...], extra: str, module: str
) -> None:
    (tmp_path / "test_agent.py").write_text(AGENT_TESTS)
    wanted = (
        f"error: ledger {url} needs the {extra} extra (no module {module!r}): "
        f"pip install 'agent-health[{extra}]'"
    )
    agent = f"cmd:{sys.executable} {TRIAGE}"
    done = agent_health(["run", ".", "--agent", agent, "--ledger", url], tmp_path, blocked=blocked)
    assert one_error_line(done) == wanted
    assert done.stdout == ""  # before any test ran
    key = {"AGENT_HEALTH_LEDGER_KEY": "k" * 44}
    for command in (["ledger", "verify", url], ["grade", url]):
        assert one_error_line(agent_health(command, tmp_path, blocked=blocked, env=key)) == wanted
    replay = agent_health(["run", ".", "--replay", url], tmp_path, blocked=blocked)
    assert one_error_line(replay).endswith(wanted.removeprefix("error: "))
    # The gateway (a sidecar) says it at its start too, in its log, rather than at its first
    # append.
    route = "principal=controller,to=target,listen=127.0.0.1:0,upstream=http://127.0.0.1:9"
    command = ["gateway", "--route", route, "--ledger", url]
    sidecar = agent_health(command, tmp_path, blocked=blocked, env=key)
    assert sidecar.returncode == 2, sidecar.stderr
    assert "Traceback" not in sidecar.stderr
    assert sidecar.stderr.rstrip().endswith(wanted.removeprefix("error: "))


def test_opensearch_traces_without_their_extra_say_which_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_data.py").write_text(DATA_TESTS)
    (tmp_path / "agent-health.config.py").write_text(
        textwrap.dedent(
            """
            from agent_health import define_config
            config = define_config(traces={"opensearch": {"hosts": ["http://127.0.0.1:9"]}})
            """
        )
    )
    done = agent_health(["run", ".", "--no-ledger"], tmp_path, blocked=("opensearchpy",))
    assert one_error_line(done) == (
        "error: traces.opensearch in the config needs the opensearch extra (no module "
        "'opensearchpy'): pip install 'agent-health[opensearch]'"
    )
    assert done.stdout == ""
    assert agent_health(["run", ".", "--no-ledger"], tmp_path).returncode == 0


def test_a_bedrock_judge_without_its_extra_says_which_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_data.py").write_text(DATA_TESTS)
    (tmp_path / "agent-health.config.py").write_text(
        textwrap.dedent(
            """
            from agent_health import define_config
            config = define_config(
                judge={"provider": "bedrock", "model": "m", "region": "us-east-1"}
            )
            """
        )
    )
    aws = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
    done = agent_health(["run", ".", "--no-ledger"], tmp_path, blocked=("botocore",), env=aws)
    line = one_error_line(done)
    assert line.endswith("pip install 'agent-health[bedrock]'"), line
    assert "judge.provider 'bedrock' needs botocore" in line
    assert done.stdout == ""


def _run_flags(*argv: str) -> object:
    import argparse

    from agent_health.cli.run import flags

    parser = argparse.ArgumentParser()
    flags.add_command(parser.add_subparsers())
    return parser.parse_args(["run", *argv])


def test_the_run_request_is_the_flags_checked_in_one_place() -> None:
    """``run``'s flags become one RunRequest before anything loads: each value checked, a
    replay's repeats when --repeat is not given, the reporters and the shard parsed."""
    from agent_health.cli import common
    from agent_health.cli.run import request

    made = request.RunRequest.of(
        _run_flags("-j", "3", "--repeat", "2", "--reporter", "json:r.json", "--shard", "1/2"),
        None,
    )
    assert (made.concurrency, made.repeat, made.shard) == (3, 2, (1, 2))
    assert made.outputs == [("json", Path("r.json"))]
    assert (made.limits, made.timeout, made.no_ledger) == (None, None, False)
    with pytest.raises(AttributeError):
        made.repeat = 5  # type: ignore[misc]  # frozen: the run reads it, never changes it
    for argv, said in [
        (("-j", "0"), "-j/--concurrency must be at least 1"),
        (("--repeat", "0"), "--repeat must be from 1 to"),
        (("--retries", "-1"), "--retries must be 0 or more"),
        (("--max-failures", "0"), "--max-failures must be at least 1"),
        (("--max-cost", "nan"), "--max-cost must be positive and finite"),
        (("--ledger", "file:///x", "--no-ledger"), "contradict each other"),
    ]:
        with pytest.raises(common.UsageError, match=said):
            request.RunRequest.of(_run_flags(*argv), None)
