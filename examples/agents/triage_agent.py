"""A deterministic, tool-using incident-triage agent that speaks REST v1, AG-UI and OpenAI chat.

No LLM: it reads the prompt and context, calls its tools over HTTP (``/search_logs`` and
``/service_status``), and writes an answer. Its trajectory, latencies and token counts are
real records of what it did.

Where the tools live:

* ``--tools-url URL``, else the environment variable ``AGENT_HEALTH_PEER_LOGS_URL`` — the
  tools of a separate log server (``log_server.py``). In a cluster cell the operator sets
  that variable for a RunSpec peer named ``logs``: it is the cell gateway's listener for
  target → ``peer:logs`` calls, so every tool call is recorded in the cell's ledger as the
  target's call to its peer.
* otherwise this process serves the same tools itself on a second loopback port, so a local
  run (``make demo``) needs nothing else and stays deterministic.

Asked what time it is ("What time is it in Europe/Oslo?"), it calls ``get_current_time`` of
the MCP server at ``AGENT_HEALTH_PEER_TIME_URL`` — what a cell sets for an MCP peer named
``time``, such as the example image ``mcp-time`` (the real mcp-server-time behind
``agent-health mcp bridge``) — and says the time it was told.

A request's ``env`` (REST: its ``env`` field) makes it misbehave on purpose, for tests of what
agent-health holds it to: ``FAIL=500`` answers 500, ``DELAY_S`` waits first, ``CLAIM=TOOL``
adds to its trajectory a call of ``TOOL`` it never made.

    python triage_agent.py --port 8080
    # REST v1:           POST http://127.0.0.1:8080/run
    # AG-UI (SSE):       POST http://127.0.0.1:8080/agui
    # OpenAI-compatible: POST http://127.0.0.1:8080/v1/chat/completions
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pydantic
import triage_wire
from ag_ui import core
from ag_ui.encoder import EventEncoder
from aiohttp import web

FAULT = web.AppKey("fault", str)
TOOLS_URL = web.AppKey("tools_url", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)

PEER_URL_ENV = "AGENT_HEALTH_PEER_LOGS_URL"
"""Set by a cluster cell for a RunSpec peer named ``logs`` (see the module docstring)."""
TIME_URL_ENV = "AGENT_HEALTH_PEER_TIME_URL"
"""Set by a cluster cell for an MCP peer named ``time`` (see the module docstring)."""
TIMEZONE = re.compile(r"\bin (UTC|[A-Za-z_]+(?:/[A-Za-z_+-]+)+)")

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


Emit = Callable[[dict[str, Any]], Awaitable[None]]


class Abort(Exception):
    """Raised by an ``emit`` callback to stop a run half-way (the AG-UI fault injection)."""


async def _call_tool(
    session: aiohttp.ClientSession, base: str, name: str, args: dict[str, str]
) -> tuple[Any, bool, float]:
    started = time.perf_counter()
    if base.endswith("/mcp"):  # an MCP server (a cell's MCP peer names its /mcp)
        body, ok = await _call_mcp_tool(session, base, name, args)
    else:
        async with session.get(f"{base}/{name}", params=args) as response:
            body = await response.json()
            ok = response.status == 200
    return body, ok, round((time.perf_counter() - started) * 1000, 3)


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


async def _mcp(
    session: aiohttp.ClientSession, url: str, message: dict[str, Any], sid: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """One JSON-RPC message to an MCP server (Streamable HTTP): its answer, if any (JSON or
    the first event of a stream that carries one), and the session id it names."""
    headers = {**MCP_HEADERS, **({"Mcp-Session-Id": sid} if sid else {})}
    async with session.post(url, json=message, headers=headers) as response:
        sid = response.headers.get("Mcp-Session-Id", sid)
        if response.status == 202:
            return None, sid
        if response.content_type == "text/event-stream":
            async for line in response.content:
                if line.startswith(b"data:"):
                    said = json.loads(line[5:])
                    if "id" in said and ("result" in said or "error" in said):
                        return said, sid
            return None, sid
        return await response.json(), sid


async def _call_mcp_tool(
    session: aiohttp.ClientSession, url: str, name: str, args: dict[str, str]
) -> tuple[Any, bool]:
    """``tools/call`` of ``name`` in a session of its own: what it answered, and whether it
    answered without an error (``isError``)."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {},
             "clientInfo": {"name": "triage-agent", "version": "1"}}  # fmt: skip
    _, sid = await _mcp(session, url, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                       "params": hello}, None)  # fmt: skip
    await _mcp(session, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": args}}  # fmt: skip
    answer, _ = await _mcp(session, url, call, sid)
    result = (answer or {}).get("result")
    if not isinstance(result, dict):
        return (answer or {}).get("error") or {"error": "no answer"}, False
    body = result.get("structuredContent")
    if body is None:
        text = "".join(c.get("text", "") for c in result.get("content", []))
        try:
            body = json.loads(text)
        except ValueError:
            body = text
    return body, not result.get("isError", False)


async def diagnose(
    session: aiohttp.ClientSession, base: str, prompt: str, context: list[str], emit: Emit
) -> tuple[str, dict[str, int]]:
    """Triage one incident: call the tools at ``base``, hand each step to ``emit`` as it
    happens, and return the answer and the token usage."""
    trajectory: list[dict[str, Any]] = []

    async def record(*steps: dict[str, Any]) -> None:
        for step in steps:
            trajectory.append(step)
            await emit(step)

    async def tool(name: str, args: dict[str, str], where: str = base) -> tuple[Any, bool]:
        call_id = f"call-{len(trajectory)}"
        # The call is emitted before the tool runs, so a streaming client sees it first.
        await record(
            {"type": "tool_call", "tool_name": name, "tool_args": args, "tool_call_id": call_id}
        )
        body, ok, latency = await _call_tool(session, where, name, args)
        result = {
            "type": "tool_result",
            "tool_name": name,
            "tool_output": body,
            "status": "ok" if ok else "error",
            "latency_ms": latency,
            "tool_call_id": call_id,
        }
        await record(result)
        return body, ok

    lowered = prompt.lower()
    clock = os.environ.get(TIME_URL_ENV)
    if clock and "what time" in lowered:  # a question for the time server
        zone = TIMEZONE.search(prompt)
        timezone = zone.group(1) if zone else "UTC"
        body, ok = await tool("get_current_time", {"timezone": timezone}, where=clock)
        said = body.get("datetime") if ok and isinstance(body, dict) else None
        output = (
            f"It is {said[11:16]} in {timezone}." if isinstance(said, str) and len(said) >= 16
            else f"I could not tell the time in {timezone}."
        )  # fmt: skip
        await record({"type": "assistant", "content": output})
        used = _tokens(prompt) + _tokens(output)
        return output, {"prompt": _tokens(prompt), "completion": _tokens(output), "total": used}
    service = next((s for s in SERVICES if s in lowered), None)
    await record(
        {"type": "thinking", "content": f"The user asks about {service or 'an unknown service'}."}
    )
    evidence: list[str] = list(context)
    if service is not None:
        body, ok = await tool("search_logs", {"service": service, "level": "error"})
        if ok:
            evidence.extend(line["message"] for line in body["lines"])
        else:
            await record({"type": "thinking", "content": "The log search failed; retrying."})
            body, ok = await tool("search_logs", {"service": service})
    cause = None
    for pattern, template in DIAGNOSES:
        for line in evidence:
            match = re.search(pattern, line)
            if match:
                cause = template.format(*match.groups())
                dependency = match.group(1) if match.groups() else None
                if dependency:
                    body, ok = await tool("service_status", {"name": dependency})
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
    await record({"type": "assistant", "content": output})
    prompt_tokens = _tokens(prompt) + sum(_tokens(e) for e in evidence)
    completion_tokens = _tokens(output) + sum(
        _tokens(str(s.get("content", ""))) for s in trajectory
    )
    usage = {
        "prompt": prompt_tokens,
        "completion": completion_tokens,
        "total": prompt_tokens + completion_tokens,
    }
    return output, usage


# -- REST protocol v1: POST /run ----------------------------------------------------------


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

    async def collect(step: dict[str, Any]) -> None:
        trajectory.append(step)

    output, usage = await diagnose(
        request.app[SESSION], request.app[TOOLS_URL], prompt, context, collect
    )
    if env.get("CLAIM"):  # a call it says it made and never did: what its gateway catches
        claimed = {"type": "tool_call", "tool_name": env["CLAIM"], "tool_args": {}}
        trajectory.insert(len(trajectory) - 1, claimed)
    return web.json_response({"output": output, "trajectory": trajectory, "token_usage": usage})


# -- AG-UI: POST /agui, events streamed over SSE as the agent works ------------------------


async def agui(request: web.Request) -> web.StreamResponse:
    try:
        run_input = core.RunAgentInput.model_validate(await request.json())
    except (ValueError, pydantic.ValidationError) as err:
        return web.json_response({"error": f"body must be a RunAgentInput: {err}"}, status=400)
    prompts = [m.content for m in run_input.messages if m.role == "user"]
    if not prompts or not isinstance(prompts[-1], str):
        return web.json_response({"error": "RunAgentInput needs a text user message"}, status=400)
    context = [c.value for c in run_input.context or []]
    env = (run_input.forwarded_props or {}).get("env") or {}
    if env.get("FAIL") == "500":
        return web.json_response({"error": "simulated agent crash"}, status=500)
    encoder = EventEncoder()
    response = web.StreamResponse(
        headers={"content-type": encoder.get_content_type(), "cache-control": "no-cache"}
    )
    await response.prepare(request)
    ids = {"thread_id": run_input.thread_id, "run_id": run_input.run_id}

    async def send(event: core.BaseEvent) -> None:
        await response.write(encoder.encode(event).encode())

    async def stream(step: dict[str, Any]) -> None:
        for event in triage_wire.agui_events(step, f"msg-{uuid.uuid4().hex[:8]}"):
            await send(event)
        if env.get("FAIL") == "run_error" and step["type"] == "tool_result":
            raise Abort("simulated failure after the first tool result")

    await send(core.RunStartedEvent(**ids))
    try:
        output, usage = await diagnose(
            request.app[SESSION], request.app[TOOLS_URL], str(prompts[-1]), context, stream
        )
    except Abort as err:
        await send(core.RunErrorEvent(message=str(err), code="SIMULATED"))
    else:
        result = {"output": output}
        await send(core.RunFinishedEvent(**ids, result=result, usage=triage_wire.agui_usage(usage)))
    await response.write_eof()
    return response


# -- OpenAI-compatible: POST /v1/chat/completions -----------------------------------------


async def chat_completions(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
        messages = [m for m in payload["messages"] if isinstance(m, dict)]
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": {"message": "body must have messages"}}, status=400)
    prompts = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    if not prompts:
        return web.json_response({"error": {"message": "no user message"}}, status=400)
    context = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
    env = payload.get("metadata") or {}
    if env.get("FAIL") == "500":
        return web.json_response({"error": {"message": "simulated agent crash"}}, status=500)
    steps: list[dict[str, Any]] = []

    async def collect(step: dict[str, Any]) -> None:
        steps.append(step)

    output, usage = await diagnose(
        request.app[SESSION], request.app[TOOLS_URL], prompts[-1], context, collect
    )
    model = str(payload.get("model") or "triage")
    run_id = request.headers.get("X-Agent-Health-Run-Id", uuid.uuid4().hex)
    return web.json_response(triage_wire.openai_answer(model, run_id, steps, output, usage))


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
    app.router.add_post("/agui", agui)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/healthz", healthz)
    return app


async def start(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    fault: str | None = None,
    tools_url: str | None = None,
) -> tuple[list[web.AppRunner], str]:
    """Start the agent; return the runners and the agent's /run URL.

    With ``tools_url`` the agent calls the tools there (a log server, or a cell gateway's
    listener in front of one); without it, it serves its own on a free loopback port
    (``fault`` applies to those only).
    """
    runners = []
    if tools_url is None:
        tools_runner = web.AppRunner(tools_app(fault))
        await tools_runner.setup()
        await web.TCPSite(tools_runner, "127.0.0.1", 0).start()
        tools_url = f"http://127.0.0.1:{tools_runner.addresses[0][1]}"
        runners.append(tools_runner)
    agent_runner = web.AppRunner(agent_app(tools_url.rstrip("/")))
    await agent_runner.setup()
    await web.TCPSite(agent_runner, host, port).start()
    agent_port = agent_runner.addresses[0][1]
    url_host = "127.0.0.1" if host == "0.0.0.0" else host
    return [agent_runner, *runners], f"http://{url_host}:{agent_port}/run"


async def _main(
    host: str, port: int, fault: str | None, tools_url: str | None, warmup: float
) -> None:
    # A real agent loads a model or warms a cache before it listens; the cold-vs-warm cell
    # benchmark (bench/warm_cells.py) needs one that takes its time.
    await asyncio.sleep(warmup)
    runners, url = await start(host, port, fault=fault, tools_url=tools_url)
    where = tools_url or "its own tool service"
    print(f"triage agent listening on {url}, tools at {where}", flush=True)
    try:
        await until_terminated()
    finally:
        for runner in runners:
            await runner.cleanup()


async def until_terminated() -> None:
    """Serve until SIGTERM or SIGINT. In a cell the agent is its container's PID 1, which the
    kernel gives no default action for SIGTERM: without a handler the kubelet's stop waits
    out the pod's grace period and kills it, on every cell."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


WARMUP_ENV = "TRIAGE_AGENT_WARMUP_SECONDS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--fault", choices=["tool_error"], help="make the log tool fail (own tools only)"
    )
    parser.add_argument(
        "--tools-url",
        default=os.environ.get(PEER_URL_ENV) or None,
        help=f"call the tools of this log server (default: ${PEER_URL_ENV}, else serve them)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=float(os.environ.get(WARMUP_ENV) or 0),
        help=f"seconds to wait before listening, as a model load would (default ${WARMUP_ENV}, "
        "else 0)",
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port, args.fault, args.tools_url, args.warmup))


if __name__ == "__main__":
    main()
