"""A cell's gateway with ``--spool``: the cell reaches the ledger in one write, at its end,
and a gateway restarted mid-cell loses nothing it had sealed."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agent_health import gateway
from agent_health.gateway import command, config
from agent_health.ledger import chain, records, spool
from support.gateway_support import (
    CELL,
    CONTROLLER_TOKEN,
    KEY,
    TOKENS,
    controller_route,
    serving,
    upstream_app,
)
from support.gateway_support import settings as gateway_settings


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with serving(upstream_app()) as url:
        yield url


def _settings(tmp_path: Path, upstream: str) -> config.Settings:
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    token_files: dict[str, Any] = {}
    for principal, token in TOKENS.items():
        path = tmp_path / f"{principal.replace(':', '-')}.token"
        path.write_text(token)
        token_files[principal] = str(path)
    return gateway_settings(
        controller_route(upstream),
        ledger_url=f"file://{tmp_path / 'ledger'}",
        key_file=str(key_file),
        spool=str(tmp_path / "spool"),
        token_files=token_files,
        test_id="t",
    )


@contextlib.asynccontextmanager
async def _started(settings: config.Settings, *, killed: bool = False) -> AsyncIterator[Any]:
    """A gateway built as ``agent-health gateway`` builds it; ``killed``: it goes away without
    its shutdown (what it spooled stays in the spool, as when the kubelet kills it)."""
    gw = await gateway.Gateway.from_settings(settings)
    await gw.start()
    try:
        yield gw
    finally:
        if killed:
            assert gw.recorder is not None
            await gw.recorder.flush_all()  # the exchanges reached the spool before the kill
            gw.owns_recorder = False  # no close: nothing is sent on
        await gw.stop()


async def _call(client: aiohttp.ClientSession, gw: Any, path: str = "/echo") -> None:
    async with client.get(gw.url("controller") + path) as response:
        assert response.status == 200


async def _end(client: aiohttp.ClientSession, gw: Any) -> None:
    body = [
        {"kind": "run-result", "run_id": "r", "output": "ok"},
        {"kind": "cell-end", "status": "passed"},
    ]
    headers = {gateway.TOKEN_HEADER: CONTROLLER_TOKEN}
    async with client.post(gw.admin_url + "/ledger/records", json=body, headers=headers) as sent:
        assert sent.status == 200, await sent.text()


def _ledger(tmp_path: Path) -> list[records.Record]:
    return records.parse_lines((tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines())


async def test_a_cell_reaches_the_ledger_in_one_write_at_its_end(
    tmp_path: Path, upstream: str
) -> None:
    async with _started(_settings(tmp_path, upstream)) as gw, aiohttp.ClientSession() as client:
        for _ in range(3):
            await _call(client, gw)
        await gw.recorder.flush_all()
        assert not (tmp_path / "ledger" / f"{CELL}.jsonl").exists()  # all of it in the spool
        assert (tmp_path / "spool" / f"{CELL}.jsonl").exists()
        await _end(client, gw)
        assert isinstance(gw.recorder.backend, spool.SpooledBackend)
        assert gw.recorder.backend.writes == 1
        assert not (tmp_path / "spool" / f"{CELL}.jsonl").exists()
    kinds = [r.kind for r in _ledger(tmp_path)]
    assert kinds == ["cell-meta", "exchange", "exchange", "exchange", "run-result", "cell-end"]
    lines = (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY).ok


async def test_a_gateway_killed_mid_cell_loses_nothing_it_had_sealed(
    tmp_path: Path, upstream: str
) -> None:
    settings = _settings(tmp_path, upstream)
    async with aiohttp.ClientSession() as client:
        async with _started(settings, killed=True) as gw:
            await _call(client, gw, "/echo?before")
        assert not (tmp_path / "ledger" / f"{CELL}.jsonl").exists()
        async with _started(settings) as gw:  # the kubelet starts it again, same emptyDir
            await _call(client, gw, "/echo?after")
            await _end(client, gw)
    found = _ledger(tmp_path)
    assert [r.kind for r in found] == [
        "cell-meta", "exchange", "cell-meta", "exchange", "run-result", "cell-end",
    ]  # fmt: skip
    first, again = found[0], found[2]
    assert isinstance(first, records.CellMeta)
    assert isinstance(again, records.CellMeta)
    assert (first.restarted, again.restarted) == (None, True)  # the grade still says infra
    lines = (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY).ok


async def test_a_gateway_stopped_before_its_cell_ends_sends_what_it_holds(
    tmp_path: Path, upstream: str
) -> None:
    async with _started(_settings(tmp_path, upstream)) as gw, aiohttp.ClientSession() as client:
        await _call(client, gw)
    assert [r.kind for r in _ledger(tmp_path)] == ["cell-meta", "exchange"]


async def test_a_spool_it_cannot_write_stops_the_gateway_at_start(
    tmp_path: Path, upstream: str
) -> None:
    (tmp_path / "spool").write_text("a file where the directory should be")
    with pytest.raises(gateway.GatewayConfigError, match=r"spool directory .* not writable"):
        await gateway.Gateway.from_settings(_settings(tmp_path, upstream))


def test_the_command_line_takes_the_spool() -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(
        ["--route", "principal=controller,listen=127.0.0.1:0,upstream=http://127.0.0.1:9",
         "--spool", "/tmp/s", "--spool-max-bytes", "4096"]
    )  # fmt: skip
    built = command.settings(args, environ={})
    assert (built.spool, built.spool_max_bytes) == ("/tmp/s", 4096)
