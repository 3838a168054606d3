"""A target that attacks the gateway's memory (a real ``python -m agent_health.gateway``
process, its RSS sampled as in test_hostile_flood): 200 responses of 1 MiB each in flight
at once, then a gzip bomb of 1 MiB on the wire (1 GiB of JSON) as its answer to the
controller. The gateway stays far below its container's memory limit, streams every byte,
and still records the usage of every response it could read."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from agent_health import gateway
from agent_health.ledger import chain, records, usage
from support import hostile_support
from support.hostile_support import CELL, TOKEN, Sampler, free_port, hostile_target, read_report

KEY = b"m" * 48
RESPONSES, SIZE = 200, 1024 * 1024
GATEWAY_LIMIT = 256 * 1024 * 1024  # the chart's default memory limit of the gateway container


@contextlib.asynccontextmanager
async def gateway_process(
    tmp_path: Path, upstream_port: int, ports: dict[str, int]
) -> AsyncIterator[asyncio.subprocess.Process]:
    (tmp_path / "key").write_bytes(KEY)
    (tmp_path / "token").write_text(TOKEN)
    upstream = f"http://127.0.0.1:{upstream_port}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.gateway",
        "--route", f"principal=controller,listen=127.0.0.1:{ports['route']},upstream={upstream}",
        "--route",
        f"principal=target,to=peer:tools,listen=127.0.0.1:{ports['peer']},upstream={upstream}",
        "--ledger", f"file://{tmp_path / 'ledger'}", "--key-file", str(tmp_path / "key"),
        "--cell", CELL, "--run-id", CELL, "--test-id", "memory",
        "--token", f"controller={tmp_path / 'token'}",
        "--admin", f"127.0.0.1:{ports['admin']}",
        # Room for every one of the target's calls at once: the memory bound must not rest
        # on the limit of calls in flight.
        "--max-connections", "256", "--max-untrusted-calls", str(RESPONSES + 10),
        "--grace", "5",
    )  # fmt: skip
    async with hostile_support.serving(
        proc, f"http://127.0.0.1:{ports['admin']}/healthz", stop_seconds=60
    ) as served:
        yield served


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_large_responses_and_a_gzip_bomb_leave_the_gateway_within_its_limit(
    tmp_path: Path,
) -> None:
    hostile_port = free_port()
    ports = {"route": free_port(), "peer": free_port(), "admin": free_port()}
    route, peer = (f"http://127.0.0.1:{ports[k]}" for k in ("route", "peer"))
    report = tmp_path / "report.jsonl"
    sizes = {"responses": RESPONSES, "size": SIZE, "bomb_mib": 1024}
    async with (
        hostile_target(
            hostile_port, report, {"routes": [peer]}, answer="good", attacks="memory",
            env={"HOSTILE_MEMORY": json.dumps(sizes)},
        ),
        gateway_process(tmp_path, hostile_port, ports) as proc,
        aiohttp.ClientSession(auto_decompress=False) as client,
    ):  # fmt: skip
        sampler = Sampler(proc.pid)
        sampling = asyncio.ensure_future(sampler.run())
        call = {"prompt": "Diagnose", "run_id": CELL}
        headers = {gateway.TOKEN_HEADER: TOKEN}
        timeout = aiohttp.ClientTimeout(total=240)
        async with client.post(f"{route}/run", json=call, headers=headers, timeout=timeout) as r:
            assert r.status == 200
            assert r.headers["Content-Encoding"] == "gzip"
            bomb = len(await r.read())
        sampler.stop()
        await sampling
        [done] = [line for line in read_report(report) if "memory" in line]

    peak, growth = sampler.peak, sampler.peak - sampler.baseline
    print(f"gateway RSS: baseline {sampler.baseline >> 20} MiB, peak {peak >> 20} MiB "
          f"({sampler.samples} samples); bomb {bomb >> 10} KiB")  # fmt: skip
    assert done["large"] == [[200, SIZE]] * RESPONSES, done["large"][:3]
    assert bomb == done["bomb_bytes"]
    assert 900 * 1024 < bomb < 1200 * 1024
    assert peak < GATEWAY_LIMIT, f"the gateway peaked at {peak >> 20} MiB"
    assert growth < 96 * 1024 * 1024, f"the gateway grew by {growth >> 20} MiB"
    assert proc.returncode == 0

    lines = (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=False).ok
    exchanges = [r for r in map(records.parse_line, lines) if isinstance(r, records.Exchange)]
    large = [e for e in exchanges if e.path == "/large"]
    assert len(large) == RESPONSES
    read = usage.TokenUsage(input_tokens=3, output_tokens=4, total_tokens=7, model="big")
    assert all(e.usage == read and e.response_bytes == SIZE for e in large)
    [answer] = [e for e in exchanges if e.path == "/run"]
    assert (answer.status, answer.response_bytes, answer.usage) == (200, bomb, None)
