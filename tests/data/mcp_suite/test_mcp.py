from agent_health import mock_mcp, test
from agent_health.peers import MockServer

tickets = MockServer("tickets")
tickets.tool("search", answer=[{"id": 7, "title": "database down"}])
tickets.tool("close_all", answer="closed", decoy=True)
tickets.tool("page_oncall", error="pager service unavailable")

test = test.extend(tickets=mock_mcp(tickets))


@test("asks the time and the tickets")
async def asks(agent, expect, tickets):
    result = await agent.run(
        "What time is it, and which tickets are open?", provisioned={"mcp": tickets.mcp_json()}
    )
    expect(result).to_have_called_tool("get_current_time", {"timezone": "Europe/Oslo"})
    expect(result).to_have_called_tool("search")
    assert [c.tool for c in tickets.calls] == ["search"]


@test("calls the decoy")
async def decoy(agent, expect, tickets):
    await agent.run("decoy please", provisioned={"mcp": tickets.mcp_json()})


@test("calls a tool the server does not have")
async def unknown(agent, expect, tickets):
    await agent.run("unknown please", provisioned={"mcp": tickets.mcp_json()})


@test("claims a call it never made")
async def lies(agent, expect, tickets):
    result = await agent.run("lie please", provisioned={"mcp": tickets.mcp_json()})
    expect(result).to_have_called_tool("get_current_time", server="time")
    expect(result).to_have_called_tool("convert_time")


@test("hides a tool error")
async def hides(agent, expect, tickets):
    result = await agent.run("page and hide", provisioned={"mcp": tickets.mcp_json()})
    expect(result).to_have_no_tool_errors()
