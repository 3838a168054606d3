from agent_health import mock_mcp, test
from tickets import tickets

test = test.extend(tickets=mock_mcp(tickets))


def mcp(tickets):
    """What the agent is handed: the mock's entry of an mcp.json."""
    return {"mcp": tickets.mcp_json()}


@test("tells the time in Oslo with the time server")
async def time_in_oslo(agent, expect, tickets):
    result = await agent.run("What time is it in Oslo?", provisioned=mcp(tickets))
    expect(result).to_have_called_tool(
        "get_current_time", {"timezone": "Europe/Oslo"}, server="time"
    )
    expect(result.output).to_match(r"Europe/Oslo")
    expect(result).to_have_no_tool_errors()


@test("converts a time between two cities")
async def converts(agent, expect, tickets):
    result = await agent.run("Convert 12:00 from Lima to Tokyo", provisioned=mcp(tickets))
    expect(result).to_have_called_tool(
        "convert_time",
        {"source_timezone": "America/Lima", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        server="time",
    )
    expect(result).not_to_have_called_tool("get_current_time")


@test("opens a ticket when none is open, after searching")
async def opens_ticket(agent, expect, tickets):
    result = await agent.run("Any tickets about the search service?", provisioned=mcp(tickets))
    expect(result).to_have_called_tools_in_order(["search_tickets", "open_ticket"])
    expect(result).to_have_called_tool("open_ticket", {"priority": 2}, server="tickets")
    [opened] = tickets.calls_of("open_ticket")
    assert opened.arguments["title"] == "search is failing"


@test("finds the open ticket and opens no other")
async def finds_ticket(agent, expect, tickets):
    result = await agent.run("Any tickets about the payment service?", provisioned=mcp(tickets))
    expect(result).to_have_called_tool("search_tickets", {"service": "payment"})
    expect(result).not_to_have_called_tool("open_ticket")
    expect(result).not_to_have_called_tool("close_all_tickets")


@test("says so when paging the on-call fails")
async def paging_fails(agent, expect, tickets):
    result = await agent.run("Page the on-call about the payment outage", provisioned=mcp(tickets))
    expect(result).to_have_called_tool("page_oncall", server="tickets")
    # The tool failed (isError): the agent must not carry on as if it had worked.
    expect(result.output).to_match(r"page_oncall failed")
    [paged] = tickets.calls_of("page_oncall")
    assert paged.is_error
