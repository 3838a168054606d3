"""A hostile target in a whole cell on loopback: it forges records, asks the judge, replays the
controller's call — and the grade stays the real one, with every refused attempt on record.

The target is a separate process (``hostile_agent.py``) that the controller calls through the
cell's gateway; when called, it attacks every listener of that gateway and the judge service,
whose addresses the test hands it as a real pod would expose them on localhost.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_health import gateway
from agent_health.engine.controller import cell
from agent_health.gateway import config as gateway_config
from agent_health.ledger import chain, records
from support.hostile_support import (
    TOKEN,
    attempts,
    cached_verdicts,
    grade,
    ledger_lines,
    private_judge_cache,
    run_attacked_cell,
)
from support.hostile_support import judge_service as serve_judge
from support.judge_servers import ScriptedModel, prompt_text, quoted_rule

_private_judge_cache = pytest.fixture(autouse=True)(private_judge_cache)


@pytest.fixture
async def judge_service(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedModel]]:
    async with serve_judge(tmp_path, quoted_rule) as served:
        yield served


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
