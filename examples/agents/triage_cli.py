"""The triage agent as a command, for the subprocess connector (``--agent cmd:...``).

Reads the REST v1 request JSON on stdin (or, with no stdin, ``$AGENT_HEALTH_PROMPT``),
serves its tools on a free loopback port for the length of the run, and prints its steps
as JSON lines as it goes, then a final ``{"output": ..., "token_usage": ...}`` line.
With ``--json`` it prints one REST v1 answer instead.

    echo '{"prompt": "Why is payment failing?", "run_id": "r1"}' | python triage_cli.py

Faults for tests (from the request's ``env``): ``FAIL=exit`` exits 3 with a message on
stderr; ``DELAY_S=N`` sleeps N seconds before answering.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import aiohttp
import triage_agent
from aiohttp import web


def _request() -> dict[str, Any]:
    text = sys.stdin.read() if not sys.stdin.isatty() else ""
    if text.strip():
        request: dict[str, Any] = json.loads(text)
        return request
    return {"prompt": os.environ.get("AGENT_HEALTH_PROMPT", ""), "context": [], "env": {}}


async def _main(request: dict[str, Any], as_json: bool) -> int:
    env = request.get("env") or {}
    if env.get("FAIL") == "exit":
        print("triage_cli: simulated failure (FAIL=exit)", file=sys.stderr)
        return 3
    if float(env.get("DELAY_S", 0) or 0):
        await asyncio.sleep(float(env["DELAY_S"]))
    runner = web.AppRunner(triage_agent.tools_app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    tools_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    steps: list[dict[str, Any]] = []

    async def emit(step: dict[str, Any]) -> None:
        if as_json:
            steps.append(step)
        else:
            print(json.dumps(step), flush=True)

    try:
        async with aiohttp.ClientSession() as session:
            context = [str(c.get("value", "")) for c in request.get("context") or []]
            output, usage = await triage_agent.diagnose(
                session, tools_url, str(request["prompt"]), context, emit
            )
    finally:
        await runner.cleanup()
    final: dict[str, Any] = {"output": output, "token_usage": usage}
    if as_json:
        final["trajectory"] = steps
    print(json.dumps(final), flush=True)
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one REST v1 JSON answer")
    args = parser.parse_args()
    sys.exit(asyncio.run(_main(_request(), args.json)))


if __name__ == "__main__":
    main()
