"""``agent-health run`` records the tests that ran the agent as cells of one sealed run file."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine.recording import recording, refusal, runrecord
from agent_health.ledger import observation, records, runfile
from agent_health.sdk import context as ctx_mod
from agent_health.sdk.results import TestResult
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ledger_support
from support.helpers import run_cli, run_cli_sync
from support.loopback import serving

SUITE = {
    "test_triage.py": """
    from agent_health import test

    @test("payment", labels=["smoke"])
    async def payment(agent, expect):
        result = await agent.run("Diagnose the payment service")
        expect(result).to_have_called_tool("search_logs")
        expect(result.output).to_match("db-primary")

    @test("restarts the pod")
    async def restarts(agent, expect):
        result = await agent.run("Diagnose the auth service")
        expect(result).to_have_called_tool("restart_pod")

    @test.skip("not yet")
    async def later(agent):
        await agent.run("x")

    @test("pure data")
    async def pure(expect):
        expect(1 + 1).to_equal(2)
    """
}


def verify(ledger: Path, *extra: str) -> int:
    key = recording.key_path(f"file://{ledger}")
    return cli.main(["ledger", "verify", str(ledger), "--key-file", str(key), *extra])


async def test_a_local_run_writes_one_sealed_file_with_a_cell_per_test_that_ran_the_agent(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = await run_cli(
        suite, "--agent", f"rest+{triage_url}", "--ledger", f"file://{ledger}", "-j", "3",
        "--repeat", "2",
    )  # fmt: skip
    assert run.code == 1
    key = recording.key_path(f"file://{ledger}")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f"ledger: file://{ledger} (4 cells, key {key})" in capsys.readouterr().out
    assert [p.name for p in ledger.iterdir()] == [runfile.NAME]  # one file for the whole run
    assert await asyncio.to_thread(verify, ledger) == 0
    assert "4 cells verified (run file sealed)" in capsys.readouterr().out

    cells = ledger_support.parsed(ledger)
    ran = [t for t in run.report["tests"] if t["name"] in ("payment", "restarts the pod")]
    assert len(ran) == 4  # 2 tests x 2 repeats; the skipped and the pure-data one wrote nothing
    assert sorted(cells) == sorted(recording.cell_name(t["id"], t["repeat"]) for t in ran)
    for test in ran:
        cell = cells[recording.cell_name(test["id"], test["repeat"])]
        meta, end = cell[0], cell[-1]
        assert isinstance(meta, records.CellMeta)
        assert (meta.test_id, meta.repeat, meta.run_id) == (
            test["id"],
            test["repeat"],
            test["run_id"],
        )
        assert isinstance(end, records.CellEnd)
        assert end.status == test["status"]
        kinds = [r.kind for r in cell]
        assert kinds[:3] == ["cell-meta", "exchange", "run-result"]
        exchange = cell[1]
        assert isinstance(exchange, records.Exchange)
        assert (exchange.principal, exchange.upstream, exchange.path, exchange.status) == (
            "controller",
            "target",
            "/run",
            200,
        )
        assert exchange.evidence == observation.IN_PROCESS
        assert exchange.run_id == test["run_id"]
        assert exchange.request_bytes > 0
        assert exchange.response_sha256
        result = cell[2]
        assert isinstance(result, records.RunResultRecord)
        assert result.prompt == test["prompt"]
        assert result.trajectory[1]["tool_name"] == "search_logs"
        signals = [r.signal for r in cell if isinstance(r, records.SignalRecord)]
        body_signals = [s["name"] for s in test["signals"] if s["kind"] != "metric"]
        assert [s["name"] for s in signals] == body_signals  # metrics are derived, not recorded


def test_the_default_ledger_lives_under_dot_agent_health(
    write_suite: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    suite = write_suite(**SUITE)
    monkeypatch.chdir(tmp_path)
    run = run_cli_sync(
        suite, "--agent", "rest+http://127.0.0.1:9/run", "--grep", "payment", "--no-preflight"
    )  # the agent is down from the start: not looked for, so its test records the failure
    assert run.code == 3
    error = run.by_name("payment")["error"]
    assert error.startswith("cannot connect to agent at http://127.0.0.1:9")
    [ledger] = [p for p in (tmp_path / ".agent-health" / "ledger").iterdir() if p.is_dir()]
    assert f"ledger: file://.agent-health/ledger/{ledger.name} (1 cells, key " in (
        capsys.readouterr().out
    )
    [cell] = ledger_support.parsed(ledger).values()
    assert [r.kind for r in cell][:2] == ["cell-meta", "exchange"]
    exchange = cell[1]
    assert isinstance(exchange, records.Exchange)
    assert exchange.status is None
    assert "cannot connect to agent at http://127.0.0.1:9/run" in (exchange.error or "")
    assert isinstance(cell[-1], records.CellEnd)
    assert cell[-1].status == "errored"


@pytest.fixture
async def hanging_agent() -> AsyncIterator[str]:
    async def handler(req: web.Request) -> web.StreamResponse:
        await req.read()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with serving(handler, path="/run") as url:
        yield url


async def test_a_timeout_records_the_open_exchange_as_cancelled_at_once(
    write_suite: Any, hanging_agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The test's deadline cancels the call: the exchange is closed and recorded then, and the
    run neither waits for the agent nor loses the exchange."""
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = await run_cli(
        suite, "--agent", f"rest+{hanging_agent}", "--grep", "payment", "--timeout", "0.5",
        "--ledger", str(ledger),
    )  # fmt: skip
    assert run.code == 3
    assert "timed out" in run.by_name("payment")["error"]
    out = capsys.readouterr()
    assert "ledger error" not in out.err
    [cell] = ledger_support.parsed(ledger).values()
    exchange = cell[1]
    assert isinstance(exchange, records.Exchange)
    assert exchange.status is None
    assert (exchange.error or "").startswith("cancelled after ")
    assert isinstance(cell[-1], records.CellEnd)
    assert cell[-1].status == "errored"
    assert await asyncio.to_thread(verify, ledger) == 0


def test_no_ledger_records_nothing(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(**SUITE)
    monkeypatch.chdir(tmp_path)
    run = run_cli_sync(
        suite, "--agent", "rest+http://127.0.0.1:9/run", "--no-ledger", "--no-preflight"
    )
    assert run.code == 3
    assert not (tmp_path / ".agent-health" / "ledger").exists()  # (the --last-failed cache
    assert not list((tmp_path / ".agent-health").glob("*.key"))  # may be there)
    both = run_cli_sync(suite, "--ledger", "file:///tmp/x", "--no-ledger")
    assert both.code == 2


def test_a_run_whose_tests_never_ran_the_agent_writes_nothing(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = run_cli_sync(suite, "--grep", "pure data", "--ledger", str(ledger))
    assert run.code == 0
    assert not ledger.exists()
    assert not recording.key_path(str(ledger)).exists()
    assert f"ledger: file://{ledger} (0 cells)" in capsys.readouterr().out


async def test_a_ledger_directory_is_not_reused_by_a_second_run(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    args = ("--agent", f"rest+{triage_url}", "--grep", "payment", "--ledger", str(ledger))
    assert (await run_cli(suite, *args)).code == 0
    capsys.readouterr()
    assert (await run_cli(suite, *args)).code == 2
    assert f"the ledger directory {ledger} already holds a run (run.jsonl)" in (
        capsys.readouterr().err
    )


async def recorded(write_suite: Any, url: str, ledger: Path) -> None:
    suite = write_suite(**SUITE)
    await run_cli(suite, "--agent", f"rest+{url}", "--ledger", str(ledger), "--grep", "pod|pay")


async def test_tampering_with_the_run_file_is_caught_by_verify(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger"
    await recorded(write_suite, triage_url, ledger)
    pristine = (ledger / runfile.NAME).read_text()
    victim = ledger_support.cell_where(ledger, "restarts the pod")

    async def check(expected: str, *extra: str) -> None:
        capsys.readouterr()
        assert await asyncio.to_thread(verify, ledger, *extra) == 1
        err = capsys.readouterr().err
        assert expected in err, err
        (ledger / runfile.NAME).write_text(pristine)

    # An edited record breaks its cell's chain at that record.
    ledger_support.rewrite(
        ledger, victim, lambda lines: [line.replace('"failed"', '"passed"') for line in lines]
    )
    await check(f"{victim}: line")
    # A whole cell removed leaves the other chains intact, not the seal.
    lines = pristine.splitlines()
    kept = [line for line in lines if json.loads(line).get("cell") != victim]
    (ledger / runfile.NAME).write_text("\n".join(kept) + "\n")
    await check(f"cell {victim} is sealed but its records are gone")
    # A run cut before its seal did not finish (accepted with --allow-open).
    (ledger / runfile.NAME).write_text("\n".join(lines[:-1]) + "\n")
    await check("has no seal: the run did not finish")
    (ledger / runfile.NAME).write_text("\n".join(lines[:-1]) + "\n")
    capsys.readouterr()
    assert await asyncio.to_thread(verify, ledger, "--allow-open") == 0
    # A line that belongs to no cell.
    (ledger / runfile.NAME).write_text("garbage\n" + pristine)
    await check("run.jsonl line 1: not JSON")
    assert await asyncio.to_thread(verify, ledger) == 0


async def test_verify_and_grade_read_the_old_one_file_per_cell_layout(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger"
    await recorded(write_suite, triage_url, ledger)
    key = recording.key_path(str(ledger))
    old = tmp_path / "old"
    old.mkdir()
    for cell, lines in ledger_support.cells(ledger).items():
        (old / f"{cell}.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    argv = ["ledger", "verify", str(old), "--key-file", str(key)]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert "2 cells verified with the key file" in capsys.readouterr().out
    out = tmp_path / "old.json"
    argv = ["grade", str(old), "--key-file", str(key), "--reporter", f"json:{out}"]
    assert await asyncio.to_thread(cli.main, argv) == 1
    assert sorted(t["status"] for t in json.loads(out.read_text())["tests"]) == [
        "failed",
        "passed",
    ]


def test_cell_names_are_safe_unique_and_stable() -> None:
    a = recording.cell_name("dir/test_a.py::group > one: two", 3)
    assert a == recording.cell_name("dir/test_a.py::group > one: two", 3)
    assert a.endswith(".r3")
    assert a.startswith("dir-test_a.py-group-one-two.")
    assert recording.cell_name("x?", 0) != recording.cell_name("x!", 0)
    assert len(recording.cell_name("t" * 500, 0)) <= 200
    assert json.dumps(recording.cell_name("ünïcode", 0)).isascii()


async def test_closing_the_run_file_writes_at_once_without_waiting_out_the_flush_delay(
    tmp_path: Path,
) -> None:
    # A delay no run would wait out: close() must cut it short, not sleep through it.
    file = runfile.RunFile(tmp_path / "ledger", flush_delay=3600)
    await file.append("cell-a", ['{"x":1}'])
    await asyncio.sleep(0)  # the writer is now waiting for more lines to gather
    await asyncio.wait_for(file.close("SEAL"), timeout=120)
    lines = (tmp_path / "ledger" / runfile.NAME).read_text().splitlines()
    assert lines == [runfile.frame("cell-a", '{"x":1}'), "SEAL"]


async def test_cells_that_end_together_write_the_key_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[Path] = []
    write_key = recording._write_key

    def counting(path: Path, key: bytes) -> None:
        writes.append(path)
        write_key(path, key)

    monkeypatch.setattr(recording, "_write_key", counting)
    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    async with ledger:
        infos = [
            ctx_mod.TestInfo(
                id=f"t.py::t{i}",
                title=f"t{i}",
                name=f"t{i}",
                file="t.py",
                labels=(),
                repeat=0,
                run_id=f"run{i}",
                timeout=10.0,
            )
            for i in range(20)
        ]
        for info in infos:
            await ledger.begin(info)
        await asyncio.gather(
            *(
                ledger.finish(_errored(info), None, agent_error="the agent did not answer")
                for info in infos
            )
        )
    assert writes == [ledger.key_file]
    assert len(ledger.cells) == 20
    assert not ledger.failures
    assert await asyncio.to_thread(verify, tmp_path / "ledger") == 0


def _errored(info: ctx_mod.TestInfo) -> TestResult:
    return TestResult(
        id=info.id, name=info.name, title=info.title, file=info.file, line=1, repeat=0,
        status="errored", run_id=info.run_id, cause="agent", error="timed out",
    )  # fmt: skip


def test_the_run_result_record_keeps_the_whole_run_and_names_what_its_caps_cut() -> None:
    from agent_health.connectors.protocol import ContextItem, Step, TokenUsage
    from agent_health.sdk.results import RunResult

    run = RunResult(
        run_id="r1",
        prompt="Diagnose",
        context=(ContextItem(description="log", value="refused"),),
        output="db-primary is down",
        trajectory=(Step(type="tool_call", tool_name="search_logs", tool_args={"q": "x"}),),
        token_usage=TokenUsage(prompt=10, completion=2, total=12),
        duration_ms=42.5,
        raw={"model": "gpt-x", "finish": ["stop"]},
    )
    # The record is built as JSON; it validates as the ledger's RunResultRecord.
    at = "2026-01-02T03:04:05Z"
    record = records.parse_object(runrecord.run_record(run, at))
    assert isinstance(record, records.RunResultRecord)
    assert record.raw == {"model": "gpt-x", "finish": ["stop"]}  # what the price table reads
    assert record.truncated is None
    assert (record.output, record.duration_ms, record.prompt) == (run.output, 42.5, "Diagnose")
    assert record.trajectory[0]["tool_args"] == {"q": "x"}
    # Over the caps: cut, marked, and named — a replay refuses such a record.
    big = run.model_copy(
        update={
            "output": "x" * (runrecord.RECORD_OUTPUT_CHARS + 5),
            "trajectory_steps": tuple(
                Step(type="assistant", content="y" * 10) for _ in range(runrecord.RECORD_STEPS + 1)
            ),
            "raw": {"blob": "z" * runrecord.RECORD_RAW_CHARS},
        }
    )
    cut = records.parse_object(runrecord.run_record(big, at))
    assert isinstance(cut, records.RunResultRecord)
    assert cut.truncated == ["output", f"trajectory[{runrecord.RECORD_STEPS}:]", "raw"]
    assert len(cut.trajectory) == runrecord.RECORD_STEPS
    assert cut.raw is None
    assert cut.output.endswith("… [5 more characters cut]")
    # What prices the run is kept when the rest of raw is cut (an AG-UI reply's events).
    parts = [{"model": "a", "prompt": 1, "completion": 2, "total": 3}]
    events = ["z" * runrecord.RECORD_RAW_CHARS]
    priced = {"model": "gpt-x", "usage_by_model": parts, "events": events}
    kept = records.parse_object(runrecord.run_record(run.model_copy(update={"raw": priced}), at))
    assert isinstance(kept, records.RunResultRecord)
    assert kept.raw == {"model": "gpt-x", "usage_by_model": parts}
    assert kept.truncated == ["raw"]
    line = records.dump_line(cut)  # the late fields are written only when set
    assert '"truncated":' in line
    assert '"raw"' not in records.dump_line(
        records.parse_object(runrecord.run_record(big.model_copy(update={"raw": {}}), at))
    )


async def test_cells_are_sealed_in_the_writer_thread_not_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from agent_health.ledger import chain

    sealed_in: set[str] = set()
    # Every way to a sealed line (line_of, and the bytes the run file writes) passes here.
    line_bytes_of = chain.Sealer.line_bytes_of

    def watched(self: chain.Sealer, payload: dict[str, Any]) -> bytes:
        sealed_in.add(threading.current_thread().name)
        return line_bytes_of(self, payload)

    monkeypatch.setattr(chain.Sealer, "line_bytes_of", watched)
    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    async with ledger:
        for i in range(3):
            info = _info(i)
            await ledger.begin(info)
            await ledger.finish(_errored(info), None, agent_error="the agent did not answer")
        assert not sealed_in  # finish() handed the cells over and returned
    assert sealed_in
    assert threading.main_thread().name not in sealed_in
    assert len(ledger.cells) == 3
    assert not ledger.failures
    assert await asyncio.to_thread(verify, tmp_path / "ledger") == 0


async def test_a_cell_that_cannot_be_made_or_sealed_is_named_and_the_others_are_kept(
    tmp_path: Path,
) -> None:
    from agent_health.ledger import chain, objects

    file = runfile.RunFile(tmp_path / "ledger")
    key = b"k" * 32
    at = "2026-01-02T03:04:05Z"
    good = [objects.cell_meta(at=at, test_id="t", repeat=0, run_id="a")]
    bad = [objects.cell_meta(at=at, test_id="u", repeat=0, run_id="b")]
    bad.append(objects.signal(at=at, data={"score": float("nan")}))  # not JSON

    def broken() -> list[dict[str, Any]]:  # records made in the writer thread, failing
        raise KeyError("prompt")

    file.append_cell("good", chain.Sealer(key), good)
    file.append_cell("bad", chain.Sealer(key), bad)
    file.append_cell("broken", chain.Sealer(key), broken, count=3)
    await file.close(key=key)
    assert set(file.refused) == {"bad", "broken"}
    assert "not representable as JSON" in file.refused["bad"]
    assert file.refused["broken"] == "its records could not be made: KeyError('prompt')"
    parsed = runfile.parse(file.path, file.path.read_text())
    assert set(parsed.cells) == {"good"}
    assert runfile.check_seal(key, parsed, file.chains) is None


async def test_cells_that_never_wait_are_written_a_batch_at_a_time_not_all_at_the_end(
    tmp_path: Path,
) -> None:
    """Tests that answer in-process never let the loop reach the writer; ``room()`` makes
    them wait while ``wait_bytes`` are buffered, so what waits to be written stays about two
    such batches (one being written, one filling), never the whole run."""
    from agent_health.ledger import chain, objects

    batch, cells = 10, 200
    size = runfile.RECORD_BYTES * batch
    file = runfile.RunFile(tmp_path / "ledger", flush_delay=3600, flush_bytes=size, wait_bytes=size)
    key = b"k" * 32
    appended = 0
    behind: list[int] = []  # per cell made: how many cells had been appended after it

    def made(i: int) -> Any:
        def make() -> list[dict[str, Any]]:
            behind.append(appended - 1 - i)
            return [objects.cell_meta(at="2026-01-02T03:04:05Z", test_id=f"t{i}", repeat=0,
                                      run_id=f"r{i}")]  # fmt: skip

        return make

    for i in range(cells):  # never awaits anything but room()
        file.append_cell(f"cell-{i}", chain.Sealer(key), made(i), count=1)
        appended += 1
        await file.room()
    await file.close(key=key)
    assert len(behind) == cells
    assert max(behind) <= 3 * batch, f"{max(behind)} cells were waiting to be written"
    assert set(runfile.parse(file.path, file.path.read_text()).cells) == {
        f"cell-{i}" for i in range(cells)
    }


def _info(i: int) -> ctx_mod.TestInfo:
    return ctx_mod.TestInfo(
        id=f"t.py::t{i}", title=f"t{i}", name=f"t{i}", file="t.py", labels=(), repeat=0,
        run_id=f"run{i}", timeout=10.0,
    )  # fmt: skip


async def test_a_cells_records_are_made_in_the_writer_thread_dated_when_its_test_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop keeps what a cell is made of; the writer thread makes its records, with the
    times the test began and ended, not the time they were made."""
    import threading
    from types import SimpleNamespace

    made_in: set[str] = set()
    controller_records = recording.controller_records

    def watched(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        made_in.add(threading.current_thread().name)
        return controller_records(*args, **kwargs)

    monkeypatch.setattr(recording, "controller_records", watched)
    clock = iter([1_000_000_000.25, 1_000_000_007.5])  # the test began, then ended
    monkeypatch.setattr(recording, "time", SimpleNamespace(time=lambda: next(clock)))
    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    async with ledger:
        info = _info(0)
        await ledger.begin(info)
        await ledger.finish(_errored(info), None, agent_error="the agent did not answer")
        assert not made_in  # finish() handed the cell over and returned
    assert made_in
    assert threading.main_thread().name not in made_in
    run_file = tmp_path / "ledger" / runfile.NAME
    parsed = runfile.parse(run_file, run_file.read_text())
    lines = parsed.cells[ledger.cells[0]]
    kinds = [json.loads(line)["kind"] for line in lines]
    times = {json.loads(line)["kind"]: json.loads(line)["time"] for line in lines}
    assert kinds == ["cell-meta", "run-result", "cell-end"]
    assert times["cell-meta"] == "2001-09-09T01:46:40.250000Z"
    assert times["run-result"] == times["cell-end"] == "2001-09-09T01:46:47.500000Z"
    assert await asyncio.to_thread(verify, tmp_path / "ledger") == 0


async def test_a_run_stopped_mid_test_keeps_what_each_open_cell_sent_the_agent(
    tmp_path: Path,
) -> None:
    """Cells still open when the ledger closes (Ctrl-C, a closed output) end as errored,
    "interrupted", cause infra, each with the exchanges it had and a run-result that says
    the interruption cut it short (so that a grade blames nobody), and the run file
    verifies."""
    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    async with ledger:
        for i in range(2):
            info = _info(i)
            await ledger.begin(info)
            ledger.observe(
                observation.Observation(
                    run_id=info.run_id,
                    method="POST",
                    path="/run",
                    status=200,
                    started_at=1_000_000_000.0,
                    ended_at=1_000_000_001.0,
                    request_bytes=2,
                    response_bytes=2,
                    request_sha256="0" * 64,
                    response_sha256="1" * 64,
                )
            )
        await ledger.begin(_info(2))  # never reached the agent: nothing to keep
    assert len(ledger.cells) == 2
    assert not ledger.failures
    run_file = tmp_path / "ledger" / runfile.NAME
    parsed = runfile.parse(run_file, run_file.read_text())
    for cell in ledger.cells:
        kept = [json.loads(line) for line in parsed.cells[cell]]
        assert [r["kind"] for r in kept] == ["cell-meta", "exchange", "run-result", "cell-end"]
        end = kept[-1]
        assert (end["status"], end["error"], end["cause"]) == (
            "errored",
            "interrupted before it finished",
            "infra",
        )
        assert kept[2]["cause"] == "infra"
        assert kept[2]["error"].startswith("interrupted before it finished: ")
        assert kept[1]["ended_at"] == "2001-09-09T01:46:41Z"
    assert await asyncio.to_thread(verify, tmp_path / "ledger") == 0


@pytest.mark.parametrize(
    ("kind", "cause"),
    [("run-result", "agent"), ("spans", "agent"), ("exchange", "agent"), ("signal", "infra"),
     ("", "infra")],
)  # fmt: skip
def test_a_cell_refused_for_the_agents_own_records_blames_the_agent(kind: str, cause: str) -> None:
    """A failed test whose cell could not be sealed because of what the agent sent (its
    spans too) is never lifted out of the pass rate as an infrastructure error."""
    failed = TestResult(
        id="t.py::x", name="x", title="x", file="t.py", line=1, status="failed", run_id="r"
    )
    graded = refusal.unrecorded(failed, refusal.Refusal("a value JSON cannot hold", kind))
    assert (graded.status, graded.cause) == ("errored", cause)


async def test_a_flood_of_peer_calls_is_kept_to_the_cells_share_and_marked_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_health.cluster.grading import grading
    from agent_health.ledger import objects

    monkeypatch.setattr(recording, "PEER_RECORDS", 2)
    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    info = ctx_mod.TestInfo(
        id="t.py::floods", title="floods", name="floods", file="t.py", labels=(), repeat=0,
        run_id="run-flood", timeout=10.0,
    )  # fmt: skip
    stamp = objects.stamp_now()
    async with ledger:
        await ledger.begin(info)
        sink = ledger.peer_sink("run-flood")
        for n in range(5):
            sink.start("run-flood").note(
                objects.mcp_call(
                    at=stamp,
                    principal="target",
                    evidence="none",
                    server="peer:tools",
                    run_id="run-flood",
                    session=None,
                    method="tools/call",
                    id=n,
                    name="t",
                    arguments={},
                    status=200,
                    started_at=stamp,
                    ended_at=stamp,
                )
            )
        kept = await ledger.peer_calls("run-flood")
        assert kept is not None
        assert len(kept.records) == 2
        passed = _errored(info).model_copy(update={"status": "passed", "cause": None})
        await ledger.finish(passed, None, agent_error="the agent did not answer")
    assert await asyncio.to_thread(verify, tmp_path / "ledger") == 0
    written = (tmp_path / "ledger" / runfile.NAME).read_text().splitlines()
    line_set = [  # the cell's own lines, as a cell's ledger holds them
        records.canonical(json.loads(line)["record"]).decode()
        for line in written
        if '"record"' in line
    ]
    kept = records.parse_lines(line_set)
    [marker] = [r for r in kept if isinstance(r, records.CellMeta) and r.dropped]
    assert (marker.dropped, marker.dropped_cause) == (3, "agent")
    assert sum(isinstance(r, records.McpRecord) for r in kept) == 2
    # Graded again, the gap is the agent's: never an infra error.
    expected = grading.ExpectedCell(test_id=info.id, repeat=0, run_id="run-flood")
    key = ledger.key_file.read_text().strip().encode()
    graded = grading.grade_lines("c", line_set, key, expected)
    assert not graded.infra
    assert graded.cause == "agent"


async def test_a_local_peers_calls_ride_in_their_exchange_unless_the_test_ends_first(
    tmp_path: Path,
) -> None:
    """As a cell's gateway writes them: an MCP call is sealed in the record of the exchange
    that carried it (version 5); one whose exchange is still open when its test ends (an
    endless stream) is kept alone (version 4); none twice."""
    from agent_health.ledger import objects

    ledger = recording.LocalLedger(f"file://{tmp_path / 'ledger'}")
    info = ctx_mod.TestInfo(
        id="t.py::calls", title="calls", name="calls", file="t.py", labels=(), repeat=0,
        run_id="run-calls", timeout=10.0,
    )  # fmt: skip
    stamp = objects.stamp_now()

    def call(n: int, size: int = 10) -> objects.Object:
        return objects.mcp_call(
            at=stamp, principal="target", evidence="none", server="peer:tools",
            run_id="run-calls", session=None, method="tools/call", id=n, name=f"t{n}",
            arguments={"n": n}, result_bytes=size, status=200, started_at=stamp,
            ended_at=stamp,
        )  # fmt: skip

    def seen(path: str) -> observation.Observation:
        return observation.Observation(
            principal="target", evidence="none", upstream="peer:tools", run_id="run-calls",
            method="POST", path=path, status=200, started_at=1.0, ended_at=2.0,
            request_bytes=1, response_bytes=1, request_sha256="a", response_sha256="b",
        )  # fmt: skip

    async with ledger:
        await ledger.begin(info)
        sink = ledger.peer_sink("run-calls")
        ended, endless = sink.start("run-calls"), sink.start("run-calls")
        ended.note(call(1))
        endless.note(call(2))
        ended.note(call(3))
        ended.finish(seen("/mcp"))
        large = sink.start("run-calls")  # answers past HELD_BYTES: kept alone as they come
        large.note(call(4, recording.HELD_BYTES // 2))
        large.note(call(5, recording.HELD_BYTES // 2 + 1))
        large.finish(seen("/large"))
        passed = _errored(info).model_copy(update={"status": "passed", "cause": None})
        await ledger.finish(passed, None, agent_error="the agent did not answer")
        endless.finish(seen("/endless"))  # after its test: no cell to record it in
    written = (tmp_path / "ledger" / runfile.NAME).read_text().splitlines()
    kept = records.parse_lines(
        [
            records.canonical(json.loads(line)["record"]).decode()
            for line in written
            if '"record"' in line
        ]
    )
    exchange, large_one = [r for r in kept if isinstance(r, records.Exchange)]
    assert (exchange.path, exchange.version) == ("/mcp", 5)
    assert [c.name for c in exchange.mcp or ()] == ["t1", "t3"]
    assert (large_one.path, large_one.version, large_one.mcp) == ("/large", 1, None)
    alone = [(r.name, r.version) for r in kept if isinstance(r, records.McpRecord)]
    assert sorted(alone) == [("t2", 4), ("t4", 4), ("t5", 4)]
    unfolded = [r.name for r in records.unfold(kept) if isinstance(r, records.McpRecord)]
    assert sorted(unfolded) == ["t1", "t2", "t3", "t4", "t5"]


BESIDE = """
from agent_health import test


@test("asks the agent")
async def asks(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_contain("db-primary")


@test("fails")
async def fails(expect):
    expect(1).to_equal(2)
"""


async def test_the_suites_own_files_live_beside_its_config_wherever_the_run_starts(
    triage_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """.agent-health/ used to land in the working directory; now the default ledger, its key
    and the --last-failed cache go beside the suite's config, as the history does, and the
    printed `ledger verify` command runs as printed from where the run started."""
    suite = tmp_path / "project"
    (suite / "tests").mkdir(parents=True)
    (suite / "tests" / "test_beside.py").write_text(BESIDE)
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\n"
        f"config = define_config(agents={{'triage': {{'url': {triage_url!r}}}}}, history=False)\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = await run_cli(suite / "tests")  # the config is found upward, in project/
    assert run.code == 1
    home = suite / ".agent-health"
    [ledger] = [p for p in (home / "ledger").iterdir() if p.is_dir()]
    assert (home / "ledger" / f"{ledger.name}.key").is_file()
    cache = json.loads((home / "last-failed.json").read_text())
    assert cache["suites"] == {str(suite / "tests"): ["test_beside.py::fails"]}
    assert not (elsewhere / ".agent-health").exists()
    assert not (suite / "tests" / ".agent-health").exists()
    printed = capsys.readouterr().out
    assert f"ledger: file://{ledger} (1 cells, key {ledger}.key)" in printed
    verify = printed.split("check it with: ", 1)[1].split("\n", 1)[0].split()
    assert verify[-3:-1] == ["ledger", "verify"]
    checked = await asyncio.to_thread(cli.main, verify[-3:])
    assert checked == 0  # as printed, from where the run started
    # from inside the project, the same cache: --last-failed reruns the one that failed
    monkeypatch.chdir(suite)
    again = await run_cli(Path("tests"), "--last-failed", "--no-ledger")
    assert [t["name"] for t in again.report["tests"]] == ["fails"]
    assert "--last-failed: rerunning 1 of 2 tests" in capsys.readouterr().err
    assert [p.name for p in (home / "ledger").iterdir() if p.is_dir()] == [ledger.name]


async def test_a_ledger_is_whole_when_every_cell_it_recorded_is_sealed(tmp_path: Path) -> None:
    """What the history records as a local run's ``ledger_verified``: the run's own seal
    (every cell it recorded sealed), never a second reading of the ledger."""
    from agent_health.connectors.protocol import Step
    from agent_health.sdk.results import RunResult

    nothing = recording.LocalLedger(f"file://{tmp_path / 'none'}")
    async with nothing:
        await nothing.begin(_info(0))  # never reached the agent
    assert nothing.whole is None

    whole = recording.LocalLedger(f"file://{tmp_path / 'whole'}")
    async with whole:
        await whole.begin(_info(0))
        await whole.finish(_errored(_info(0)), None, agent_error="the agent did not answer")
    assert whole.whole is True
    assert await asyncio.to_thread(verify, tmp_path / "whole") == 0

    # A custom connector's answer holding what JSON cannot: that cell cannot be sealed.
    odd = RunResult(
        run_id="run1",
        prompt="p",
        output="o",
        trajectory=(Step(type="tool_call", tool_name="t", latency_ms=float("nan")),),
    )
    part = recording.LocalLedger(f"file://{tmp_path / 'part'}")
    async with part:
        for i in range(2):
            await part.begin(_info(i))
        await part.finish(_errored(_info(0)), None, agent_error="the agent did not answer")
        await part.finish(_errored(_info(1)), odd)
    assert list(part.refused)
    assert part.failures
    assert part.whole is False


def test_a_passing_run_without_peers_or_budgets_does_no_peer_or_budget_bookkeeping(
    write_suite: Any, monkeypatch: Any
) -> None:
    """A cell with no MCP calls held open has nothing to spill, a run without budgets
    nothing to count, and a test that printed nothing nothing to read back: none of
    them is asked at each test's end (issue #40), and the cell is recorded as before."""
    from agent_health.engine.running import capture, session
    from support.helpers import INPROC_CONFIG, ONE_TEST

    def unexpected(*_: Any) -> Any:
        raise AssertionError("asked at a test's end for nothing")

    monkeypatch.setattr(recording._Cell, "spill", unexpected)
    monkeypatch.setattr(session._Pool, "_over_budget", unexpected)
    monkeypatch.setattr(session._Pool, "_spent", unexpected)
    monkeypatch.setattr(capture.Captured, "stdout", property(unexpected))
    suite = write_suite(**{"agent-health.config.py": INPROC_CONFIG, "test_one.py": ONE_TEST})
    run = run_cli_sync(suite, "--agent", "a", "--no-history")
    assert run.code == 0, run.report
    [entry] = run.report["tests"]
    assert entry["status"] == "passed"
    assert entry["ledger_cell"]
    assert entry["stdout"] is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    score=st.none() | st.floats(),
    weight=st.floats(),
    evidence=st.dictionaries(st.text(max_size=4), _JSON, max_size=4),
)
def test_a_signals_record_data_is_its_plain_json_dump(
    score: float | None, weight: float, evidence: dict[str, Any]
) -> None:
    """A signal's record holds its JSON dump with every NaN and infinity made None —
    ``signal_data`` makes it without walking the whole dump, as ``plain`` did: the same
    data, whatever floats the signal and its evidence hold."""
    from agent_health.sdk.results import Signal

    signal = Signal(
        kind="deterministic",
        role="gate",
        name="n",
        passed=True,
        score=score,
        weight=weight,
        evidence=evidence,
        location="f.py:1",
    )
    assert runrecord.signal_data(signal) == runrecord.plain(signal.model_dump(mode="json"))


def test_a_cells_signal_records_are_made_without_walking_their_dumps(monkeypatch: Any) -> None:
    """controller_records writes each signal with ``signal_data`` (issue #40: ``plain``
    walked every value of every signal's dump in the writer thread); the records are the
    ones ``plain`` made."""
    from agent_health.sdk.results import Signal

    signal = Signal(
        kind="deterministic",
        role="gate",
        name="to_equal('pong')",
        passed=True,
        score=1.0,
        evidence={"expected": "pong", "actual": "pong"},
        location="t.py:3",
    )
    result = TestResult(
        id="t.py::one",
        name="one",
        title="one",
        file="t.py",
        line=1,
        status="passed",
        run_id="r",
        signals=(signal,),
    )
    walked: list[Any] = []
    plain = runrecord.plain

    def counted(value: Any) -> Any:
        walked.append(value)
        return plain(value)

    monkeypatch.setattr(runrecord, "plain", counted)
    records = recording.controller_records(result, None, at="2026-01-01T00:00:00Z")
    assert walked == []
    assert records[0]["signal"] == plain(signal.model_dump(mode="json"))
