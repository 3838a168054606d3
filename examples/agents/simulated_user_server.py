"""A deterministic stand-in for the model that plays a simulated user: no LLM, no keys.

An OpenAI-compatible chat-completions server (``POST /v1/chat/completions``) that reads the
prompt agent-health sends a simulated user's model — the goal and the facts in the system
prompt, the conversation between the ``<conversation>`` tags — and answers as that user
would, always the same way for the same conversation:

* the agent's latest message names one of the facts ("What is your order number?" and the
  fact ``order number``): it gives it — ``{"message": "My order number is 5678."}``;
* the agent's latest message repeats a fact the user gave (the order it looked up): its
  goal is met — ``{"stop": "goal-met", ...}``;
* the agent asks for something the user does not know, or the user has asked three times:
  it gives up — ``{"stop": "gave-up", ...}``;
* otherwise it says its goal again.

    python simulated_user_server.py --port 8092
    # judge={"provider": "openai", "model": "simulated-user",
    #        "base_url": "http://127.0.0.1:8092/v1"}

``GET /stats`` says how many completions it answered (a replay through the cache asks none).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re

from aiohttp import web

_FACT = re.compile(r"^- (?P<name>[^:]+): (?P<value>.+)$", re.M)
_GOAL = re.compile(r"## YOUR GOAL\n(?P<goal>.+?)\n\n", re.S)
_TALK = re.compile(r"<conversation>\n(?P<json>.+?)\n</conversation>", re.S)
PATIENCE = 3
"""How many times the user says its goal before it gives up."""
ANSWERED = web.AppKey("answered", list)


def reply(system: str, text: str) -> dict[str, str]:
    """What the user says next: the JSON object the simulated user's prompt asks for."""
    goal_match = _GOAL.search(system)
    goal = goal_match.group("goal").strip() if goal_match else "get help"
    facts = {m.group("name").strip(): m.group("value").strip() for m in _FACT.finditer(system)}
    found = _TALK.search(text)
    turns = json.loads(found.group("json"))["turns"] if found else []
    said = [t["content"] for t in turns if t["role"] == "user"]
    latest = next((t["content"] for t in reversed(turns) if t["role"] == "agent"), "")
    heard = latest.lower()
    for name, value in facts.items():
        if name.lower() in heard and not any(value in s for s in said):
            return {"message": f"My {name} is {value}."}
    for name, value in facts.items():
        if any(value in s for s in said) and value in latest:
            return {"stop": "goal-met", "reason": f"the agent answered about {name} {value}"}
    if latest.rstrip().endswith("?") and not any(n.lower() in heard for n in facts):
        return {"stop": "gave-up", "reason": f"the agent asked for what I do not know: {latest}"}
    if len(said) >= PATIENCE:
        return {"stop": "gave-up", "reason": f"asked {len(said)} times; the agent did not help"}
    return {"message": f"Please help me: I want to {goal}."}


async def chat_completions(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        messages = body["messages"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    except (ValueError, KeyError, TypeError, StopIteration):
        return web.json_response({"error": "body must be a chat completions request"}, status=400)
    answer = json.dumps(reply(system, text))
    request.app[ANSWERED].append(answer)
    return web.json_response(
        {
            "id": f"chatcmpl-{len(request.app[ANSWERED])}",
            "object": "chat.completion",
            "model": str(body.get("model", "simulated-user")),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": len((system + text).split()),
                "completion_tokens": len(answer.split()),
                "total_tokens": len((system + text).split()) + len(answer.split()),
            },
        }
    )


async def stats(request: web.Request) -> web.Response:
    return web.json_response({"completions": len(request.app[ANSWERED])})


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def simulator_app() -> web.Application:
    app = web.Application()
    app[ANSWERED] = []
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/stats", stats)
    app.router.add_get("/healthz", healthz)
    return app


async def start(host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve on ``host:port`` (0: any free port); the runner and the ``.../v1`` base URL."""
    runner = web.AppRunner(simulator_app())
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}/v1"


async def _main(host: str, port: int) -> None:
    runner, url = await start(host, port)
    print(f"simulated user model listening on {url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8092)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port))


if __name__ == "__main__":
    main()
