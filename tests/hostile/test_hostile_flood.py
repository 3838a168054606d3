"""A target that floods its gateway: the gateway (a real ``python -m agent_health.gateway``
process) stays within bounded memory, enforces its limits with clear answers, keeps serving
the controller, and records the refusals up to its cap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agent_health import gateway
from agent_health.ledger import chain, records
from support import hostile_support
from support.hostile_agent import stream_until_answered
from support.hostile_support import CELL, TOKEN, Sampler, free_port, hostile_target, read_report

KEY = b"f" * 48
HUGE = 200 * 1024 * 1024
MAX_CONNECTIONS, MAX_UNTRUSTED, ADMIN_MAX, REFUSED_CAP = 64, 16, 4 * 1024 * 1024, 500
RSS_BOUND = 150 * 1024 * 1024


@contextlib.asynccontextmanager
async def gateway_process(
    tmp_path: Path, hostile_port: int, ports: dict[str, int]
) -> AsyncIterator[asyncio.subprocess.Process]:
    (tmp_path / "key").write_bytes(KEY)
    (tmp_path / "token").write_text(TOKEN)
    upstream = f"http://127.0.0.1:{hostile_port}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.gateway",
        "--route", f"principal=controller,listen=127.0.0.1:{ports['route']},upstream={upstream}",
        "--route",
        f"principal=target,to=peer:tools,listen=127.0.0.1:{ports['peer']},upstream={upstream}",
        "--ledger", f"file://{tmp_path / 'ledger'}", "--key-file", str(tmp_path / "key"),
        "--cell", CELL, "--run-id", CELL, "--test-id", "flood",
        "--token", f"controller={tmp_path / 'token'}",
        "--admin", f"127.0.0.1:{ports['admin']}",
        "--header-timeout", "1", "--max-connections", str(MAX_CONNECTIONS),
        "--max-untrusted-calls", str(MAX_UNTRUSTED), "--admin-max-bytes", str(ADMIN_MAX),
        "--max-refused-records", str(REFUSED_CAP), "--grace", "2",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with hostile_support.serving(
        proc, f"http://127.0.0.1:{ports['admin']}/healthz", stop_seconds=30
    ) as served:
        yield served


async def wait_for_line(report: Path, key: str, value: str) -> dict[str, Any]:
    for _ in range(1200):
        for line in read_report(report):
            if line.get(key) == value or line.get(key) == "crashed":
                assert line.get(key) == value, line
                return line
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {key}={value} in the hostile report: {read_report(report)}")


async def declared_length(url: str, length: int) -> int:
    """A request head declaring ``length`` bytes, no body sent: the status the gateway gives."""
    authority = url.split("//", 1)[1].split("/", 1)[0]
    host, _, port = authority.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"POST /ledger/records HTTP/1.1\r\nHost: {authority}\r\n"
            f"{gateway.TOKEN_HEADER}: {TOKEN}\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        await writer.drain()
        return int((await asyncio.wait_for(reader.readline(), 30)).split()[1])
    finally:
        writer.close()


@pytest.mark.slow
async def test_a_flooding_target_leaves_the_gateway_bounded_and_the_controller_served(
    tmp_path: Path,
) -> None:
    hostile_port = free_port()
    ports = {"route": free_port(), "peer": free_port(), "admin": free_port()}
    route, admin = (f"http://127.0.0.1:{ports[k]}" for k in ("route", "admin"))
    peer = f"http://127.0.0.1:{ports['peer']}"
    report = tmp_path / "report.jsonl"
    targets = {"admin": admin, "routes": [route, peer]}
    flood = {"connections": 300, "hanging": 100, "huge": HUGE, "slow": 5,
             "slow_seconds": 10.0, "expect_hanging": MAX_UNTRUSTED}  # fmt: skip
    mine = {gateway.TOKEN_HEADER: TOKEN}
    async with (
        hostile_target(
            hostile_port, report, targets, answer="good", attacks="flood",
            env={"HOSTILE_FLOOD": json.dumps(flood)},
        ),
        gateway_process(tmp_path, hostile_port, ports) as proc,
        aiohttp.ClientSession() as client,
    ):  # fmt: skip
        sampler = Sampler(proc.pid)
        sampling = asyncio.ensure_future(sampler.run())
        call = {"prompt": "Diagnose", "run_id": CELL}
        async with client.post(f"{route}/run", json=call, headers=mine) as response:
            assert response.status == 200  # the controller's call sets the target off
        started = await wait_for_line(report, "flood", "started")
        assert started["hanging_arrived"] == MAX_UNTRUSTED

        # While the flood runs, the controller is served and the admin limits hold.
        status, sent = await stream_until_answered(f"{admin}/ledger/records", HUGE, mine)
        assert status == 413
        assert sent < HUGE  # refused while the body was still streaming
        assert await declared_length(f"{admin}/ledger/records", HUGE) == 413
        async with client.post(f"{route}/run", json=call, headers=mine) as response:
            assert response.status == 200
            assert "db-primary" in (await response.json())["output"]
        done = await wait_for_line(report, "flood", "done")
        async with client.get(f"{admin}/healthz") as response:
            health = await response.json()
        ending = [
            {"kind": "run-result", "run_id": CELL, "output": "db-primary is down"},
            {"kind": "cell-end", "status": "passed"},
        ]
        async with client.post(f"{admin}/ledger/records", json=ending, headers=mine) as response:
            assert response.status == 200, await response.text()
        sampler.stop()
        await sampling

    growth = sampler.peak - sampler.baseline
    print(f"gateway RSS: baseline {sampler.baseline >> 20} MiB, peak {sampler.peak >> 20} MiB "
          f"({sampler.samples} samples); flood: {json.dumps(done)[:600]}")  # fmt: skip
    assert growth < RSS_BOUND, f"the gateway grew by {growth >> 20} MiB under the flood"
    assert proc.returncode == 0

    # The target's 200 MB to the admin listener: refused (403) before its body was read.
    admin_status, admin_sent = done["admin_huge"]
    assert admin_status == 403
    assert admin_sent < HUGE
    # Its 200 MB through a route streamed to its own sink, whole, without buffering.
    assert done["route_huge"] == [200, HUGE]
    assert done["slowloris"] == ["cut"] * 5  # heads trickled past --header-timeout
    assert done["idle_closed_by_gateway"] == done["idle_opened"] == 600
    # Exactly the allowed number of calls without a token reached the target; the others
    # were refused with 503 or (evicted at the connection limit) closed.
    assert done["hanging_reached_us"] == MAX_UNTRUSTED
    assert done["hanging"].count("held") == MAX_UNTRUSTED
    assert done["hanging"].count("503") >= 1
    assert set(done["hanging"]) <= {"held", "503", "error: ServerDisconnectedError",
                                    "error: ClientOSError"}  # fmt: skip
    assert 0 < health["refused_recorded"] < REFUSED_CAP
    assert health["refused_unrecorded"] == 0

    lines = (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=True).ok
    parsed = [records.parse_line(line) for line in lines]
    refused = [r for r in parsed if isinstance(r, records.Exchange) and r.upstream == "gateway"]
    assert len(refused) == health["refused_recorded"]
    seen = {(r.principal, r.evidence, r.status, r.path) for r in refused}
    assert seen == {
        ("target", "none", 503, "/hang"),  # over --max-untrusted-calls
        ("target", "none", 403, "/ledger/records"),  # its 200 MB append
        ("controller", gateway.token_id(TOKEN), 413, "/ledger/records"),  # ours, both ways
    }
    served = [
        (r.path, r.status, r.evidence)
        for r in parsed
        if isinstance(r, records.Exchange)
        and r.principal == "controller"
        and r.upstream != "gateway"
    ]
    assert served == [("/run", 200, gateway.token_id(TOKEN))] * 2  # before and during the flood
