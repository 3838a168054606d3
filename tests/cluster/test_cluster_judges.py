"""The operator's judges keep each namespace's verdicts apart (issue 13, judge cache partitions).

One operator serves every tenant from one persistent cache. A cell's controller token
resolves to its run (namespace, name) and its RunSpec's judge; the verdicts one namespace's
cells fill the cache with are never served to another namespace's cells, whether they use
the operator's own judge or a judge of their RunSpec. Real judge service and model servers on
loopback; the run board is reduced to the one question the judges ask it (``judge_of``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from agent_health import judging
from agent_health.cluster.api import runspec
from agent_health.cluster.judge_service import judges
from agent_health.cluster.reconcile import batcher, runs
from agent_health.judging import service
from agent_health.sdk.config import define_config
from aiohttp import web
from support.judge_servers import Answer, ScriptedModel, judge_config, judge_request

CALL = {"text": "the answer is db-primary", "criteria": "names the database"}


class Board:
    """The runs' answer to "whose cell is this token": (run, its RunSpec's judge)."""

    def __init__(self, cells: dict[str, tuple[str, runspec.Judge | None]]) -> None:
        self.cells = cells

    def judge_of(self, token: str | None) -> runs.Judged | None:
        found = self.cells.get(token or "")
        if found is None:
            return None
        namespace, judge = found
        ref = batcher.RunRef(namespace=namespace, name="nightly")
        return runs.Judged(ref, "triage", judge, skip_judge=False)


@contextlib.asynccontextmanager
async def judge_service(
    model: ScriptedModel, tmp_path: Path, board: Board
) -> AsyncIterator[tuple[str, judges.RunJudges]]:
    async with judging.backend(judge_config(model, tmp_path), define_config()) as fallback:
        assert fallback is not None
        run_judges = judges.RunJudges(
            api=None,  # type: ignore[arg-type]
            runs=board,  # type: ignore[arg-type]
            fallback=fallback,
            for_all=True,  # the operator's own judge is offered to every run here
        )
        runner = web.AppRunner(service.serving(run_judges.resolve))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}/api/judge", run_judges
        finally:
            await runner.cleanup()
            await run_judges.close()


async def _ask(url: str, token: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        answer = await client.post(url, json=CALL, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    verdict: dict[str, Any] = answer.json()
    return verdict


async def test_the_operators_own_judge_answers_each_namespace_from_its_own_partition(
    tmp_path: Path,
) -> None:
    model = await ScriptedModel.start("openai", default=Answer(True, 0.9, "names it"))
    board = Board({"a-1": ("team-a", None), "a-2": ("team-a", None), "b-1": ("team-b", None)})
    try:
        async with judge_service(model, tmp_path, board) as (url, _):
            first = await _ask(url, "a-1")
            same_tenant = await _ask(url, "a-2")
            other_tenant = await _ask(url, "b-1")
    finally:
        await model.close()
    assert (first["cached"], same_tenant["cached"]) == (False, True)
    assert other_tenant["cached"] is False  # before: served team-a's verdict, no request made
    assert len(model.requests) == 2


async def test_a_runspec_judge_is_keyed_by_its_namespace_and_endpoint(tmp_path: Path) -> None:
    operators = await ScriptedModel.start("openai", default=Answer(True, 1.0, "pass"))
    tenants = await ScriptedModel.start("openai", default=Answer(False, 0.0, "no"))
    own = runspec.Judge(provider="openai", model="judge-model", base_url=tenants.url)
    board = Board({"a": ("team-a", own), "b": ("team-b", own), "env": ("team-a", None)})
    try:
        async with judge_service(operators, tmp_path, board) as (url, run_judges):
            env = await _ask(url, "env")  # the operator's judge, same model name
            a = await _ask(url, "a")
            b = await _ask(url, "b")
            again = await _ask(url, "a")
            assert {key[0] for key in run_judges.built} == {"team-a", "team-b"}
    finally:
        await operators.close()
        await tenants.close()
    assert (env["passed"], a["passed"], b["passed"]) == (True, False, False)
    assert (a["cached"], b["cached"], again["cached"]) == (False, False, True)
    assert (len(operators.requests), len(tenants.requests)) == (1, 2)


async def test_partitioned_shares_the_provider_and_cache_but_not_the_keys(
    tmp_path: Path,
) -> None:
    async with (
        ScriptedModel.serving("openai", default=Answer(True, 0.9, "names it")) as model,
        judging.backend(judge_config(model, tmp_path), define_config()) as backend,
    ):
        assert backend is not None
        mine = backend.partitioned("team-a")
        assert mine.partitioned("team-a") is mine
        assert (mine.provider, mine.cache) == (backend.provider, backend.cache)
        assert backend.partition is None
        await mine(judge_request())
        assert not (await backend(judge_request())).cached
        assert (await backend.partitioned("team-a")(judge_request())).cached
