"""A target that binds its gateway's ports while the kubelet restarts the gateway, to harvest
the controller's token (the gateway is a real ``python -m agent_health.gateway`` process, the
target its own process). The controller reaches the gateway only through Unix sockets in a
directory the target does not mount, so the target harvests nothing; the controller's calls
fail instead, and the restarted gateway marks the ledger, so the cell is errored (infra)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from agent_health.cluster.grading import grading
from agent_health.engine.controller import cell
from agent_health.ledger import backends, records
from support import hostile_support
from support.cell_support import CELL, TEST_ID, TOKEN
from support.hostile_support import free_port, hostile_target, read_report

KEY = b"s" * 44
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
"""


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for the sockets (a socket path has at most 107 bytes)."""
    where = Path(tempfile.mkdtemp(prefix="ah-sock-"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


@contextlib.asynccontextmanager
async def gateway_process(
    tmp_path: Path, sockets: Path, target: int, health: int, peer: int
) -> AsyncIterator[asyncio.subprocess.Process]:
    (tmp_path / "key").write_bytes(KEY)
    (tmp_path / "token").write_text(TOKEN)
    upstream = f"http://127.0.0.1:{target}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.gateway",
        "--route", f"principal=controller,listen=unix:{sockets}/agent.sock,upstream={upstream}",
        "--route", f"principal=target,to=peer:tools,listen=127.0.0.1:{peer},upstream={upstream}",
        "--ledger", f"file://{tmp_path / 'ledger'}", "--key-file", str(tmp_path / "key"),
        "--cell", CELL, "--run-id", CELL, "--test-id", TEST_ID, "--attempt", "0",
        "--token", f"controller={tmp_path / 'token'}",
        "--admin", f"unix:{sockets}/admin.sock", "--health", f"127.0.0.1:{health}",
        "--grace", "2",
    )  # fmt: skip
    async with hostile_support.serving(
        proc, f"http://127.0.0.1:{health}/healthz", stop_seconds=30
    ) as served:
        yield served


def settings(tmp_path: Path, sockets: Path) -> cell.CellSettings:
    """The controller as a cell pod sets it up: every URL through a socket of the gateway."""
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_cell.py").write_text(SUITE)
    return cell.CellSettings(
        suite=tmp_path / "suite", test_id=TEST_ID, repeat=0, agent="rest+http://gateway/run",
        run_id=CELL, token=TOKEN, admin="http://gateway", judge_url=None, judge_model=None,
        skip_judge=True, timeout=30, agent_socket=str(sockets / "agent.sock"),
        admin_socket=str(sockets / "admin.sock"),
    )  # fmt: skip


async def until_reported(report: Path, key: str, count: int) -> list[int]:
    for _ in range(600):
        found = [line[key] for line in read_report(report) if key in line]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"the target never reported {count} {key}: {read_report(report)}")


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_target_holding_the_gateways_ports_during_a_restart_harvests_no_token(
    tmp_path: Path, sockets: Path
) -> None:
    target, health, peer, health_again = free_port(), free_port(), free_port(), free_port()
    report = tmp_path / "report.jsonl"
    squat = {"HOSTILE_SQUAT": f"[{health}, {peer}]"}
    # The gateway first, so its ports are taken when the target starts squatting them.
    async with (
        gateway_process(tmp_path, sockets, target, health, peer) as gateway,
        hostile_target(target, report, {}, answer="good", attacks="squat", env=squat),
    ):
        through = httpx.AsyncHTTPTransport(uds=str(sockets / "agent.sock"))
        async with httpx.AsyncClient(transport=through) as client:
            answer = await client.post(
                "http://gateway/run", json={"prompt": "hi"}, headers={cell.TOKEN_HEADER: TOKEN}
            )
        assert answer.status_code == 200  # the gateway serves the controller
        gateway.send_signal(signal.SIGKILL)  # as an OOM kill would, before the kubelet
        await gateway.wait()  # restarts it
        assert sorted(await until_reported(report, "squatted", 2)) == sorted([health, peer])

        # The controller runs its test meanwhile: nothing it sends reaches the target.
        with pytest.raises(cell.RecordingFailed, match=r"admin\.sock"):
            await cell.run_cell(settings(tmp_path, sockets))
        assert not [line for line in read_report(report) if "harvested" in line]

        # The same call the way the controller made it before (TCP to the admin port,
        # the health port here) hands the squatter the token: the attack is real.
        async with httpx.AsyncClient() as tcp:
            old_way = cell.GatewayRecords(tcp, f"http://127.0.0.1:{health}", TOKEN)
            end = records.to_object(records.CellEnd(status="passed"), with_mac=False)
            await old_way.append([end])
        [harvested] = [line for line in read_report(report) if "harvested" in line]
        assert (harvested["harvested"], harvested["token"]) == (health, TOKEN)

        # The kubelet starts the gateway again (its health port is still the target's: a
        # new one here). The cell goes on, but its ledger says the gateway restarted.
        async with gateway_process(tmp_path, sockets, target, health_again, free_port()):
            code, _ = await cell.run_cell(settings(tmp_path, sockets))
            assert code == 0  # this time the agent call went through and passed
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL, attempt=0)
    try:
        graded = await grading.grade_cell(backend, CELL, KEY, expected, ledger_cell=CELL)
    finally:
        await backend.close()
    assert (graded.status, graded.cause) == ("errored", "infra")  # never passed
    assert graded.error is not None
    assert graded.error.startswith("the gateway restarted during the cell")
