"""A pooled (warm) cell end to end, every part its own process as in the pod: the example
agent (the target) and its log-server peer start first and are ready, the gateway listens
unassigned, the controller (``agent-health cell --assignment FILE``) waits; the assignment
comes, and the controller runs the test it names through the gateway, as a cold cell does
(test_examples_peer.py), into the assigned ledger cell the run key verifies."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from agent_health.cluster.grading import grading
from agent_health.engine.controller import warmcell
from agent_health.gateway import config
from agent_health.ledger import assignment, backends, keys, records
from support import pooled_support
from support.hostile_support import free_port
from support.pooled_support import CELL, LEDGER_CELL, RUN_KEY, SANDBOX_KEY_ENV, UNASSIGNED

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "examples" / "agents"
QUICKSTART = ROOT / "examples" / "01-quickstart" / "test_triage.py"
PAYMENT = "test_cell.py::payment RCA names the DB outage"
CONTROLLER_TOKEN = "controller-token-of-the-sandbox-91b7e3"
PEER_TOKEN = "peer-logs-token-of-the-sandbox-2c6d08"


@contextlib.asynccontextmanager
async def _example(script: str, port: int, *args: str, **env: str) -> AsyncIterator[None]:
    """An example program on ``port``, once its port answers; stopped on the way out."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENTS / script), "--port", str(port), *args,
        env=pooled_support.environment(**env), stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient() as client:
            while True:
                assert proc.returncode is None, f"{script} exited"
                with contextlib.suppress(httpx.HTTPError):
                    await client.get(f"http://127.0.0.1:{port}/healthz")
                    break
                await asyncio.sleep(0.05)
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_a_pooled_cell_waits_for_its_assignment_then_runs_the_assigned_test(
    tmp_path: Path,
) -> None:
    ports = {n: free_port() for n in ("agent", "logs", "controller", "peer", "admin", "judge")}
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_cell.py").write_text(QUICKSTART.read_text())
    file = tmp_path / "assignment.json"
    peer_route = f"http://127.0.0.1:{ports['peer']}"
    gateway_args = [
        "--route",
        f"principal=controller,listen=127.0.0.1:{ports['controller']},"
        f"upstream=http://127.0.0.1:{ports['agent']}",
        "--route",
        f"principal=target,to=peer:logs,listen=127.0.0.1:{ports['peer']},"
        f"upstream=http://127.0.0.1:{ports['logs']}",
        "--admin", f"127.0.0.1:{ports['admin']}",
        "--ledger", f"file://{tmp_path / 'ledger'}",
        "--assignment", str(file),
        "--sandbox-key-env", SANDBOX_KEY_ENV,
        "--token", "controller=env:AGENT_HEALTH_CONTROLLER_TOKEN",
        "--token", "peer:logs=env:AGENT_HEALTH_PEER_TOKEN",
        "--grace", "5",
    ]  # fmt: skip
    gateway_env = pooled_support.gateway_environment(
        AGENT_HEALTH_CONTROLLER_TOKEN=CONTROLLER_TOKEN, AGENT_HEALTH_PEER_TOKEN=PEER_TOKEN
    )
    # The controller's environment, as a pooled pod's: its token as a value, and a judge URL
    # that nothing answers, which the assignment (no judge model) must leave unused.
    controller_env = pooled_support.environment(
        AGENT_HEALTH_AGENT_URL=f"rest+http://127.0.0.1:{ports['controller']}/run",
        AGENT_HEALTH_TOKEN=CONTROLLER_TOKEN,
        AGENT_HEALTH_GATEWAY_ADMIN=f"http://127.0.0.1:{ports['admin']}",
        AGENT_HEALTH_JUDGE_URL=f"http://127.0.0.1:{ports['judge']}",
        AGENT_HEALTH_JUDGE_CACHE=str(tmp_path / "judge.sqlite"),
    )
    async with (
        _example("log_server.py", ports["logs"], AGENT_HEALTH_TOKEN=PEER_TOKEN),
        _example("triage_agent.py", ports["agent"], "--tools-url", peer_route),
    ):
        gateway = await pooled_support.start_gateway(gateway_args, gateway_env)
        admin = f"http://127.0.0.1:{ports['admin']}/healthz"
        async with pooled_support.healthy(gateway, admin), httpx.AsyncClient() as client:
            # The warm target's calls to its peer before the assignment: 503, unrecorded.
            early = await client.get(f"{peer_route}/search_logs", params={"service": "db"})
            assert early.status_code == 503
            assert UNASSIGNED in early.json()["error"]
            # The peer refuses a caller without its token (the target calling it directly).
            direct = await client.get(f"http://127.0.0.1:{ports['logs']}/search_logs")
            assert direct.status_code == 403
            controller = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agent_health.cli", "cell",
                "--assignment", str(file), "--suite", str(suite),
                env=controller_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            assert controller.stderr is not None
            waiting = await controller.stderr.readline()
            assert b"waiting for the cell's assignment" in waiting
            assert controller.returncode is None
            found = pooled_support.assigned(PAYMENT, repeat=1)
            pooled_support.assign(file, found.annotation())
            out, err = await controller.communicate()
            assert controller.returncode == 0, err.decode()
    reported = json.loads(out.decode().strip().splitlines()[-1])
    assert reported | {"score": None} == {
        "test": PAYMENT, "repeat": 1, "status": "passed", "score": None, "error": None,
        "run_id": CELL,
    }  # fmt: skip
    lines = (tmp_path / "ledger" / f"{LEDGER_CELL}.jsonl").read_text().splitlines()
    found_records = records.parse_lines(lines)
    exchanges = [r for r in found_records if isinstance(r, records.Exchange)]
    edges = {(e.principal, e.upstream, e.evidence) for e in exchanges}
    assert edges == {
        ("controller", "target", config.token_id(CONTROLLER_TOKEN)),
        ("target", "peer:logs", config.NO_TOKEN),
    }
    assert all(e.status == 200 for e in exchanges)
    assert found_records[-1].kind == "cell-end"
    checked = pooled_support.verify(tmp_path / "ledger", RUN_KEY, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    graded = await grading.grade_cell(
        backends.from_url(f"file://{tmp_path / 'ledger'}"),
        LEDGER_CELL,
        keys.cell_key(RUN_KEY, LEDGER_CELL),
        grading.ExpectedCell(test_id=PAYMENT, repeat=1, run_id=CELL),
    )
    assert graded.status == "passed", graded.error


def test_the_assignment_gives_what_the_environment_gives_a_cold_cell(tmp_path: Path) -> None:
    env = {
        "AGENT_HEALTH_AGENT_URL": "rest+http://127.0.0.1:15001/run",
        "AGENT_HEALTH_TOKEN": " the-controller-token\n",
        "AGENT_HEALTH_JUDGE_URL": "http://127.0.0.1:15003",
        "AGENT_HEALTH_SKIP_JUDGE": "1",  # the pool's template is no cell's: the assignment rules
    }
    judged = pooled_support.assigned(PAYMENT, repeat=3, judge_model="m-large")
    settings = warmcell.settings(judged, suite=tmp_path, environ=env)
    assert (settings.test_id, settings.repeat, settings.run_id) == (PAYMENT, 3, CELL)
    assert (settings.evaluation_run, settings.timeout, settings.matrix_agent) == (
        "evalrun-9", 120, "triage",
    )  # fmt: skip
    assert (settings.judge_url, settings.judge_model, settings.skip_judge) == (
        "http://127.0.0.1:15003", "m-large", False,
    )  # fmt: skip
    assert settings.token == "the-controller-token"
    unjudged = warmcell.settings(pooled_support.assigned(PAYMENT), suite=tmp_path, environ=env)
    assert unjudged.judge_url is None


@pytest.mark.parametrize(
    ("text", "reason"), [('{"v": 1, "cell": "c"}', "field 'ledgerCell' must be a str")]
)
def test_a_malformed_assignment_ends_the_controller_with_its_reason(
    tmp_path: Path, text: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "assignment.json"
    file.write_text(text)
    assert warmcell.main(tmp_path, file) == 2
    err = capsys.readouterr().err
    assert reason in err
    assert str(file) in err
    with pytest.raises(assignment.AssignmentError):
        assignment.read(file)


@pytest.mark.parametrize(
    "args",
    [
        ["cell", "--assignment", "/a.json", "--test", "t.py::x"],
        ["cell", "--assignment", "/a.json", "--repeat", "1"],
        ["cell"],
    ],
)
def test_the_controller_takes_the_test_or_the_assignment_not_both(args: list[str]) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", *args],
        capture_output=True, text=True, timeout=120, env=pooled_support.environment(),
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "--assignment" in ran.stderr
    assert "--test" in ran.stderr
