"""The provider-neutral shape of one model call: messages, tools, and the completion.

Every provider translates a :class:`ChatRequest` into its own wire format and its answer
back into a :class:`Completion`, so the contextual judge, the agentic loop and custom
evaluators never see a provider's dialect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

VERDICT_TOOL_NAME = "submit_verdict"


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: a name, what it does, and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """The model's request to call one tool."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Message:
    """One turn: ``user`` text, an ``assistant`` answer (maybe calling tools), a ``tool`` result."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ChatRequest:
    """One model call.

    ``schema`` asks for a structured answer that follows this JSON schema (each provider
    uses its native mechanism: a JSON-schema response format or a forced tool); the parsed
    object comes back in :attr:`Completion.structured`.
    """

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    schema: Mapping[str, Any] | None = None
    max_tokens: int = 1024


@dataclass(frozen=True)
class Completion:
    """What the model answered, and what it cost."""

    text: str = ""
    structured: Mapping[str, Any] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


def tool_completion(
    text: str,
    calls: tuple[ToolCall, ...],
    *,
    structured: bool,
    input_tokens: int,
    output_tokens: int,
) -> Completion:
    """A completion from a provider whose structured answer is a call of the verdict tool."""
    answer = next((c for c in calls if c.name == VERDICT_TOOL_NAME), None)
    return Completion(
        text=text,
        structured=answer.arguments if structured and answer else None,
        tool_calls=() if structured else calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


@dataclass
class Tally:
    """Tokens and model calls spent on one judge() call (mutable; owned by that call)."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    def add(self, completion: Completion) -> None:
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        self.calls += 1

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens
