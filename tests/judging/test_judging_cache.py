"""The persistent judge cache: hits, keys, errored verdicts, corruption, concurrent writers."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from agent_health import judging
from agent_health.judging import cache
from agent_health.sdk.config import Config, define_config
from support.judge_servers import (
    Answer,
    ScriptedModel,
    Status,
    judge_config,
    judge_request,
    run_result,
)


async def _twice(config: Any) -> tuple[Any, Any]:
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        return await backend(judge_request()), await backend(judge_request())


@pytest.fixture
async def server() -> Any:
    model = await ScriptedModel.start("openai", default=Answer(True, 0.75, "cached reasoning"))
    yield model
    await model.close()


async def test_second_run_is_a_hit_that_survives_a_restart(server: Any, tmp_path: Path) -> None:
    config = judge_config(server, tmp_path)
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        cold = await backend(judge_request())
    async with judging.backend(config, Config()) as backend:  # a new process, same file
        assert backend is not None
        warm = await backend(judge_request(role="observe"))
    assert not cold.cached
    assert warm.cached
    assert (warm.passed, warm.score, warm.reasoning) == (True, 0.75, "cached reasoning")
    assert warm.role == "observe"
    assert (warm.input_tokens, warm.output_tokens) == (cold.input_tokens, cold.output_tokens)
    assert len(server.requests) == 1


async def test_key_tracks_what_decides_the_verdict(server: Any, tmp_path: Path) -> None:
    config = judge_config(server, tmp_path)
    slower = run_result()
    steps = [s.model_dump() for s in slower.trajectory_steps]
    steps[1]["latency_ms"] = 999.0  # timings differ from run to run: still the same work
    retimed = run_result(steps=steps, run_id="run-2")
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        await backend(judge_request())
        same = [
            await backend(judge_request(retimed)),
            await backend(judge_request(role="observe")),
        ]
        different = [
            await backend(judge_request(repeat=1)),
            await backend(judge_request(criteria="another claim")),
            await backend(judge_request(model="other-model")),
            await backend(judge_request(context=("output",))),
            await backend(judge_request(run_result("a different answer"))),
            await backend(dataclasses.replace(judge_request(), expected="source=logs-*")),
        ]
    assert all(v.cached for v in same)
    assert not any(v.cached for v in different)
    assert len(server.requests) == 1 + len(different)


async def test_errored_verdicts_are_never_cached(tmp_path: Path) -> None:
    async with ScriptedModel.serving("openai", script=[Status(500)] * 3) as failing:
        config = judge_config(failing, tmp_path)
        async with judging.backend(config, Config()) as backend:
            assert backend is not None
            first = await backend(judge_request())
            second = await backend(judge_request())
    assert first.errored
    assert second.passed is True
    assert not second.cached
    assert len(failing.requests) == 4


async def test_no_cache_neither_reads_nor_writes(server: Any, tmp_path: Path) -> None:
    config = judge_config(server, tmp_path)
    async with judging.backend(config, Config(), use_cache=False) as backend:
        assert backend is not None
        await backend(judge_request())
    assert not (tmp_path / "judge.sqlite").exists()
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        await backend(judge_request())
    async with judging.backend(config, Config(), use_cache=False) as backend:
        assert backend is not None
        bypassed = await backend(judge_request())
    assert not bypassed.cached
    assert len(server.requests) == 3


async def test_env_variable_chooses_the_file(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "elsewhere" / "judges.db"
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(chosen))
    async with judging.backend(judge_config(server, tmp_path), Config()) as backend:
        assert backend is not None
        await backend(judge_request())
    assert chosen.exists()
    assert not (tmp_path / "judge.sqlite").exists()
    assert cache.default_path(None, {"XDG_CACHE_HOME": "/x"}) == Path(
        "/x/agent-health/judge.sqlite"
    )


async def test_a_directory_holds_the_cache_as_judge_sqlite(server: Any, tmp_path: Path) -> None:
    volume = tmp_path / "judge"  # what the chart mounts: a directory
    volume.mkdir()
    config = judge_config(server, cache_path=str(volume), cache=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", judging.JudgeCacheWarning)  # no "cannot be used"
        first, second = await _twice(config)
    assert not first.cached
    assert second.cached
    assert (volume / cache.FILE_NAME).is_file()
    assert cache.default_path(f"{tmp_path}/new/") == tmp_path / "new" / cache.FILE_NAME


async def test_corrupt_file_is_reported_and_rebuilt(server: Any, tmp_path: Path) -> None:
    path = tmp_path / "judge.sqlite"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    with pytest.warns(judging.JudgeCacheWarning, match="was corrupt"):
        first, second = await _twice(judge_config(server, tmp_path))
    assert not first.cached
    assert second.cached
    names = await asyncio.to_thread(lambda: [p.name for p in tmp_path.iterdir()])
    assert any(n.startswith("judge.sqlite.corrupt-") for n in names)


async def test_unusable_location_warns_and_judges_uncached(server: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    config = judge_config(server, cache_path=str(blocker / "sub" / "judge.sqlite"), cache=True)
    with pytest.warns(judging.JudgeCacheWarning, match="cannot be used"):
        first, second = await _twice(config)
    assert first.passed is True
    assert not second.cached


async def test_concurrent_writers_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    stores = [await cache.Cache.open(path) for _ in range(3)]

    async def write(store: cache.Cache, n: int) -> None:
        for i in range(40):
            await store.put(f"k{n}-{i}", {"passed": True, "score": i / 40})

    await asyncio.gather(*(write(s, n) for n, s in enumerate(stores)))
    errors: list[BaseException] = []

    def other_process_like_writer() -> None:
        db = sqlite3.connect(path, timeout=10)
        try:
            for i in range(40):
                db.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, 0)", (f"t{i}", "{}"))
                db.commit()
        except BaseException as err:
            errors.append(err)
        finally:
            db.close()

    thread = threading.Thread(target=other_process_like_writer)
    thread.start()
    await asyncio.gather(*(write(s, n + 3) for n, s in enumerate(stores)))
    await asyncio.to_thread(thread.join)
    assert errors == []
    for n in range(6):
        assert await stores[n % 3].get(f"k{n}-39") == {"passed": True, "score": 39 / 40}
    assert await stores[0].get("t39") == {}
    for store in stores:
        await store.close()
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


async def test_custom_evaluator_verdicts_are_cached_without_a_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "evaluators.sqlite"))
    calls: list[str] = []

    async def counted(result: Any) -> bool:
        calls.append(result.run_id)
        return True

    config = define_config(evaluators={"counted": counted})
    verdicts = []
    for _ in range(2):
        async with judging.backend(None, config) as backend:
            assert backend is not None
            verdicts.append(await backend(judge_request(evaluator="counted")))
    assert [v.cached for v in verdicts] == [False, True]
    assert calls == ["run-1"]


async def test_a_pass_everything_endpoint_under_the_same_model_name_cannot_fill_the_cache(
    server: Any, tmp_path: Path
) -> None:
    # The attack of issue 13: the key named the model only, so a run whose judge answered
    # "pass" to everything, under the real model's name, filled the cache for everyone.
    liar = await ScriptedModel.start("openai", default=Answer(True, 1.0, "looks great"))
    honest = await ScriptedModel.start("openai", default=Answer(False, 0.0, "no diagnosis"))
    try:
        lying = judge_config(liar, tmp_path)
        real = judge_config(honest, tmp_path)
        assert (lying.model, real.model) == ("judge-model", "judge-model")
        assert lying.cache_path == real.cache_path  # one shared cache file
        async with judging.backend(lying, Config()) as backend:
            assert backend is not None
            assert (await backend(judge_request())).passed is True
        async with judging.backend(real, Config()) as backend:
            assert backend is not None
            verdict = await backend(judge_request())
        assert (verdict.passed, verdict.cached) == (False, False)
        assert len(honest.requests) == 1  # the real judge was asked
    finally:
        await liar.close()
        await honest.close()


async def test_the_key_names_provider_options_and_partition(server: Any, tmp_path: Path) -> None:
    config = judge_config(server, tmp_path)
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        first = await backend.partitioned("team-a")(judge_request())
        again = await backend.partitioned("team-a")(judge_request())
        other_tenant = await backend.partitioned("team-b")(judge_request())
    tuned = judge_config(server, tmp_path, options={"temperature": 1.5})
    async with judging.backend(tuned, Config()) as backend:
        assert backend is not None
        other_options = await backend.partitioned("team-a")(judge_request())
    assert (first.cached, again.cached) == (False, True)
    assert not other_tenant.cached  # one namespace's verdicts are never served to another
    assert not other_options.cached
    assert len(server.requests) == 3


async def test_evidence_that_differs_only_by_run_id_is_the_same_question(
    server: Any, tmp_path: Path
) -> None:
    config = judge_config(server, tmp_path)
    context = ("output", "trajectory", "traces", "logs")
    async with judging.backend(config, Config()) as backend:
        assert backend is not None
        first = await backend(judge_request(run_result(run_id="run-1"), context=context))
        second = await backend(judge_request(run_result(run_id="run-2"), context=context))
        echoed = run_result("run-3 could not reach db-primary:5432.", run_id="run-3")
        third = await backend(judge_request(echoed, context=context))
        fourth = await backend(
            judge_request(run_result("run-4 could not reach db-primary:5432.", run_id="run-4"),
                          context=context)
        )  # fmt: skip
    assert (first.cached, second.cached) == (False, True)  # spans and logs name their run
    assert (third.cached, fourth.cached) == (False, True)  # the output quotes the run id
    assert len(server.requests) == 2
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "run-1" in sent  # the judge still sees the run's own records
