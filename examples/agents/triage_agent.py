"""A deterministic, tool-using incident-triage agent that speaks the REST agent protocol v1.

No LLM: it reads the prompt and context, calls its tools over HTTP (a small logs service and
a status service that this same process serves on a second port), and writes an answer.
Its trajectory, latencies and token counts are real records of what it did.

    python triage_agent.py --port 8080          # POST http://127.0.0.1:8080/run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from typing import Any

import aiohttp
from aiohttp import web

FAULT = web.AppKey("fault", str)
TOOLS_URL = web.AppKey("tools_url", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)

SERVICES = ("payment", "checkout", "auth", "inventory", "search")

LOGS: dict[str, list[dict[str, str]]] = {
    "payment": [
        {"level": "error", "message": "Connection refused to db-primary:5432"},
        {"level": "error", "message": "payment-service: charge failed, upstream db timeout"},
        {"level": "info", "message": "payment-service: health check ok"},
    ],
    "checkout": [
        {"level": "error", "message": "checkout: 503 from payment-service"},
        {"level": "warn", "message": "checkout: retrying payment call (attempt 3)"},
    ],
    "auth": [
        {"level": "error", "message": "auth: certificate for idp.internal expired"},
    ],
    "inventory": [
        {"level": "warn", "message": "inventory: cache hit ratio 12% (low)"},
        {"level": "error", "message": "inventory: OOMKilled, container restarted"},
    ],
    "search": [{"level": "info", "message": "search: all shards green"}],
}

STATUS = {
    "db-primary": "down",
    "payment-service": "degraded",
    "idp.internal": "up",
    "redis-cache": "up",
}

DIAGNOSES = (
    (r"Connection refused to (db-[\w-]+)", "cannot reach its database {0}"),
    (r"503 from ([\w-]+)", "depends on {0}, which is failing"),
    (r"certificate for ([\w.]+) expired", "uses an expired TLS certificate for {0}"),
    (r"OOMKilled", "runs out of memory and is OOM-killed"),
)


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


# -- the tool service ---------------------------------------------------------------------


async def search_logs(request: web.Request) -> web.Response:
    service = request.query.get("service", "")
    level = request.query.get("level")
    if request.app[FAULT] == "tool_error" or service not in LOGS:
        return web.json_response({"error": f"unknown service {service!r}"}, status=404)
    lines = [e for e in LOGS[service] if level is None or e["level"] == level]
    return web.json_response({"service": service, "lines": lines})


async def service_status(request: web.Request) -> web.Response:
    name = request.query.get("name", "")
    return web.json_response({"name": name, "status": STATUS.get(name, "unknown")})


def tools_app(fault: str | None = None) -> web.Application:
    app = web.Application()
    app[FAULT] = fault or ""
    app.router.add_get("/search_logs", search_logs)
    app.router.add_get("/service_status", service_status)
    return app


# -- the agent ----------------------------------------------------------------------------


async def _call_tool(
    session: aiohttp.ClientSession, base: str, name: str, args: dict[str, str]
) -> tuple[list[dict[str, Any]], Any, bool]:
    started = time.perf_counter()
    async with session.get(f"{base}/{name}", params=args) as response:
        body = await response.json()
        ok = response.status == 200
    latency = round((time.perf_counter() - started) * 1000, 3)
    steps = [
        {"type": "tool_call", "tool_name": name, "tool_args": args},
        {
            "type": "tool_result",
            "tool_name": name,
            "tool_output": body,
            "status": "ok" if ok else "error",
            "latency_ms": latency,
        },
    ]
    return steps, body, ok


async def run(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
        prompt = str(payload["prompt"])
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "body must be JSON with a prompt"}, status=400)
    context = [str(c.get("value", "")) for c in payload.get("context") or []]
    env = payload.get("env") or {}
    if env.get("FAIL") == "500":
        return web.json_response({"error": "simulated agent crash"}, status=500)
    delay = float(env.get("DELAY_S", 0) or 0)
    if delay:
        await asyncio.sleep(delay)

    trajectory: list[dict[str, Any]] = []
    lowered = prompt.lower()
    service = next((s for s in SERVICES if s in lowered), None)
    trajectory.append(
        {"type": "thinking", "content": f"The user asks about {service or 'an unknown service'}."}
    )
    evidence: list[str] = list(context)
    base = request.app[TOOLS_URL]
    if service is not None:
        steps, body, ok = await _call_tool(
            request.app[SESSION], base, "search_logs", {"service": service, "level": "error"}
        )
        trajectory.extend(steps)
        if ok:
            evidence.extend(line["message"] for line in body["lines"])
        else:
            trajectory.append({"type": "thinking", "content": "The log search failed; retrying."})
            steps, body, ok = await _call_tool(
                request.app[SESSION], base, "search_logs", {"service": service}
            )
            trajectory.extend(steps)
    cause = None
    for pattern, template in DIAGNOSES:
        for line in evidence:
            match = re.search(pattern, line)
            if match:
                cause = template.format(*match.groups())
                dependency = match.group(1) if match.groups() else None
                if dependency:
                    steps, body, ok = await _call_tool(
                        request.app[SESSION], base, "service_status", {"name": dependency}
                    )
                    trajectory.extend(steps)
                    if ok:
                        cause += f" (status: {body['status']})"
                break
        if cause:
            break
    subject = f"the {service}-service" if service else "the service"
    if cause:
        output = f"Root cause: {subject} {cause}. Recommended action: restore it and re-check."
    elif service:
        output = f"No errors found for {subject}; it looks healthy."
    else:
        output = "I could not tell which service you mean; name one of: " + ", ".join(SERVICES)
    trajectory.append({"type": "assistant", "content": output})
    prompt_tokens = _tokens(prompt) + sum(_tokens(e) for e in evidence)
    completion_tokens = _tokens(output) + sum(
        _tokens(str(s.get("content", ""))) for s in trajectory
    )
    return web.json_response(
        {
            "output": output,
            "trajectory": trajectory,
            "token_usage": {
                "prompt": prompt_tokens,
                "completion": completion_tokens,
                "total": prompt_tokens + completion_tokens,
            },
        }
    )


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def agent_app(tools_url: str) -> web.Application:
    app = web.Application()
    app[TOOLS_URL] = tools_url

    async def session_ctx(app: web.Application) -> Any:
        app[SESSION] = aiohttp.ClientSession()
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/run", run)
    app.router.add_get("/healthz", healthz)
    return app


async def start(
    host: str = "127.0.0.1", port: int = 0, *, fault: str | None = None
) -> tuple[list[web.AppRunner], str]:
    """Start the tool service and the agent; return the runners and the agent's /run URL."""
    tools_runner = web.AppRunner(tools_app(fault))
    await tools_runner.setup()
    tools_site = web.TCPSite(tools_runner, host, 0)
    await tools_site.start()
    tools_port = tools_runner.addresses[0][1]
    agent_runner = web.AppRunner(agent_app(f"http://{host}:{tools_port}"))
    await agent_runner.setup()
    await web.TCPSite(agent_runner, host, port).start()
    agent_port = agent_runner.addresses[0][1]
    return [agent_runner, tools_runner], f"http://{host}:{agent_port}/run"


async def _main(host: str, port: int, fault: str | None) -> None:
    runners, url = await start(host, port, fault=fault)
    print(f"triage agent listening on {url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fault", choices=["tool_error"], help="make the log tool fail")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port, args.fault))


if __name__ == "__main__":
    main()
