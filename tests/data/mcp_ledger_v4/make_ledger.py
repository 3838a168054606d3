"""How ``cell-1.jsonl`` here was made: a cell's ledger as a gateway before version 5 wrote
it — each MCP call its own ``mcp`` record (version 4) beside its exchange's ``exchange``
record — kept so that every reader is held to read such ledgers as it did
(``tests/ledger/test_ledger_mcp_shapes.py``).

Run once, with the code of ``main`` at 9ac1d5e (before MCP calls rode inside their
exchange's record), from the repository's root::

    .venv/bin/python tests/data/mcp_ledger_v4/make_ledger.py

It drives honest and hostile MCP traffic (the loopback server of
``tests/support/mcp_support.py``) through a real recording gateway, then appends the
controller's records: a run-result whose trajectory claims some calls it made, one it
never made and leaves out others, signals of tool matchers, and cell-end. The key is
``key`` here (``gateway_support.KEY``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/, for support

from agent_health.ledger import records  # noqa: E402
from support import mcp_support  # noqa: E402
from support.gateway_support import CELL, KEY, RUN_ID, through  # noqa: E402

PEER = "peer:tools"
TEST = "t.py::uses its tools"
TRAJECTORY = [
    {"type": "tool_call", "tool_name": "echo", "tool_args": {"city": "Oslo"}},
    {"type": "tool_result", "tool_name": "echo", "tool_output": "Oslo", "status": "ok"},
    {"type": "tool_call", "tool_name": "fail", "tool_args": {}},
    {"type": "tool_result", "tool_name": "fail", "tool_output": "fine", "status": "ok"},
    {"type": "tool_call", "tool_name": "search", "tool_args": {"q": "x"}},
    {"type": "tool_result", "tool_name": "search", "tool_output": "none", "status": "ok"},
]
SIGNALS = [
    ("to_have_called_tool('echo')", {"tool": "echo", "args": {"city": "Oslo"}, "times": ">=1"}),
    (
        "to_have_called_tool('echo', server='tools')",
        {"tool": "echo", "args": None, "times": ">=1", "server": "tools"},
    ),
    ("to_have_called_tool('search')", {"tool": "search", "args": None, "times": ">=1"}),
    ("to_have_called_tools_in_order(['echo', 'fail'])", ["echo", "fail"]),
    ("to_have_called_tools_in_order(['fail', 'echo'])", ["fail", "echo"]),
    ("to_have_called_tools_in_steps([['echo'], ['fail']])", [["echo"], ["fail"]]),
    ("to_have_no_tool_errors()", []),
]


def signal(name: str, expected: Any) -> records.SignalRecord:
    data = {
        "kind": "deterministic",
        "role": "gate",
        "name": name,
        "passed": True,
        "score": 1.0,
        "weight": 1.0,
        "evidence": {"expected": expected, "actual": {}},
    }
    return records.SignalRecord(signal=data)


async def post(client: Any, url: str, body: Any, **headers: str) -> dict[str, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    heads = {**mcp_support.ACCEPT, "Content-Type": "application/json", **headers}
    async with client.post(url, data=data, headers=heads) as response:
        await response.read()
        return dict(response.headers)


async def main(out: Path) -> None:
    from support.gateway_support import serving

    route = f"principal=target,to={PEER},listen=127.0.0.1:0,upstream={{}},protocol=mcp"
    with tempfile.TemporaryDirectory() as tmp:
        async with serving(mcp_support.app()) as upstream:  # noqa: SIM117 (as it was run)
            async with through(Path(tmp), route.format(upstream), test_id=TEST) as (gw, client):
                base = gw.url("target", PEER)
                url = base + "/mcp"
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
                sid = {"Mcp-Session-Id": (await post(client, url, init))["Mcp-Session-Id"]}
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                await post(client, url, note, **sid)
                await post(
                    client, url, {"jsonrpc": "2.0", "id": "l", "method": "tools/list"}, **sid
                )
                await post(client, url, mcp_support.call(1, "echo", city="Oslo"), **sid)
                await post(client, url, mcp_support.call(2, "fail"), **sid)
                await post(client, url, mcp_support.call(3, "liar"), **sid)
                await post(client, url, mcp_support.call(4, "missing"), **sid)
                batch = [mcp_support.call(7, "echo", n=1), mcp_support.call("b", "fail")]
                await post(client, url + "?sse=1", batch, **sid)
                read = {"jsonrpc": "2.0", "id": 5, "method": "resources/read",
                        "params": {"uri": "file:///notes.txt"}}  # fmt: skip
                await post(client, url, read, **sid)
                prompt = {"jsonrpc": "2.0", "id": 6, "method": "prompts/get",
                          "params": {"name": "greet", "arguments": {"who": "you"}}}  # fmt: skip
                await post(client, url, prompt, **sid)
                await post(client, url, b"{not json", **sid)
                await post(client, url, {"jsonrpc": "1.0", "id": 8, "method": "tools/call"}, **sid)
                await post(client, base + "/garbage", mcp_support.call(9, "echo"))
                collide = [mcp_support.call(10, "echo", a=1), mcp_support.call(11, "echo", a=2)]
                await post(client, base + "/collide", collide)
                await post(client, base + "/huge?mb=2", mcp_support.call(12, "echo"))
                assert gw.recorder is not None
                now = datetime.now(UTC)
                run = records.RunResultRecord(
                    run_id=RUN_ID, prompt="p", output="done", trajectory=TRAJECTORY, time=now
                )
                signals = [signal(name, expected) for name, expected in SIGNALS]
                end = records.CellEnd(status="passed", duration_ms=1.0, time=now)
                await gw.recorder.append(CELL, run, *signals, end)
        shutil.copy(Path(tmp) / f"{CELL}.jsonl", out / f"{CELL}.jsonl")
    (out / "key").write_bytes(KEY + b"\n")


if __name__ == "__main__":
    asyncio.run(main(HERE))
