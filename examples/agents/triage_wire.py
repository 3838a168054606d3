"""How the triage agent's steps look on the wire of each protocol it speaks.

The agent records what it does as REST protocol v1 steps (dicts). These pure functions
turn them into AG-UI events (streamed as they happen) and into an OpenAI-compatible
chat-completions answer (tool calls in the message, tool results as earlier messages).
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui import core


def _pieces(text: str, size: int = 3) -> list[str]:
    """Split text into a few deltas, as a streaming model would send it."""
    words = text.split(" ")
    return [
        " ".join(words[i : i + size]) + (" " if i + size < len(words) else "")
        for i in range(0, len(words), size)
    ] or [""]


def agui_events(step: dict[str, Any], message_id: str) -> list[core.BaseEvent]:
    """The AG-UI events for one step; ``message_id`` names the message or result."""
    kind = step["type"]
    if kind == "thinking":
        return [
            core.ReasoningStartEvent(message_id=message_id),
            core.ReasoningMessageStartEvent(message_id=message_id, role="reasoning"),
            *(
                core.ReasoningMessageContentEvent(message_id=message_id, delta=piece)
                for piece in _pieces(step["content"])
            ),
            core.ReasoningMessageEndEvent(message_id=message_id),
            core.ReasoningEndEvent(message_id=message_id),
        ]
    if kind == "assistant":
        return [
            core.TextMessageStartEvent(message_id=message_id, role="assistant"),
            *(
                core.TextMessageContentEvent(message_id=message_id, delta=piece)
                for piece in _pieces(step["content"])
            ),
            core.TextMessageEndEvent(message_id=message_id),
        ]
    if kind == "tool_call":
        call_id = step["tool_call_id"]
        return [
            core.ToolCallStartEvent(tool_call_id=call_id, tool_call_name=step["tool_name"]),
            core.ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(step["tool_args"])),
            core.ToolCallEndEvent(tool_call_id=call_id),
        ]
    if kind == "tool_result":
        return [
            core.ToolCallResultEvent(
                message_id=message_id,
                tool_call_id=step["tool_call_id"],
                content=json.dumps(step["tool_output"]),
                role="tool",
                metadata={"status": step["status"]},
            )
        ]
    return []


def agui_usage(usage: dict[str, int]) -> list[core.TokenUsage]:
    """REST v1 token usage as the ``usage`` of ``RUN_FINISHED``."""
    return [
        core.TokenUsage(
            input_tokens=usage["prompt"],
            output_tokens=usage["completion"],
            total_tokens=usage["total"],
        )
    ]


def openai_answer(
    model: str, run_id: str, steps: list[dict[str, Any]], output: str, usage: dict[str, int]
) -> dict[str, Any]:
    """A chat-completions answer: the tool calls the agent made on the final message, their
    results as earlier ``role: "tool"`` messages, the answer as its content."""
    calls = [
        {
            "id": s["tool_call_id"],
            "type": "function",
            "function": {"name": s["tool_name"], "arguments": json.dumps(s["tool_args"])},
        }
        for s in steps
        if s["type"] == "tool_call"
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": s["tool_call_id"],
            "name": s["tool_name"],
            "content": json.dumps(s["tool_output"]),
            **({"is_error": True} if s["status"] == "error" else {}),
        }
        for s in steps
        if s["type"] == "tool_result"
    ]
    return {
        "id": f"chatcmpl-{run_id}",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": output,
                    "tool_calls": calls,
                },
            }
        ],
        "messages": results,
        "usage": {
            "prompt_tokens": usage["prompt"],
            "completion_tokens": usage["completion"],
            "total_tokens": usage["total"],
        },
    }
