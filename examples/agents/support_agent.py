"""A deterministic support agent that needs a conversation: it asks before it answers.

No LLM. Asked about an order, it first wants the order number; once any user message of
the conversation gave one, it looks the order up (a ``lookup_order`` tool call in its
trajectory) and answers; thanked, it says goodbye. It remembers what earlier turns said
only from the conversation it is sent, as a stateless service does — or, over stdin, from
the lines it has read, as a process holding a session does.

It speaks every wire a conversation can travel on:

    python support_agent.py --port 8090
    # REST v1:           POST http://127.0.0.1:8090/run  (messages + turn from turn 2)
    # AG-UI (SSE):       POST http://127.0.0.1:8090/agui (one threadId, every message)
    # OpenAI-compatible: POST http://127.0.0.1:8090/v1/chat/completions (growing messages)
    python support_agent.py --stdio
    # subprocess: one request JSON per stdin line, JSON lines out, a turn ends at "output"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import uuid
from typing import Any

import pydantic
import triage_wire
from ag_ui import core
from ag_ui.encoder import EventEncoder
from aiohttp import web
from triage_agent import until_terminated

ORDERS = {
    "1234": "shipped on Monday; it arrives on Thursday",
    "5678": "refunded in full on Tuesday",
    "9012": "waiting for stock; it ships next week",
}
ASK = "I can help with that. What is your order number?"
_ORDER = re.compile(r"\b(\d{4})\b")
_THANKS = re.compile(r"\b(thanks|thank you|that's all|bye)\b", re.IGNORECASE)


def answer(user_messages: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The reply to the latest of ``user_messages`` (oldest first), and its steps."""
    latest = user_messages[-1]
    if _THANKS.search(latest):
        return "You're welcome. Goodbye!", [{"type": "assistant", "content": "goodbye"}]
    order = next(
        (m.group(1) for text in reversed(user_messages) if (m := _ORDER.search(text))), None
    )
    if order is None:
        return ASK, [{"type": "assistant", "content": ASK}]
    call_id = f"call-{order}"
    status = ORDERS.get(order)
    result = {"order_id": order, "status": status} if status else {"error": "no such order"}
    steps: list[dict[str, Any]] = [
        {
            "type": "tool_call",
            "tool_name": "lookup_order",
            "tool_args": {"order_id": order},
            "tool_call_id": call_id,
        },
        {
            "type": "tool_result",
            "tool_name": "lookup_order",
            "tool_output": result,
            "status": "ok" if status else "error",
            "latency_ms": 1.0,
            "tool_call_id": call_id,
        },
    ]
    if status is None:
        text = f"I cannot find order {order}. Could you check the number?"
    else:
        text = f"Order {order} was {status}. Anything else?"
    steps.append({"type": "assistant", "content": text})
    return text, steps


def usage(user_messages: list[str], output: str) -> dict[str, int]:
    prompt = sum(len(m.split()) for m in user_messages)
    completion = len(output.split())
    return {"prompt": prompt, "completion": completion, "total": prompt + completion}


async def run(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
        said = [m["content"] for m in payload.get("messages") or [] if m["role"] == "user"]
        said.append(str(payload["prompt"]))
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "body must be JSON with a prompt"}, status=400)
    output, steps = answer(said)
    return web.json_response(
        {"output": output, "trajectory": steps, "token_usage": usage(said, output)}
    )


async def agui(request: web.Request) -> web.StreamResponse:
    try:
        run_input = core.RunAgentInput.model_validate(await request.json())
    except (ValueError, pydantic.ValidationError) as err:
        return web.json_response({"error": f"body must be a RunAgentInput: {err}"}, status=400)
    said = [str(m.content) for m in run_input.messages if m.role == "user"]
    if not said:
        return web.json_response({"error": "RunAgentInput needs a user message"}, status=400)
    output, steps = answer(said)
    encoder = EventEncoder()
    response = web.StreamResponse(headers={"content-type": encoder.get_content_type()})
    await response.prepare(request)
    ids = {"thread_id": run_input.thread_id, "run_id": run_input.run_id}
    events: list[core.BaseEvent] = [core.RunStartedEvent(**ids)]
    for step in steps:
        events.extend(triage_wire.agui_events(step, f"msg-{uuid.uuid4().hex[:8]}"))
    events.append(
        core.RunFinishedEvent(
            **ids,
            result={"output": output},
            usage=triage_wire.agui_usage(usage(said, output)),
        )
    )
    for event in events:
        await response.write(encoder.encode(event).encode())
    await response.write_eof()
    return response


async def chat_completions(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
        said = [str(m["content"]) for m in payload["messages"] if m.get("role") == "user"]
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": {"message": "body must have messages"}}, status=400)
    if not said:
        return web.json_response({"error": {"message": "no user message"}}, status=400)
    output, steps = answer(said)
    run_id = request.headers.get("X-Agent-Health-Run-Id", uuid.uuid4().hex)
    return web.json_response(
        triage_wire.openai_answer("support", run_id, steps, output, usage(said, output))
    )


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def agent_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/run", run)
    app.router.add_post("/agui", agui)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/healthz", healthz)
    return app


async def start(host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start the agent; return its runner and its /run URL."""
    runner = web.AppRunner(agent_app())
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    url_host = "127.0.0.1" if host == "0.0.0.0" else host
    return runner, f"http://{url_host}:{runner.addresses[0][1]}/run"


def stdio() -> None:
    """The subprocess line protocol: a request per stdin line, the answer as JSON lines."""
    said: list[str] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        said.append(str(json.loads(line)["prompt"]))  # the session is what it has read
        output, steps = answer(said)
        for step in steps:
            print(json.dumps(step))
        print(json.dumps({"output": output, "token_usage": usage(said, output)}), flush=True)


async def _main(host: str, port: int) -> None:
    runner, url = await start(host, port)
    print(f"support agent listening on {url}", flush=True)
    try:
        await until_terminated()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--stdio", action="store_true", help="speak the subprocess protocol")
    args = parser.parse_args()
    if args.stdio:
        stdio()
        return
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port))


if __name__ == "__main__":
    main()
