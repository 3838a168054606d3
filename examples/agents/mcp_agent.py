"""An agent whose tools are MCP servers, built on a real framework: Pydantic AI, served over
AG-UI, with a scripted model (deterministic, no API key) standing in for the LLM.

Its MCP servers are the ones it is given: each ``AGENT_HEALTH_PEER_<NAME>_URL`` of its
environment (a local run's ``peers``, a cell's MCP peers) and each entry of the ``mcp.json``
a test provisions (``forwardedProps.provisioned.mcp``: a ``mock_mcp`` server). Pydantic AI
connects to each with its ``MCPToolset`` (Streamable HTTP) and forwards the run id header,
so the run's gateway files every call under the right test.

The scripted model plans from the prompt: the time in a city (``get_current_time``), a time
converted (``convert_time``), the tickets about a service (``search_tickets``, then
``open_ticket`` when none is open), paging the on-call (``page_oncall``), the last commits
in a repository (``git_log``, mcp-server-git's). It calls one tool
per turn and, when a tool fails, says so in its answer instead of going on as if it worked.
It never calls a tool it was not asked for.

    python examples/agents/mcp_agent.py --port 8080      # AG-UI on POST /agent
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastmcp.client import Client
from fastmcp.client.transports import StreamableHttpTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

CITIES = {"oslo": "Europe/Oslo", "tokyo": "Asia/Tokyo", "lima": "America/Lima", "utc": "UTC"}
RUN_ID_HEADER = "X-Agent-Health-Run-Id"


def plan(prompt: str) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the prompt asks for, in order."""
    text = prompt.lower()
    steps: list[tuple[str, dict[str, Any]]] = []
    found_at = sorted((text.find(city), zone) for city, zone in CITIES.items() if city in text)
    cities = [zone for _, zone in found_at]  # in the order the prompt names them
    if "convert" in text and len(cities) >= 2:
        found = re.search(r"\b(\d{1,2}:\d{2})\b", text)
        time = found.group(1) if found else "12:00"
        args = {"source_timezone": cities[0], "time": time, "target_timezone": cities[1]}
        steps.append(("convert_time", args))
    elif "time" in text and cities:
        steps.append(("get_current_time", {"timezone": cities[0]}))
    service = re.search(r"tickets? (?:about|for) (?:the )?([a-z-]+)", text)
    if service:
        steps.append(("search_tickets", {"service": service.group(1)}))
    if "page" in text:
        steps.append(("page_oncall", {"reason": prompt[:80]}))
    repository = re.search(r"commits? in (/\S+?)[?.]?$", prompt.strip())
    if repository:  # a git server's: the repository's history
        steps.append(("git_log", {"repo_path": repository.group(1), "max_count": 3}))
    return steps


def brain(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: the next planned call, or the answer once the plan is done."""
    prompt = next(
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    )
    returned: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.outcome != "success":
                failed[part.tool_name] = str(part.content)  # the server said isError
            elif isinstance(part, ToolReturnPart):
                returned[part.tool_name] = part.content
            elif isinstance(part, RetryPromptPart) and part.tool_name:
                failed[part.tool_name] = str(part.content)
    available = {tool.name for tool in info.function_tools}
    steps = plan(prompt)
    if "search_tickets" in returned:
        tickets = _json(returned["search_tickets"])
        if isinstance(tickets, list) and not tickets:  # none open: open one
            service = next(args for tool, args in steps if tool == "search_tickets")["service"]
            steps.append(("open_ticket", {"title": f"{service} is failing", "priority": 2}))
    for tool, args in steps:
        if tool in returned or tool in failed:
            continue
        if tool not in available:
            return ModelResponse(parts=[TextPart(f"I have no {tool} tool to do that with.")])
        return ModelResponse(parts=[ToolCallPart(tool, args)])
    return ModelResponse(parts=[TextPart(_answer(returned, failed))])


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _answer(returned: dict[str, Any], failed: dict[str, str]) -> str:
    said = []
    for tool, content in returned.items():
        value = _json(content)
        if tool == "get_current_time" and isinstance(value, dict):
            said.append(f"It is {value.get('datetime')} in {value.get('timezone')}.")
        elif tool == "convert_time" and isinstance(value, dict):
            target = value.get("target", {})
            said.append(f"That is {target.get('datetime')} in {target.get('timezone')}.")
        elif tool == "git_log":
            said.append(f"The latest commits: {value}")
        elif tool == "open_ticket" and isinstance(value, dict):
            said.append(f"I opened ticket {value.get('id')}: {value.get('title')}.")
        else:
            said.append(f"{tool}: {json.dumps(value)}")
    for tool, why in failed.items():
        said.append(f"{tool} failed: {why.splitlines()[0] if why else 'no reason given'}.")
    return " ".join(said) or "There was nothing to do."


def servers(body: dict[str, Any]) -> dict[str, str]:
    """The MCP servers this run is given: the environment's peers and the test's mcp.json."""
    found = {
        name.removeprefix("AGENT_HEALTH_PEER_").removesuffix("_URL").lower(): url
        for name, url in os.environ.items()
        if name.startswith("AGENT_HEALTH_PEER_") and name.endswith("_URL")
    }
    props = body.get("forwardedProps") or {}
    config = (props.get("provisioned") or {}).get("mcp") or {}
    for name, entry in (config.get("mcpServers") or {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            found[name] = entry["url"]
    return found


async def streamed(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """The same model, streamed (the AG-UI adapter streams): its whole answer in one piece."""
    answer = brain(messages, info)
    for part in answer.parts:
        if isinstance(part, ToolCallPart):
            yield {0: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())}
        elif isinstance(part, TextPart):
            yield part.content


AGENT = Agent(FunctionModel(brain, stream_function=streamed), name="mcp-agent")


async def run(request: Request) -> Response:
    body = json.loads(await request.body())  # kept: the adapter reads it again
    headers = {RUN_ID_HEADER: request.headers.get(RUN_ID_HEADER, "")}
    toolsets = [
        MCPToolset(Client(StreamableHttpTransport(url, headers=headers)), id=name)
        for name, url in servers(body).items()
    ]
    return await AGUIAdapter.dispatch_request(request, agent=AGENT, toolsets=toolsets)


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/agent", run, methods=["POST"]), Route("/healthz", healthz)])

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
