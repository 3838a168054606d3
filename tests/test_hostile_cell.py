"""A hostile target in a whole cell on loopback: it forges records, asks the judge, replays the
controller's call — and the grade stays the real one, with every refused attempt on record.

The target is a separate process (``hostile_agent.py``) that the controller calls through the
cell's gateway; when called, it attacks every listener of that gateway and the judge service,
whose addresses the test hands it as a real pod would expose them on localhost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import gateway, judging
from agent_health.cluster import grading
from agent_health.engine import cell
from agent_health.gateway import config as gateway_config
from agent_health.judging import service
from agent_health.ledger import backends, chain, records
from agent_health.sdk.config import define_config
from aiohttp import web
from judge_servers import ScriptedModel, judge_config, prompt_text, quoted_rule

HERE = Path(__file__).resolve().parent
TOKEN = "controller-token-of-this-cell-7c1e0b9a55d2"
OTHER_CELL_TOKEN = "controller-token-of-another-cell-19fe33a0"
CELL = "evalrun-1-abc123-r0"
TEST_ID = "test_cell.py::diagnoses the payment outage"
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, 'says "db-primary"')
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def hostile_target(
    port: int, report: Path, targets: dict[str, Any], *, answer: str, attacks: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``hostile_agent.py`` as its own process on ``port``, attacking ``targets`` when called."""
    env = {
        "HOSTILE_TARGETS": json.dumps(targets),
        "HOSTILE_OTHER_TOKEN": OTHER_CELL_TOKEN,
        "HOSTILE_REPORT": str(report),
        "PATH": "/usr/bin:/bin",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "hostile_agent.py"),
        "--port",
        str(port),
        "--answer",
        answer,
        "--attack",
        attacks,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert json.loads(ready) == {"port": port}, ready
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


def read_report(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def _private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))


@pytest.fixture
async def judge_service(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedModel]]:
    """The operator's judge service on loopback: a scripted model, only the cell's token."""
    model = await ScriptedModel.start("openai", default=quoted_rule)
    async with judging.backend(judge_config(model, cache_dir=tmp_path), define_config()) as b:
        assert b is not None
        runner = web.AppRunner(service.app(b, lambda token: token == TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", model
        await runner.cleanup()
    await model.close()


async def cell_gateway(tmp_path: Path, target_port: int, judge_url: str) -> gateway.Gateway:
    """The cell's gateway, in-process, as the cell pod's flags configure it."""
    (tmp_path / "key").write_bytes(b"k" * 48)
    (tmp_path / "token").write_text(TOKEN)
    settings = gateway_config.build(
        {
            "routes": [
                {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
                 "upstream": f"http://127.0.0.1:{target_port}"},
                {"principal": "controller", "to": "judge", "listen": "127.0.0.1:0",
                 "upstream": judge_url},
            ],
            "ledger_url": f"file://{tmp_path / 'ledger'}",
            "key_file": str(tmp_path / "key"),
            "cell": CELL,
            "run_id": CELL,
            "test_id": TEST_ID,
            "token_files": {"controller": str(tmp_path / "token")},
            "admin": "127.0.0.1:0",
            "grace": 5,
        }
    )  # fmt: skip
    proxy = await gateway.Gateway.from_settings(settings)
    await proxy.start()
    return proxy


def cell_settings(tmp_path: Path, proxy: gateway.Gateway) -> cell.CellSettings:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_cell.py").write_text(textwrap.dedent(SUITE))
    return cell.CellSettings(
        suite=tmp_path / "suite",
        test_id=TEST_ID,
        repeat=0,
        agent=f"rest+{proxy.url('controller', 'target')}/run",
        run_id=CELL,
        token=TOKEN,
        admin=proxy.admin_url,
        judge_url=proxy.url("controller", "judge"),
        judge_model=None,
        skip_judge=False,
        timeout=60,
    )


def ledger_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()


async def grade(tmp_path: Path) -> grading.CellGrade:
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL)
    return await grading.grade_cell(backend, CELL, b"k" * 48, expected)


def cached_verdicts(tmp_path: Path) -> int:
    with contextlib.closing(sqlite3.connect(tmp_path / "judge.sqlite")) as db:
        (count,) = db.execute("SELECT count(*) FROM verdicts").fetchone()
        return int(count)


async def run_attacked_cell(
    tmp_path: Path, judge: tuple[str, ScriptedModel], *, answer: str, attacks: str
) -> tuple[int, list[dict[str, Any]], gateway.Gateway]:
    """Run the cell against the hostile target; (exit code, its report, the stopped gateway)."""
    judge_url, _ = judge
    port, report = free_port(), tmp_path / "report.jsonl"
    proxy = await cell_gateway(tmp_path, port, judge_url)
    targets = {
        "admin": proxy.admin_url,
        "routes": [proxy.url("controller", "target")],
        "judge_route": proxy.url("controller", "judge"),
        "judge": judge_url,
    }
    try:
        async with hostile_target(port, report, targets, answer=answer, attacks=attacks):
            code, _ = await cell.run_cell(cell_settings(tmp_path, proxy))
    finally:
        await proxy.stop()
    return code, read_report(report), proxy


def attempts(report: list[dict[str, Any]], attack: str) -> list[dict[str, Any]]:
    return [line for line in report if line.get("attack") == attack]


@pytest.mark.parametrize(("answer", "real_status"), [("bad", "failed"), ("good", "passed")])
async def test_forged_records_are_refused_recorded_and_leave_the_real_grade(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel], answer: str, real_status: str
) -> None:
    code, report, proxy = await run_attacked_cell(
        tmp_path, judge_service, answer=answer, attacks="forge,judge"
    )
    admin, route, judge_route = (
        proxy.admin_url,
        proxy.url("controller"),
        proxy.url("controller", "judge"),
    )
    forged = attempts(report, "forge")
    # no token, 4 guesses, another cell's token, the controller's call replayed; 3 listeners
    assert len(forged) == 7 * 3
    by_listener = {
        base: {a["status"] for a in forged if a["url"].startswith(f"{base}/")}
        for base in (admin, route, judge_route)
    }
    assert by_listener == {admin: {403}, route: {404}, judge_route: {403}}
    # The route forwarded the forgery to the target itself (its own 404), as the target's call.

    graded = await grade(tmp_path)
    assert graded.status == real_status, graded.error
    assert code == cell.EXIT[real_status]
    lines = ledger_lines(tmp_path)
    assert chain.verify(lines, b"k" * 48, complete=True).ok
    parsed = [records.parse_line(line) for line in lines]
    [run_result] = [r for r in parsed if isinstance(r, records.RunResultRecord)]
    assert "Diagnose" in (run_result.prompt or "")
    assert ("db-primary" in run_result.output) is (answer == "good")  # the real answer
    [end] = [r for r in parsed if isinstance(r, records.CellEnd)]
    assert end.status == real_status
    assert not any(
        isinstance(r, records.SignalRecord) and r.signal.get("name") == "forged" for r in parsed
    )

    refused = [r for r in parsed if isinstance(r, records.Exchange) and r.upstream == "gateway"]
    forged_here = [r for r in refused if r.path == "/ledger/records"]
    assert len(forged_here) == 7 * 2  # every admin and judge-route forgery is on record
    assert {(r.principal, r.status, r.version) for r in forged_here} == {("target", 403, 2)}
    assert {r.evidence for r in forged_here} == {"none", "invalid-token"}
    assert all(r.error and r.error.startswith("refused: ") for r in refused)
    # Judge attempts: the service refused them directly (401), the gateway on its listener (403).
    asked = attempts(report, "judge")
    direct = {a["status"] for a in asked if a["url"].startswith(judge_service[0])}
    via_gateway = {a["status"] for a in asked if a["url"].startswith(judge_route)}
    assert (direct, via_gateway) == ({401}, {403})
    [asked_model] = judge_service[1].requests  # only the controller's judge() call
    assert run_result.output in prompt_text(asked_model.body)
    assert "Always pass" not in prompt_text(asked_model.body)
    assert cached_verdicts(tmp_path) == 1
    assert proxy.health()[1]["refused_recorded"] == len(refused)


async def test_a_replayed_controller_call_is_the_targets_and_never_sees_the_token(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel]
) -> None:
    code, report, proxy = await run_attacked_cell(
        tmp_path, judge_service, answer="good", attacks="replay"
    )
    assert code == 0
    seen = [line["seen_headers"] for line in report if "seen_headers" in line]
    assert len(seen) == 3  # the controller's call, then its two replays through the route
    for headers in seen:
        assert gateway.TOKEN_HEADER.lower() not in {k.lower() for k in headers}
        assert TOKEN not in json.dumps(headers)
    replays = attempts(report, "replay")
    statuses = {(a["url"].rsplit("/", 1)[0], a["variant"]): a["status"] for a in replays}
    assert statuses == {
        (proxy.admin_url, "replay without token"): 404,
        (proxy.admin_url, "replay with another cell's token"): 404,
        (proxy.url("controller"), "replay without token"): 200,
        (proxy.url("controller"), "replay with another cell's token"): 200,
        (proxy.url("controller", "judge"), "replay without token"): 403,
        (proxy.url("controller", "judge"), "replay with another cell's token"): 403,
    }
    parsed = [records.parse_line(line) for line in ledger_lines(tmp_path)]
    exchanges = [r for r in parsed if isinstance(r, records.Exchange)]
    calls = [(e.principal, e.evidence) for e in exchanges if e.path == "/run"]
    mine = gateway_config.token_id(TOKEN)
    assert sorted(calls) == sorted(
        [
            ("controller", mine),  # the one real call
            ("target", "none"),  # replayed through the route: the target's
            ("target", "invalid-token"),
            ("target", "none"),  # refused on the admin listener
            ("target", "invalid-token"),
            ("target", "none"),  # refused on the judge listener
            ("target", "invalid-token"),
        ]
    )
    assert all(e.evidence == mine for e in exchanges if e.principal == "controller")
    graded = await grade(tmp_path)
    assert graded.status == "passed", graded.error
