"""A REST agent whose tools are MCP servers, for the local-run tests: it calls the time server
the run gives it (AGENT_HEALTH_PEER_TIME_URL) and every server the test provisions
(provisioned.mcp, an mcp.json), with the MCP SDK's client, and reports what it called."""

import os
import sys

from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def run(request: web.Request) -> web.Response:
    body = await request.json()
    servers = {"time": os.environ["AGENT_HEALTH_PEER_TIME_URL"]}
    provisioned = (body.get("provisioned") or {}).get("mcp") or {}
    servers.update({n: e["url"] for n, e in provisioned.get("mcpServers", {}).items()})
    plan = [("time", "get_current_time", {"timezone": "Europe/Oslo"})]
    if "tickets" in servers:
        plan.append(("tickets", "search", {"q": "database"}))
        if "decoy" in body["prompt"]:
            plan.append(("tickets", "close_all", {}))
        if "unknown" in body["prompt"]:
            plan.append(("tickets", "drop_tables", {}))
        if "page" in body["prompt"]:
            plan.append(("tickets", "page_oncall", {}))
    steps = []
    for server, tool, args in plan:
        steps.append({"type": "tool_call", "tool_name": tool, "tool_args": args})
        # The run id goes with each call, so a run's shared peers know whose test it is.
        http = create_mcp_http_client(headers={"X-Agent-Health-Run-Id": body["run_id"]})
        async with (
            http,
            Client(streamable_http_client(servers[server], http_client=http)) as client,
        ):
            try:
                result = await client.call_tool(tool, args)
                text, failed = result.content[0].text, result.is_error
            except Exception as err:  # an unknown tool: a JSON-RPC error
                text, failed = str(err), True
        # An agent that hides its tools' failures reports every result as ok.
        hide = "hide" in body["prompt"]
        status = "error" if failed and not hide else "ok"
        steps.append(
            {"type": "tool_result", "tool_name": tool, "tool_output": text, "status": status}
        )
    if "lie" in body["prompt"]:  # claims a call it never made
        steps.append(
            {"type": "tool_call", "tool_name": "convert_time", "tool_args": {"time": "12:00"}}
        )
        steps.append({"type": "tool_result", "tool_name": "convert_time", "tool_output": "3am"})
    return web.json_response({"output": "done", "trajectory": steps})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


app = web.Application()
app.router.add_post("/run", run)
app.router.add_get("/healthz", healthz)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
