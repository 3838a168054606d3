"""A metered agent for budget and matrix tests: a real REST agent (protocol v1) on 127.0.0.1
whose spend each test chooses.

The request's ``env`` decides the answer: ``TOKENS`` (prompt tokens; completion is a fifth of
it) — ``none`` answers with no ``token_usage`` at all (unknown spend) — and ``ANSWER`` (the
``output``, default ``ok``). Every request is counted per prompt.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class MeteredAgent:
    url: str
    runner: web.AppRunner
    calls: Counter[str] = field(default_factory=Counter)

    async def close(self) -> None:
        await self.runner.cleanup()


async def start() -> MeteredAgent:
    calls: Counter[str] = Counter()

    async def run(request: web.Request) -> web.Response:
        payload: dict[str, Any] = await request.json()
        calls[str(payload.get("prompt"))] += 1
        env = payload.get("env") or {}
        reply: dict[str, Any] = {"output": env.get("ANSWER", "ok"), "trajectory": []}
        tokens = env.get("TOKENS", "0")
        if tokens != "none":
            prompt = int(tokens)
            reply["token_usage"] = {
                "prompt": prompt,
                "completion": prompt // 5,
                "total": prompt + prompt // 5,
            }
        return web.json_response(reply)

    app = web.Application()
    app.router.add_post("/run", run)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    return MeteredAgent(f"http://127.0.0.1:{port}/run", runner, calls)
