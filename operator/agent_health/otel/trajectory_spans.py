"""The spans of an agent's trajectory under its ``invoke_agent`` span: ``execute_tool`` for
each tool call (paired with its result) and ``chat`` for each assistant turn
(:mod:`.spans` builds the rest of a test's tree). A tool call the gateway read from an MCP
server (the test's ``mcp_calls``: the n-th call of a tool for its n-th span) is named as the
GenAI conventions name MCP tools: ``mcp.method.name`` ``tools/call``, its server, and an
``isError`` the server answered as ``error.type`` ``tool_error``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agent_health.connectors.protocol import Step, TokenUsage
from agent_health.otel import conventions as cv
from agent_health.otel import records


@dataclass
class _Item:
    kind: Literal["tool", "chat"]
    step: Step
    result: Step | None = None

    @property
    def latency_ms(self) -> float | None:
        for step in (self.result, self.step):
            if step is not None and step.latency_ms is not None and step.latency_ms >= 0:
                return step.latency_ms
        return None


def _extra(step: Step, *names: str) -> Any:
    extra = step.model_extra or {}
    return next((extra[n] for n in names if extra.get(n) is not None), None)


def _items(trajectory: Sequence[Step]) -> list[_Item]:
    """Tool calls (each with the result that answers it) and assistant turns, in order."""
    items: list[_Item] = []
    open_calls: dict[str, list[_Item]] = {}  # by call id, else by tool: oldest first
    for step in trajectory:
        if step.type not in ("tool_call", "tool_result"):
            if step.type == "assistant":
                items.append(_Item("chat", step))
            continue
        call_id = _extra(step, "tool_call_id", "id")
        key = str(call_id) if call_id is not None else f"name:{step.tool_name}"
        if step.type == "tool_call":
            item = _Item("tool", step)
            items.append(item)
            open_calls.setdefault(key, []).append(item)
            continue
        waiting = open_calls.get(key)
        if waiting:
            waiting.pop(0).result = step
        else:  # a result of no call we saw: a tool span of its own
            items.append(_Item("tool", step, step))
    return items


def steps(
    trajectory: Sequence[Step],
    invoke: records.SpanRecord,
    content: bool,
    mcp_calls: Sequence[Mapping[str, Any]] = (),
) -> list[records.SpanRecord]:
    items = _items(trajectory)
    read: dict[str, list[Mapping[str, Any]]] = {}
    for call in mcp_calls:
        if call.get("method") == cv.MCP_TOOLS_CALL and isinstance(call.get("name"), str):
            read.setdefault(call["name"], []).append(call)
    if not items:
        return []
    window = invoke.end_ns - invoke.start_ns
    known = sum(int((i.latency_ms or 0) * 1e6) for i in items)
    unknown = sum(1 for i in items if i.latency_ms is None)
    share = max(0, window - known) // unknown if unknown else 0
    cursor = invoke.start_ns
    spans = []
    for item in items:
        latency = item.latency_ms
        length = int(latency * 1e6) if latency is not None else share
        start = min(cursor, invoke.end_ns)
        end = min(start + length, invoke.end_ns)
        cursor = end
        if item.kind == "tool":
            span = _tool(item, invoke, content)
            _mcp(span, read)
        else:
            span = _chat(item, invoke)
        span.start_ns, span.end_ns = start, end
        if latency is None:
            span.attributes[cv.TIMING] = "estimated"
        spans.append(span)
    return spans


def _tool(item: _Item, invoke: records.SpanRecord, content: bool) -> records.SpanRecord:
    call, answer = item.step, item.result
    name = call.tool_name or (answer.tool_name if answer else None) or "tool"
    attributes: dict[str, records.AttributeValue] = {
        cv.OPERATION_NAME: cv.EXECUTE_TOOL,
        cv.TOOL_NAME: name,
        cv.TOOL_TYPE: "function",
    }
    call_id = _extra(call, "tool_call_id", "id")
    if call_id is not None:
        attributes[cv.TOOL_CALL_ID] = str(call_id)
    if content and call.type == "tool_call" and call.tool_args is not None:
        attributes[cv.TOOL_CALL_ARGUMENTS] = records.as_json(call.tool_args)
    if content and answer is not None and answer.tool_output is not None:
        attributes[cv.TOOL_CALL_RESULT] = records.as_json(answer.tool_output)
    failed = any(s is not None and s.failed for s in (call, answer))
    if failed:
        attributes[cv.ERROR_TYPE] = "tool_error"
    return records.SpanRecord(
        name=f"{cv.EXECUTE_TOOL} {name}",
        trace_id=invoke.trace_id,
        span_id=records.new_span_id(),
        parent_id=invoke.span_id,
        start_ns=0,
        end_ns=0,
        attributes=attributes,
        error="the tool answered an error" if failed else None,
    )


def _mcp(span: records.SpanRecord, read: dict[str, list[Mapping[str, Any]]]) -> None:
    """Name ``span`` as an MCP tool's when the gateway read a call of its tool (the next one
    not yet given to a span)."""
    name = span.attributes.get(cv.TOOL_NAME)
    calls = read.get(name) if isinstance(name, str) else None
    if not calls:
        return
    call = calls.pop(0)
    span.attributes[cv.MCP_METHOD_NAME] = cv.MCP_TOOLS_CALL
    if isinstance(call.get("server"), str):
        span.attributes[cv.MCP_SERVER] = call["server"]
    if call.get("is_error") is True or call.get("error") is not None:
        span.attributes[cv.ERROR_TYPE] = "tool_error"
        span.error = span.error or "the MCP server answered an error"


def _chat(item: _Item, invoke: records.SpanRecord) -> records.SpanRecord:
    step = item.step
    attributes: dict[str, records.AttributeValue] = {cv.OPERATION_NAME: cv.CHAT}
    model = _extra(step, "model")
    if isinstance(model, str):
        attributes[cv.REQUEST_MODEL] = model
    usage = _extra(step, "token_usage", "usage")
    records.add_usage(
        attributes, TokenUsage.from_counts(dict(usage)) if isinstance(usage, Mapping) else None
    )
    return records.SpanRecord(
        name=f"{cv.CHAT} {model}" if isinstance(model, str) else cv.CHAT,
        trace_id=invoke.trace_id,
        span_id=records.new_span_id(),
        parent_id=invoke.span_id,
        start_ns=0,
        end_ns=0,
        kind="client",
        attributes=attributes,
    )
