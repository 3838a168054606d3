"""A whole cell on loopback: controller (``agent-health cell``) → gateway → agent and judge
service, then the operator's grader reads the ledger the gateway wrote."""

from __future__ import annotations

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
from agent_health.ledger import backends, records
from agent_health.sdk.config import define_config
from aiohttp import web
from judge_servers import Answer, ScriptedModel, judge_config

TOKEN = "controller-token-of-this-cell-0123456789"
CELL = "evalrun-1-abc123-r0"
TEST_ID = "test_cell.py::diagnoses the payment outage"
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, "names the database as the cause")
"""


@pytest.fixture(autouse=True)
def _private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))


@pytest.fixture
async def judge_service(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedModel]]:
    model = await ScriptedModel.start("openai", default=Answer(True, 0.9, "names db-primary"))
    async with judging.backend(judge_config(model, cache_dir=tmp_path), define_config()) as b:
        assert b is not None
        runner = web.AppRunner(service.app(b, lambda token: token == TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", model
        await runner.cleanup()
    await model.close()


async def _cell_gateway(tmp_path: Path, agent_base: str, judge_url: str) -> gateway.Gateway:
    (tmp_path / "key").write_bytes(b"k" * 48)
    (tmp_path / "token").write_text(TOKEN)
    settings = gateway_config.build(
        {
            "routes": [
                {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
                 "upstream": agent_base},
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


def _settings(tmp_path: Path, proxy: gateway.Gateway, test_id: str = TEST_ID) -> cell.CellSettings:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_cell.py").write_text(textwrap.dedent(SUITE))
    return cell.CellSettings(
        suite=tmp_path / "suite",
        test_id=test_id,
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


async def _grade(tmp_path: Path) -> Any:
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL)
    return await grading.grade_cell(backend, CELL, b"k" * 48, expected)


async def test_a_cell_records_through_its_gateway_and_grades_passed(
    tmp_path: Path, triage_url: str, judge_service: tuple[str, ScriptedModel]
) -> None:
    judge_url, model = judge_service
    proxy = await _cell_gateway(tmp_path, triage_url.removesuffix("/run"), judge_url)
    try:
        code, result = await cell.run_cell(_settings(tmp_path, proxy))
    finally:
        await proxy.stop()
    assert code == 0
    assert result is not None
    assert result.status == "passed", result
    assert result.run_id == CELL
    assert len(model.requests) == 1  # the judge service asked the model once
    graded = await _grade(tmp_path)
    assert graded.status == "passed", graded.error
    assert graded.score == pytest.approx(0.95)
    lines = (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()
    kinds = [records.parse_line(line).kind for line in lines]
    assert kinds[0] == "cell-meta"
    assert kinds[-1] == "cell-end"
    exchanges = [records.parse_line(x) for x in lines]
    principals = {(e.principal, e.upstream) for e in exchanges if isinstance(e, records.Exchange)}
    assert principals == {("controller", "target"), ("controller", "judge")}
    assert TOKEN not in "".join(lines)


async def test_an_unknown_test_is_recorded_as_the_reason(
    tmp_path: Path, triage_url: str, judge_service: tuple[str, ScriptedModel]
) -> None:
    judge_url, _ = judge_service
    proxy = await _cell_gateway(tmp_path, triage_url.removesuffix("/run"), judge_url)
    try:
        with pytest.raises(cell.CellError, match=r"no test 'test_cell\.py::nope'"):
            await cell.run_cell(_settings(tmp_path, proxy, test_id="test_cell.py::nope"))
    finally:
        await proxy.stop()
    graded = await _grade(tmp_path)
    assert graded.status == "errored"
    assert "no test 'test_cell.py::nope'" in (graded.error or "")


def test_settings_come_from_the_pod_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    settings = cell.CellSettings.from_env(
        suite=tmp_path,
        test_id=TEST_ID,
        repeat=2,
        environ={
            "AGENT_HEALTH_AGENT_URL": "rest+http://127.0.0.1:15001/run",
            "AGENT_HEALTH_RUN_ID": CELL,
            "AGENT_HEALTH_TOKEN_FILE": str(tmp_path / "token"),
            "AGENT_HEALTH_GATEWAY_ADMIN": "http://127.0.0.1:15000",
            "AGENT_HEALTH_TIMEOUT": "300",
            "AGENT_HEALTH_SKIP_JUDGE": "1",
        },
    )
    assert settings.token == TOKEN
    assert settings.skip_judge
    assert settings.timeout == 300
    assert settings.token_headers == {gateway_config.TOKEN_HEADER: TOKEN}
    with pytest.raises(cell.CellError, match="AGENT_HEALTH_AGENT_URL"):
        cell.CellSettings.from_env(suite=tmp_path, test_id=TEST_ID, repeat=0, environ={})


def test_the_cell_names_the_gateway_token_header() -> None:
    assert cell.TOKEN_HEADER == gateway_config.TOKEN_HEADER
