"""JSON shapes of judge calls and model calls, for the judge service and its clients."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health.judging import chat
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import Role, RunResult


class WireJudgeRequest(BaseModel):
    """A ``judge()`` call as sent to the judge service (no custom evaluators: they run locally)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    result: RunResult | None = None
    text: str | None = None
    criteria: str = Field(min_length=1)
    role: Role = "gate"
    context: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    model: str | None = None
    repeat: int = Field(default=0, ge=0)
    test_id: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    trace: dict[str, Any] | None = Field(
        default=None,
        description="the run's OpenSearch telemetry, read by the cell (tools.ship)",
    )
    expected: str | None = Field(default=None, description="the expected answer, when given")

    @classmethod
    def of(cls, request: JudgeRequest) -> WireJudgeRequest:
        return cls(
            result=request.result,
            text=request.text,
            criteria=request.criteria,
            role=request.role,
            context=request.context,
            tools=request.tools,
            model=request.model,
            repeat=request.repeat,
            test_id=request.test_id,
            options=dict(request.options),
            trace=dict(request.trace) if request.trace is not None else None,
            expected=request.expected,
        )

    def request(self) -> JudgeRequest:
        return JudgeRequest(
            result=self.result,
            text=self.text,
            criteria=self.criteria,
            role=self.role,
            context=self.context,
            tools=self.tools,
            evaluator=None,
            model=self.model,
            repeat=self.repeat,
            test_id=self.test_id,
            options=self.options,
            trace=self.trace,
            expected=self.expected,
        )


def chat_to_json(request: chat.ChatRequest) -> dict[str, Any]:
    return {
        "model": request.model,
        "system": request.system,
        "messages": [_message_to_json(m) for m in request.messages],
        "tools": [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in request.tools
        ],
        "schema": dict(request.schema) if request.schema is not None else None,
        "max_tokens": request.max_tokens,
    }


def chat_from_json(data: dict[str, Any]) -> chat.ChatRequest:
    return chat.ChatRequest(
        model=str(data["model"]),
        system=str(data.get("system", "")),
        messages=tuple(_message_from_json(m) for m in data.get("messages", [])),
        tools=tuple(
            chat.ToolSpec(t["name"], t.get("description", ""), t.get("parameters", {}))
            for t in data.get("tools", [])
        ),
        schema=data.get("schema"),
        max_tokens=int(data.get("max_tokens", 1024)),
    )


def completion_to_json(completion: chat.Completion) -> dict[str, Any]:
    return {
        "text": completion.text,
        "structured": dict(completion.structured) if completion.structured is not None else None,
        "tool_calls": [_call_to_json(c) for c in completion.tool_calls],
        "input_tokens": completion.input_tokens,
        "output_tokens": completion.output_tokens,
    }


def completion_from_json(data: dict[str, Any]) -> chat.Completion:
    return chat.Completion(
        text=str(data.get("text", "")),
        structured=data.get("structured"),
        tool_calls=tuple(_call_from_json(c) for c in data.get("tool_calls", [])),
        input_tokens=int(data.get("input_tokens", 0)),
        output_tokens=int(data.get("output_tokens", 0)),
    )


def _call_to_json(call: chat.ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}


def _call_from_json(data: dict[str, Any]) -> chat.ToolCall:
    return chat.ToolCall(id=str(data["id"]), name=str(data["name"]), arguments=data["arguments"])


def _message_to_json(message: chat.Message) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": [_call_to_json(c) for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
    }


def _message_from_json(data: dict[str, Any]) -> chat.Message:
    return chat.Message(
        role=data["role"],
        content=str(data.get("content", "")),
        tool_calls=tuple(_call_from_json(c) for c in data.get("tool_calls", [])),
        tool_call_id=data.get("tool_call_id"),
    )
