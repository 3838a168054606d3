"""Doubtful evidence, end to end: a cell attacked by the hostile target whose ledger is then
edited, re-sealed by a forger holding the key, or left without the controller's final record
is graded ``errored`` with the precise reason — never ``passed``."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from agent_health import gateway
from agent_health.engine.controller import cell
from agent_health.gateway import command
from agent_health.ledger import chain, records
from support.hostile_support import (
    CELL,
    attempts,
    cell_gateway,
    cell_settings,
    free_port,
    grade,
    hostile_target,
    ledger_lines,
    private_judge_cache,
    read_report,
    run_attacked_cell,
)
from support.hostile_support import judge_service as serve_judge
from support.judge_servers import ScriptedModel, quoted_rule

KEY = b"k" * 48
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, 'says "db-primary"')
"""

_private_judge_cache = pytest.fixture(autouse=True)(private_judge_cache)


@pytest.fixture
async def judge_service(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedModel]]:
    async with serve_judge(tmp_path, quoted_rule) as served:
        yield served


def _rewrite(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


async def test_an_edited_ledger_that_would_pass_is_errored_as_tampered(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel]
) -> None:
    await run_attacked_cell(tmp_path, judge_service, answer="bad", attacks="forge")
    assert (await grade(tmp_path)).status == "failed"
    lines = ledger_lines(tmp_path)
    end = json.loads(lines[-1])
    assert end["status"] == "failed"
    lines[-1] = json.dumps({**end, "status": "passed"}, sort_keys=True, separators=(",", ":"))
    _rewrite(tmp_path / "ledger" / f"{CELL}.jsonl", lines)
    graded = await grade(tmp_path)
    assert graded.status == "errored"
    assert graded.error is not None
    assert graded.error.startswith(f"ledger tampered at record {len(lines) - 1} (edited: mac")
    assert graded.cause == "agent"  # broken evidence never lifts a result out of the pass rate


@pytest.mark.parametrize(
    ("answer", "why"),
    [("500", "answered HTTP 500"), ("malformed", "malformed JSON"), ("no-output", "no output")],
)
async def test_a_target_that_answers_badly_is_errored_by_the_agent_not_doubtful(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel], answer: str, why: str
) -> None:
    code, _, _ = await run_attacked_cell(tmp_path, judge_service, answer=answer, attacks="")
    assert code == 3
    run = next(
        r
        for r in map(records.parse_line, ledger_lines(tmp_path))
        if isinstance(r, records.RunResultRecord)
    )
    assert (run.cause, run.output) == ("agent", "")  # the controller's account of the exchange
    graded = await grade(tmp_path)
    assert (graded.status, graded.cause) == ("errored", "agent")
    assert why in (graded.error or "")
    assert "doubtful" not in (graded.error or "")  # before: "no run-result record from controller"


async def test_a_forger_with_the_key_still_cannot_claim_the_controller_without_its_token(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel]
) -> None:
    await run_attacked_cell(tmp_path, judge_service, answer="bad", attacks="forge")
    parsed = [records.parse_line(line) for line in ledger_lines(tmp_path)]
    # Re-seal the whole cell as a forger holding the ledger key would: the target's refused
    # calls now claim to be the controller's, the run passes — but without token evidence.
    forged: list[records.Record] = []
    for record in parsed:
        if isinstance(record, records.Exchange) and record.principal == "target":
            record = record.model_copy(update={"principal": "controller"})
        if isinstance(record, records.CellEnd):
            record = record.model_copy(update={"status": "passed"})
        forged.append(record)
    sealer = chain.Sealer(KEY)
    _rewrite(
        tmp_path / "ledger" / f"{CELL}.jsonl",
        [records.dump_line(sealer.seal(r)) for r in forged],
    )
    assert chain.verify(ledger_lines(tmp_path), KEY).ok
    graded = await grade(tmp_path)
    assert graded.status == "errored"
    assert "is attributed to controller without token evidence" in (graded.error or "")


async def test_a_controller_stopped_before_its_final_record_is_errored(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel]
) -> None:
    port, report = free_port(), tmp_path / "report.jsonl"
    proxy = await cell_gateway(tmp_path, port, judge_service[0])
    targets = {"admin": proxy.admin_url, "routes": [proxy.url("controller")]}
    try:
        async with hostile_target(port, report, targets, answer="hang", attacks="forge"):
            controller = asyncio.ensure_future(cell.run_cell(cell_settings(tmp_path, proxy, SUITE)))
            for _ in range(500):  # until the target has made its forgeries, holding the call
                if len(attempts(read_report(report), "forge")) == 14:
                    break
                await asyncio.sleep(0.02)
            controller.cancel()  # the controller dies while the target holds its call
            with pytest.raises(asyncio.CancelledError):
                await controller
            async with (
                aiohttp.ClientSession() as client,
                client.post(
                    f"{proxy.admin_url}/ledger/records",
                    json=[{"kind": "cell-end", "status": "passed"}],
                ) as response,
            ):
                assert response.status == 403  # and the target cannot end the cell for it
    finally:
        await proxy.stop()
    graded = await grade(tmp_path)
    assert graded.status == "errored"
    assert (graded.error or "").startswith("no final record from controller")
    kinds = {r.kind for r in map(records.parse_line, ledger_lines(tmp_path))}
    assert "cell-end" not in kinds


async def test_refused_calls_are_recorded_up_to_the_cap_then_counted(
    tmp_path: Path, judge_service: tuple[str, ScriptedModel]
) -> None:
    (tmp_path / "key").write_bytes(KEY)
    proxy = await cell_gateway(tmp_path, free_port(), judge_service[0], max_refused_records=3)
    forged = [{"kind": "cell-end", "status": "passed"}]
    try:
        async with aiohttp.ClientSession() as client:
            for n in range(5):
                headers = {gateway.TOKEN_HEADER: f"guess-{n}"}
                url = f"{proxy.admin_url}/ledger/records"
                async with client.post(url, json=forged, headers=headers) as response:
                    assert response.status == 403
                    assert response.headers["Connection"] == "close"
            async with client.get(f"{proxy.admin_url}/healthz") as response:
                health = await response.json()
    finally:
        await proxy.stop()
    assert (health["refused_recorded"], health["refused_unrecorded"]) == (3, 2)
    refused = [
        r
        for r in map(records.parse_line, ledger_lines(tmp_path))
        if isinstance(r, records.Exchange)
    ]
    assert [(r.principal, r.evidence, r.status) for r in refused] == [
        ("target", "invalid-token", 403)
    ] * 3
    assert "refusals after this one are counted, not recorded (limit 3)" in (
        refused[-1].error or ""
    )


def test_limits_leave_room_for_trusted_callers_and_come_from_flags() -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    route = ["--route", "principal=controller,listen=127.0.0.1:0,upstream=http://127.0.0.1:9"]
    flags = "--header-timeout 2 --max-connections 32 --max-untrusted-calls 8"
    flags += " --admin-max-bytes 65536 --body-timeout 5 --max-refused-records 7"
    limits = command.settings(parser.parse_args(route + flags.split()), environ={})
    assert (limits.header_timeout, limits.max_connections, limits.max_untrusted_calls) == (2, 32, 8)
    assert (limits.admin_max_bytes, limits.body_timeout, limits.max_refused_records) == (
        65536,
        5,
        7,
    )
    with pytest.raises(gateway.GatewayConfigError, match="must be below max_connections"):
        command.settings(
            parser.parse_args([*route, "--max-connections", "8", "--max-untrusted-calls", "8"]),
            environ={},
        )
