"""Tool claims on MCP tools, held to the calls the gateway read by name: the tool, its server,
its arguments, and an isError the agent did not report."""

from __future__ import annotations

from agent_health.connectors import protocol
from agent_health.engine.outcome import claims
from agent_health.sdk import check, results
from agent_health.traces import metrics

TIME, TICKETS = "time", "tickets"
SHOWN = {TIME: {"get_current_time", "convert_time"}, TICKETS: {"search", "page_oncall"}}


def call(peer: str, tool: str, is_error: bool = False, **args: object) -> claims.Sighting:
    return claims.Sighting(peer, tool, dict(args), is_error)


def run(*steps: tuple[str, str]) -> results.RunResult:
    made = []
    for tool, status in steps:
        made.append(protocol.Step(type="tool_call", tool_name=tool, tool_args={}))
        made.append(protocol.Step(type="tool_result", tool_name=tool, status=status))  # type: ignore[arg-type]
    return results.RunResult(run_id="r", prompt="p", output="o", trajectory=tuple(made))


def signal(name: str, expected: object, passed: bool = True) -> results.Signal:
    return results.Signal(
        kind="deterministic", role="gate", name=name, passed=passed, score=float(passed),
        evidence=check.evidence(expected, {}),
    )  # fmt: skip


def called(tool: str, **expected: object) -> results.Signal:
    return signal(f"to_have_called_tool({tool!r})", {"tool": tool, **expected})


def held(signals: list[results.Signal], seen: list[claims.Sighting], ran: results.RunResult):  # type: ignore[no-untyped-def]
    return claims.check(signals, ran, seen, claims.served({}, SHOWN)).signals


def test_a_claimed_mcp_call_the_gateway_never_read_fails_naming_it() -> None:
    seen = [call(TIME, "get_current_time", timezone="UTC")]
    ran = run(("get_current_time", "ok"), ("convert_time", "ok"))
    now, convert = held([called("get_current_time"), called("convert_time")], seen, ran)
    assert now.passed is True
    assert now.evidence is not None
    assert now.evidence["source"] == "gateway"
    # Both tools are the time server's, but the gateway read which one each call was.
    assert (convert.passed, convert.error) == (False, claims.NOT_SEEN)


def test_server_and_args_are_held_to_the_call_the_gateway_read() -> None:
    seen = [call(TIME, "get_current_time", timezone="Europe/Oslo")]
    ran = run(("get_current_time", "ok"))
    right = called("get_current_time", server="time", args={"timezone": "Europe/Oslo"})
    other_server = called("get_current_time", server="tickets")
    other_args = called("get_current_time", args={"timezone": "Asia/Tokyo"})
    a, b, c = held([right, other_server, other_args], seen, ran)
    assert a.passed is True
    assert (b.passed, b.error) == (False, claims.NOT_SEEN_AS_CALLED)
    assert (c.passed, c.error) == (False, claims.NOT_SEEN_AS_CALLED)
    assert c.evidence is not None
    assert c.evidence["gateway_calls_with_args"] == 0


def test_the_order_of_mcp_calls_is_the_order_the_gateway_read_them() -> None:
    seen = [call(TICKETS, "search"), call(TIME, "get_current_time")]
    ran = run(("get_current_time", "ok"), ("search", "ok"))
    claimed = ["get_current_time", "search"]  # the agent's word: time first
    [ordered] = held([signal(f"{claims.IN_ORDER}{claimed!r})", claimed)], seen, ran)
    assert (ordered.passed, ordered.error) == (False, claims.NOT_IN_ORDER)
    assert ordered.evidence is not None
    assert ordered.evidence["gateway_calls"] == [
        "peer:tickets/search",
        "peer:time/get_current_time",
    ]


def test_an_is_error_the_agent_did_not_report_is_a_tool_error() -> None:
    seen = [call(TICKETS, "search"), call(TICKETS, "page_oncall", is_error=True)]
    ran = run(("search", "ok"), ("page_oncall", "ok"))  # the agent says all went well
    [no_errors] = held([signal("to_have_no_tool_errors()", [])], seen, ran)
    assert (no_errors.passed, no_errors.error) == (False, claims.ERRORED)
    assert no_errors.evidence is not None
    assert no_errors.evidence["gateway_tool_errors"] == [
        {"server": "peer:tickets", "tool": "page_oncall", "arguments": {}}
    ]
    measured = claims.as_seen(ran, seen)
    assert measured is not None
    failed = [s.tool_name for s in measured.trajectory if s.failed]
    assert failed == ["page_oncall"]
    assert metrics.derive(measured)["ignored_tool_errors"] == 1
    assert metrics.derive(ran)["ignored_tool_errors"] == 0


def test_an_mcp_error_the_agent_reported_in_its_output_is_a_tool_error() -> None:
    step = protocol.Step(
        type="tool_result",
        tool_name="search",
        tool_output={"content": [{"type": "text", "text": "down"}], "isError": True},
    )
    assert step.failed is True
    assert step.status is None


def test_exchanges_of_an_mcp_peer_are_not_calls_of_its_tools() -> None:
    recorded = [
        {"kind": "exchange", "principal": "target", "upstream": "peer:time", "status": 200,
         "started_at": "2026-01-01T00:00:00Z"},
        {"kind": "mcp", "principal": "target", "server": "peer:time", "method": "tools/list",
         "result": {"tools": [{"name": "get_current_time"}, {"name": "convert_time"}]},
         "started_at": "2026-01-01T00:00:01Z"},
        {"kind": "mcp", "principal": "target", "server": "peer:time", "method": "tools/call",
         "name": "convert_time", "arguments": {"time": "12:00"}, "is_error": False,
         "started_at": "2026-01-01T00:00:03Z"},
        {"kind": "exchange", "principal": "target", "upstream": "peer:logs", "status": 200,
         "started_at": "2026-01-01T00:00:02Z"},
    ]  # fmt: skip
    calls, shown = claims.from_objects(recorded)
    assert calls == [
        claims.Sighting("logs"),
        claims.Sighting("time", "convert_time", {"time": "12:00"}, False),
    ]
    assert shown == {"time": {"get_current_time", "convert_time"}}


def test_mcp_calls_the_agent_left_out_are_named_by_tool() -> None:
    seen = [call(TIME, "get_current_time"), call(TIME, "convert_time"), call(TIME, "convert_time")]
    ran = run(("get_current_time", "ok"))  # the agent reports one call of three
    signals = held([called("get_current_time")], seen, ran)
    [omitted] = [s for s in signals if s.role == "observe"]
    assert omitted.name == "calls to peer:time the trajectory omits"
    assert omitted.evidence is not None
    assert omitted.evidence["omitted_calls"] == 2
    assert omitted.evidence["omitted_tools"] == {"convert_time": 2}


def test_an_mcp_call_the_agent_left_out_fails_not_to_have_called_tool() -> None:
    seen = [call(TICKETS, "search"), call(TICKETS, "page_oncall")]
    ran = run(("search", "ok"))  # the agent does not report the page
    never = signal("not_to_have_called_tool('page_oncall')", {"tool": "page_oncall", "times": 0})
    other = signal("not_to_have_called_tool('convert_time')", {"tool": "convert_time", "times": 0})
    paged, converted = held([never, other], seen, ran)[:2]
    assert (paged.passed, paged.error) == (False, claims.CALLED_UNREPORTED)
    assert paged.evidence is not None
    assert paged.evidence["gateway_calls_of_tool"] == [{"server": "peer:tickets", "arguments": {}}]
    assert converted.passed is True
    assert converted.evidence is not None
    assert converted.evidence["source"] == "gateway"


def test_the_run_as_the_gateway_saw_it_says_where_each_step_came_from() -> None:
    seen = [
        call(TIME, "get_current_time", timezone="UTC"),
        call(TICKETS, "page_oncall", is_error=True),
        call(TICKETS, "search", q="db"),  # made, and never reported
    ]
    ran = run(("get_current_time", "ok"), ("page_oncall", "ok"))
    measured = claims.as_seen(ran, seen)
    assert measured is not None
    shown = [
        (s.type, s.tool_name, s.server, s.status, (s.model_extra or {}).get("source"))
        for s in measured.trajectory
    ]
    assert shown == [
        ("tool_call", "get_current_time", "peer:time", None, None),
        ("tool_result", "get_current_time", "peer:time", "ok", None),
        ("tool_call", "page_oncall", "peer:tickets", None, None),
        ("tool_result", "page_oncall", "peer:tickets", "error", "gateway"),
        ("tool_call", "search", "peer:tickets", None, "gateway"),
        ("tool_result", "search", "peer:tickets", "ok", "gateway"),
    ]
    assert measured.trajectory[4].tool_args == {"q": "db"}
    assert metrics.derive(measured)["tool_calls"] == 3
