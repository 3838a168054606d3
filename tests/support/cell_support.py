"""A whole cell on loopback: its gateway (in-process, configured as a cell pod configures it),
the operator's judge service with a scripted model, the controller's settings, the grader."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import gateway, judging
from agent_health.cluster.grading import grading
from agent_health.engine.controller import cell
from agent_health.gateway import config as gateway_config
from agent_health.judging import service
from agent_health.ledger import backends
from agent_health.sdk.config import define_config
from aiohttp import web

from support.judge_servers import Default, ScriptedModel, judge_config

TOKEN = "controller-token-of-this-cell-7c1e0b9a55d2"
CELL = "evalrun-1-abc123-r0"
TEST_ID = "test_cell.py::diagnoses the payment outage"
KEY = b"k" * 48


def private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))


@contextlib.asynccontextmanager
async def judge_service(tmp_path: Path, rule: Default) -> AsyncIterator[tuple[str, ScriptedModel]]:
    """The operator's judge service on loopback: a scripted model, only the cell's token."""
    model = await ScriptedModel.start("openai", default=rule)
    async with judging.backend(judge_config(model, cache_dir=tmp_path), define_config()) as b:
        assert b is not None
        runner = web.AppRunner(service.app(b, lambda token: token == TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", model
        await runner.cleanup()
    await model.close()


async def cell_gateway(
    tmp_path: Path, target_port: int, judge_url: str, **fields: Any
) -> gateway.Gateway:
    """The cell's gateway, in-process, as the cell pod's flags configure it."""
    (tmp_path / "key").write_bytes(KEY)
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
            **fields,
        }
    )  # fmt: skip
    proxy = await gateway.Gateway.from_settings(settings)
    await proxy.start()
    return proxy


def cell_settings(
    tmp_path: Path, proxy: gateway.Gateway, suite: str, test_id: str = TEST_ID
) -> cell.CellSettings:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_cell.py").write_text(textwrap.dedent(suite))
    return cell.CellSettings(
        suite=tmp_path / "suite",
        test_id=test_id,
        repeat=0,
        agent=f"rest+{proxy.url('controller', 'target')}/run",
        run_id=CELL,
        token=TOKEN,
        admin=proxy.admin_url,
        # A cell without a judge route skips judge() (as a cell of an unjudged run does).
        judge_url=(
            proxy.url("controller", "judge") if ("controller", "judge") in proxy.listeners else None
        ),
        judge_model=None,
        skip_judge=False,
        timeout=60,
    )


def ledger_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()


async def grade(tmp_path: Path, test_id: str = TEST_ID) -> grading.CellGrade:
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=test_id, repeat=0, run_id=CELL)
    return await grading.grade_cell(backend, CELL, KEY, expected)
