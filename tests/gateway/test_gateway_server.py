"""Listeners together: graceful shutdown, /healthz, the controller's record appends, the CLI."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp
import pytest
from agent_health import cli, gateway
from agent_health.cluster.cells import cellgateway
from agent_health.gateway import command, config, guard
from agent_health.ledger import chain, errors, filestore, records
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from support.gateway_support import (
    CELL,
    CONTROLLER_TOKEN,
    HANG,
    HANG_ARRIVED,
    KEY,
    PEER_TOKEN,
    TOKENS,
    controller_route,
    exchanges,
    read_cell,
    serving,
    settings,
    upstream_app,
)


@pytest.fixture
def app() -> web.Application:
    return upstream_app()


@pytest.fixture
async def upstream(app: web.Application) -> AsyncIterator[str]:
    async with serving(app) as url:
        yield url


def _gateway(
    ledger: Path, upstream: str, backend: filestore.FileBackend | None = None, **fields: object
) -> gateway.Gateway:
    s = settings(controller_route(upstream), **fields)
    record = gateway.Recorder(backend or filestore.FileBackend(ledger), KEY, default_cell=CELL)
    return gateway.Gateway(s, tokens=config.Tokens(TOKENS), record=record)


async def test_shutdown_lets_an_exchange_in_flight_finish_and_flushes_it(
    tmp_path: Path, app: web.Application, upstream: str
) -> None:
    gw = _gateway(tmp_path, upstream, grace=30)
    await gw.start()
    async with aiohttp.ClientSession() as client:
        call = asyncio.ensure_future(client.get(gw.url("controller") + "/hang"))
        await app[HANG_ARRIVED].wait()
        stopping = asyncio.ensure_future(gw.stop())
        await asyncio.sleep(0)
        assert gw.stopping
        assert not stopping.done()  # it waits for the exchange the upstream still holds
        app[HANG].set()
        async with await call as response:
            assert response.status == 200
            assert await response.text() == "released"
        await stopping
    [record] = exchanges(tmp_path)
    assert (record.status, record.error) == (200, None)


async def test_shutdown_past_the_grace_cuts_and_records_the_exchange(
    tmp_path: Path, app: web.Application, upstream: str
) -> None:
    gw = _gateway(tmp_path, upstream, grace=0.05)
    await gw.start()
    async with aiohttp.ClientSession() as client:
        call = asyncio.ensure_future(client.get(gw.url("controller") + "/hang"))
        await app[HANG_ARRIVED].wait()
        await gw.stop()
        with pytest.raises(aiohttp.ClientError):
            await call
    app[HANG].set()
    [record] = exchanges(tmp_path)
    assert record.error == "the gateway stopped before the exchange finished"


class _FailingBackend(filestore.FileBackend):
    """A real file backend whose appends fail once ``broken`` is set (a full disk)."""

    broken = False

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        if self.broken:
            raise errors.BackendError(f"cannot append to ledger {cell}: No space left on device")
        await super().append(cell, lines)


async def test_healthz_reports_ledger_failures_as_unhealthy(tmp_path: Path, upstream: str) -> None:
    backend = _FailingBackend(tmp_path)
    async with _gateway(tmp_path, upstream, backend) as gw, aiohttp.ClientSession() as client:
        async with client.get(f"{gw.admin_url}/healthz") as response:
            assert response.status == 200
            health = await response.json()
        assert health["ok"] is True
        assert health["routes"][0]["url"] == gw.url("controller")
        backend.broken = True
        async with client.get(gw.url("controller") + "/echo") as response:
            assert response.status == 200  # the caller is served even when recording fails
        await gw.recorder.flush(CELL)  # type: ignore[union-attr]
        async with client.get(f"{gw.admin_url}/healthz") as response:
            assert response.status == 503
            health = await response.json()
    assert "No space left on device" in health["ledger_failures"][0]


async def test_only_the_controller_appends_records_and_only_its_kinds(
    tmp_path: Path, upstream: str
) -> None:
    records_url = "/ledger/records"
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        admin = gw.admin_url
        async with client.get(gw.url("controller") + "/echo") as response:
            assert response.status == 200
        body = [{"kind": "run-result", "run_id": "r", "output": "ok"}]
        for token in (None, PEER_TOKEN, "forged"):
            headers = {gateway.TOKEN_HEADER: token} if token else {}
            async with client.post(admin + records_url, json=body, headers=headers) as response:
                assert response.status == 403
        mine = {gateway.TOKEN_HEADER: CONTROLLER_TOKEN}
        forged = [{"kind": "exchange", "principal": "controller"}]
        async with client.post(admin + records_url, json=forged, headers=mine) as response:
            assert response.status == 422
        signal_record = {"kind": "signal", "signal": {"name": "x"}}
        ok = [*body, signal_record, {"kind": "cell-end", "status": "passed"}]
        async with client.post(admin + records_url, json=ok, headers=mine) as response:
            assert response.status == 200
            assert (await response.json())["seqs"] == [5, 6, 7]
        async with client.post(admin + records_url, json=body, headers=mine) as response:
            assert response.status == 409  # the cell has ended
    kinds = [r.kind for r in read_cell(tmp_path)]
    assert kinds == ["cell-meta", *["exchange"] * 4, "run-result", "signal", "cell-end"]
    refused = [(e.principal, e.evidence, e.upstream, e.status) for e in exchanges(tmp_path)[1:]]
    assert refused == [
        ("target", "none", "gateway", 403),
        ("peer:tools", gateway.token_id(PEER_TOKEN), "gateway", 403),
        ("target", "invalid-token", "gateway", 403),
    ]
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY).ok


async def test_a_restarted_gateway_continues_the_cell_and_says_it_restarted(
    tmp_path: Path, upstream: str
) -> None:
    for _ in range(2):
        async with (
            _gateway(tmp_path, upstream) as gw,
            aiohttp.ClientSession() as client,
            client.get(gw.url("controller") + "/echo") as response,
        ):
            assert response.status == 200
    found = read_cell(tmp_path)
    assert [r.kind for r in found] == ["cell-meta", "exchange", "cell-meta", "exchange"]
    first, again = found[0], found[2]
    assert isinstance(first, records.CellMeta)
    assert isinstance(again, records.CellMeta)
    assert (first.restarted, again.restarted) == (None, True)
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=False).ok


async def test_a_matrix_cell_names_its_agent_in_the_cell_meta(
    tmp_path: Path, upstream: str
) -> None:
    async with (
        _gateway(tmp_path, upstream, agent="candidate") as gw,
        aiohttp.ClientSession() as client,
        client.get(gw.url("controller") + "/echo") as response,
    ):
        assert response.status == 200
    meta = read_cell(tmp_path)[0]
    assert isinstance(meta, records.CellMeta)
    assert meta.agent == "candidate"
    route = "principal=controller,listen=127.0.0.1:1,upstream=http://a:1"
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    flags = parser.parse_args(["--route", route, "--agent", "candidate"])
    assert command.settings(flags, {}).agent == "candidate"


async def test_a_port_in_use_is_a_clear_error(tmp_path: Path, upstream: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        route = f"principal=controller,listen=127.0.0.1:{port},upstream={upstream}"
        gw = gateway.Gateway(config.build({"routes": [config.parse_route(route)]}))
        with pytest.raises(gateway.GatewayConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            await gw.start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
async def test_the_gateway_command_serves_records_and_stops_on_sigterm(
    tmp_path: Path, upstream: str
) -> None:
    key_file, token_file = tmp_path / "key", tmp_path / "controller.token"
    key_file.write_bytes(KEY)
    token_file.write_text(CONTROLLER_TOKEN + "\n")
    port, admin = _free_port(), _free_port()
    ledger = tmp_path / "ledger"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_health.cli",
        "gateway",
        "--route",
        f"principal=controller,listen=127.0.0.1:{port},upstream={upstream}",
        "--ledger",
        f"file://{ledger}",
        "--key-file",
        str(key_file),
        "--cell",
        "pod-1",
        "--run-id",
        "run-9",
        "--test-id",
        "t.py::x",
        "--token",
        f"controller={token_file}",
        "--admin",
        f"127.0.0.1:{admin}",
        stderr=subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as client:
            while True:
                try:
                    async with client.get(f"http://127.0.0.1:{admin}/healthz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    assert proc.returncode is None, "the gateway exited before it was ready"
                    await asyncio.sleep(0.05)
            headers = {gateway.TOKEN_HEADER: CONTROLLER_TOKEN}
            async with client.get(f"http://127.0.0.1:{port}/echo", headers=headers) as response:
                seen = await response.json()
            end = [{"kind": "cell-end", "status": "passed"}]
            url = f"http://127.0.0.1:{admin}/ledger/records"
            async with client.post(url, json=end, headers=headers) as response:
                assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        _, stderr = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    assert seen["headers"][gateway.RUN_ID_HEADER.lower()] == "run-9"
    [record] = exchanges(ledger, "pod-1")
    assert (record.principal, record.run_id) == ("controller", "run-9")
    code = await asyncio.to_thread(
        cli.main, ["ledger", "verify", str(ledger), "--key-file", str(key_file)]
    )
    assert code == 0
    meta = json.loads((ledger / "pod-1.jsonl").read_text().splitlines()[0])
    assert (meta["test_id"], meta["run_id"]) == ("t.py::x", "run-9")


async def test_the_health_listener_answers_healthz_and_takes_no_records(
    tmp_path: Path, upstream: str
) -> None:
    """``--health`` (outside cells) is reachable by anyone: it answers ``{"ok": ...}`` alone
    and refuses an append even with the controller's token — and nothing sent to it reaches
    the ledger: a flood of pushes from another pod leaves no record."""
    sockets = Path(tempfile.mkdtemp(prefix="ah-gw-"))
    try:
        gw = _gateway(
            tmp_path, upstream, cell=CELL, admin=f"unix:{sockets}/admin.sock", health="127.0.0.1:0"
        )
        async with gw, aiohttp.ClientSession() as client:
            assert gw.admin_url == f"unix:{sockets}/admin.sock"
            assert gw.health_url is not None
            async with client.get(gw.health_url + "/healthz") as response:
                assert response.status == 200
                assert await response.json() == {"ok": True}  # no routes, ledger or counts
            ending = [{"kind": "cell-end", "status": "passed"}]
            mine = {gateway.TOKEN_HEADER: CONTROLLER_TOKEN}
            url = gw.health_url + "/ledger/records"
            async with client.post(url, json=ending, headers=mine) as response:
                assert response.status == 404
                assert "serves GET /healthz only" in await response.text()
            for n in range(150):  # more than --max-refused-records: none of it is kept
                async with client.post(f"{gw.health_url}/x{n}", data=b"junk") as response:
                    assert response.status == 404
            through = aiohttp.UnixConnector(path=f"{sockets}/admin.sock")
            async with (
                aiohttp.ClientSession(connector=through) as local,
                local.post("http://gateway/ledger/records", json=ending, headers=mine) as response,
            ):
                assert response.status == 200, await response.text()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    found = read_cell(tmp_path)
    assert [r.kind for r in found] == ["cell-meta", "cell-end"]


async def test_the_cells_probe_asks_healthz_over_the_admin_socket(
    tmp_path: Path, upstream: str
) -> None:
    """The exec probe a cell's gateway is started with, run for real: 0 while the gateway
    serves and its ledger works, 1 when it does not, non-zero when nothing listens."""
    sockets = Path(tempfile.mkdtemp(prefix="ah-gw-"))
    admin_socket = f"{sockets}/admin.sock"

    async def probe() -> int:
        command = [sys.executable if c == "python" else c for c in cellgateway.probe_command()]
        command[-1] = admin_socket
        done = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return await done.wait()

    try:
        assert await probe() != 0  # not started: no socket
        gw = _gateway(tmp_path, upstream, cell=CELL, admin=f"unix:{admin_socket}")
        async with gw:
            assert await probe() == 0
            assert gw.recorder is not None
            gw.recorder.failures.append("the ledger refused a write")  # unhealthy: 503
            assert await probe() == 1
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


async def test_a_call_on_a_connection_closed_at_the_limit_before_it_was_handled_is_not_forwarded(
    upstream: str,
) -> None:
    """At the connection limit the listener closes an idle connection, and one whose head has
    arrived but is not yet handled looks idle; its call must then go nowhere: its caller can
    no longer read the answer, so the upstream must not act on it."""
    forwarded: list[str] = []

    async def forward(request: web.BaseRequest) -> web.StreamResponse:
        forwarded.append(request.path)
        return web.Response(text="forwarded")

    listener = guard.Listener(forward, settings(controller_route(upstream)), "target→agent")
    authority = upstream.split("//", 1)[1]
    host, _, port = authority.rpartition(":")
    loop = asyncio.get_running_loop()
    closed, _ = await loop.create_connection(asyncio.Protocol, host, int(port))
    opened, _ = await loop.create_connection(asyncio.Protocol, host, int(port))
    closed.close()  # what Listener.connection_made does to the oldest idle connection
    try:
        dropped = await listener.request_handler(
            make_mocked_request("POST", "/hang", transport=closed)
        )
        served = await listener.request_handler(
            make_mocked_request("POST", "/run", transport=opened)
        )
    finally:
        opened.close()
    assert (dropped.status, served.status) == (503, 200)
    assert forwarded == ["/run"]
    assert listener.dropped_calls == 1
