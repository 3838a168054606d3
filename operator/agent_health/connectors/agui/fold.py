"""Fold a stream of AG-UI events into one trajectory, output text, token usage and the model
the tokens were spent on.

Each message, reasoning message and tool call becomes one :class:`Step`, placed where it
*started* in the stream (so a tool call that begins inside a text message comes after that
message), and filled in when it ends. ``*_CHUNK`` events open an item on first sight and
close it when any other event arrives, as the AG-UI spec says. The 0.x ``THINKING_*``
events, which the 1.0 package no longer names, fold like the 1.0 ``REASONING_*`` ones.

``RUN_FINISHED.usage`` is a list of token usages, each naming its provider and model: their
sum is the run's token usage, and the model they name is the reply's ``model`` — or, when
they name several, ``usage_by_model`` splits the tokens between them, so each part is priced
at its own model's price. A ``model`` in ``RUN_FINISHED.result`` (or its ``token_usage``) or
in a ``CUSTOM`` usage event names the model when the usages do not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pydantic_core
from ag_ui import core

from agent_health.connectors import errors, wire
from agent_health.connectors.agui import plain
from agent_health.connectors.protocol import ModelUsage, Step, StepType, TokenUsage, by_model
from agent_health.ledger import strictjson

KNOWN_TYPES = frozenset(e.value for e in core.EventType)
LEGACY_THINKING = frozenset(
    {
        "THINKING_START",
        "THINKING_END",
        "THINKING_TEXT_MESSAGE_START",
        "THINKING_TEXT_MESSAGE_CONTENT",
        "THINKING_TEXT_MESSAGE_END",
    }
)
_CHUNKS = {
    "TEXT_MESSAGE_CHUNK": "text",
    "REASONING_MESSAGE_CHUNK": "reasoning",
    "TOOL_CALL_CHUNK": "tool",
}
_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(core.Event)
PLAIN: dict[str, plain.Shape] = plain.shapes()
"""The event types folded without the package's validation when an event is plain."""


@dataclass
class _Text:
    slot: int
    kind: StepType | None  # None: a system/developer message, kept out of the trajectory
    parts: list[str] = field(default_factory=list)


@dataclass
class _Call:
    slot: int
    name: str
    parts: list[str] = field(default_factory=list)
    ended_at: float | None = None


class Fold:
    """Feed events in stream order with :meth:`feed`; read :meth:`reply_fields` at the end."""

    def __init__(self, url: str, *, plain: bool = True) -> None:
        """``plain=False`` validates every event through the package's models (to compare)."""
        self.url = url
        self._plain = _PLAIN_PATH if plain else {}
        self.count = 0
        self.finished = False
        self._slots: list[Step | None] = []
        self._texts: dict[tuple[str, str], _Text] = {}
        self._calls: dict[str, _Call] = {}
        self._names: dict[str, str] = {}
        self._chunk: tuple[str, str] | None = None
        self._legacy = 0
        self._last_text: str | None = None
        self._result: Any = None
        self._usage: TokenUsage | None = None
        self._parts: tuple[ModelUsage, ...] = ()
        self._model: str | None = None

    # -- input ----------------------------------------------------------------------------

    def feed(self, data: str) -> dict[str, Any]:
        """Fold one SSE ``data`` field; return the event as a dict. Raises on RUN_ERROR."""
        self.count += 1
        raw: dict[str, Any]
        try:  # wire.parse_json inline, once per event; 1e400 (read as inf) the long way too
            raw = pydantic_core.from_json(data, allow_inf_nan=False)
            raw = self._json(data) if strictjson.may_overflow(data) else raw
        except ValueError:
            raw = self._json(data)  # says why
        kind = raw.get("type") if type(raw) is dict else None
        if type(kind) is not str:
            raise errors.AgentProtocolError(
                f"agent at {self.url} sent AG-UI event #{self.count} without a 'type': "
                f"{data[:120]!r}"
            )
        if self._chunk is not None:
            self._close_chunk_unless(kind, raw)
        plain = self._plain.get(kind)
        if plain is not None and plain[0](raw):
            plain[1](self, raw)  # what the model would hold, read from the event
        elif kind in LEGACY_THINKING:
            self._legacy_thinking(kind, raw)
        elif kind in KNOWN_TYPES:
            try:
                event = _EVENT.validate_python(raw)
            except pydantic.ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(p) for p in first["loc"][1:]) or "event"
                raise errors.AgentProtocolError(
                    f"agent at {self.url} sent a malformed {kind} event "
                    f"(#{self.count}): {where}: {first['msg']}"
                ) from err
            self._fold(event)
        # Any other type is a newer protocol's event: kept in the raw events, not folded.
        return raw

    def _json(self, data: str) -> Any:
        try:
            return wire.parse_json(data)
        except ValueError as err:
            raise errors.AgentProtocolError(
                f"agent at {self.url} sent AG-UI event #{self.count} that is not JSON"
                f"{wire.why_not(err)}: {data[:120]!r}"
            ) from err

    def _fold(self, event: Any) -> None:
        match event:
            case core.TextMessageStartEvent(message_id=mid, role=role):
                self._open_text("text", mid, _role_kind(role))
            case core.TextMessageContentEvent(message_id=mid, delta=delta):
                self._text("text", mid, "assistant").parts.append(delta)
            case core.TextMessageEndEvent(message_id=mid):
                self._close_text("text", mid)
            case core.TextMessageChunkEvent(message_id=mid, role=role, delta=delta):
                mid = mid or (self._chunk[1] if self._chunk else f"chunk-{self.count}")
                self._text("text", mid, _role_kind(role)).parts.append(delta or "")
                self._chunk = ("text", mid)
            case core.ReasoningMessageStartEvent(message_id=mid):
                self._open_text("reasoning", mid, "thinking")
            case core.ReasoningMessageContentEvent(message_id=mid, delta=delta):
                self._text("reasoning", mid, "thinking").parts.append(delta)
            case core.ReasoningMessageEndEvent(message_id=mid):
                self._close_text("reasoning", mid)
            case core.ReasoningMessageChunkEvent(message_id=mid, delta=delta):
                mid = mid or (self._chunk[1] if self._chunk else f"chunk-{self.count}")
                self._text("reasoning", mid, "thinking").parts.append(delta or "")
                self._chunk = ("reasoning", mid)
            case core.ToolCallStartEvent(tool_call_id=cid, tool_call_name=name):
                self._open_call(cid, name)
            case core.ToolCallArgsEvent(tool_call_id=cid, delta=delta):
                self._call(cid).parts.append(delta)
            case core.ToolCallEndEvent(tool_call_id=cid):
                self._end_call(cid)
            case core.ToolCallChunkEvent(tool_call_id=cid, tool_call_name=name, delta=delta):
                cid = cid or (self._chunk[1] if self._chunk else f"call-{self.count}")
                if cid not in self._calls:
                    self._open_call(cid, name or "")
                self._calls[cid].parts.append(delta or "")
                self._chunk = ("tool", cid)
            case core.ToolCallResultEvent():
                self._tool_result(event)
            case core.RunFinishedEvent(result=result, usage=usage):
                self._finish(result, usage)
            case core.RunErrorEvent(message=message, code=code):
                raise errors.AgentRunFailed(
                    f"agent at {self.url} reported RUN_ERROR"
                    + (f" [{code}]" if code else "")
                    + f": {message}"
                )
            case core.CustomEvent(name=name, value=value) if name in ("token_usage", "usage"):
                self._usage = TokenUsage.from_counts(value) or self._usage
                self._model = _named(value) or self._model

    def _finish(self, result: Any, usage: list[core.TokenUsage] | None) -> None:
        self.finished = True
        self._result = result
        counts = result.get("token_usage") if isinstance(result, dict) else None
        self._usage = _sum_usage(usage) or TokenUsage.from_counts(counts) or self._usage
        self._parts = by_model(
            ModelUsage(
                model=u.model or None,
                prompt=u.input_tokens,
                completion=u.output_tokens,
                total=u.total_tokens,
            )
            for u in usage or ()
        )
        self._model = _named(result) or _named(counts) or self._model

    def _legacy_thinking(self, kind: str, raw: dict[str, Any]) -> None:
        if kind == "THINKING_TEXT_MESSAGE_START":
            self._legacy += 1
            self._open_text("reasoning", f"thinking-{self._legacy}", "thinking")
        elif kind == "THINKING_TEXT_MESSAGE_CONTENT":
            text = self._text("reasoning", f"thinking-{self._legacy}", "thinking")
            text.parts.append(str(raw.get("delta", "")))
        elif kind == "THINKING_TEXT_MESSAGE_END":
            self._close_text("reasoning", f"thinking-{self._legacy}")

    # -- items ----------------------------------------------------------------------------

    def _close_chunk_unless(self, kind: str, raw: dict[str, Any]) -> None:
        if self._chunk is None:
            return
        family, cid = self._chunk
        key = "toolCallId" if family == "tool" else "messageId"
        if _CHUNKS.get(kind) == family and raw.get(key) in (None, cid):
            return  # the same chunked item goes on
        self._chunk = None
        if family == "tool":
            self._end_call(cid)
        else:
            self._close_text(family, cid)

    def _open_text(self, family: str, mid: str, kind: StepType | None) -> _Text:
        self._slots.append(None)
        text = _Text(len(self._slots) - 1, kind)
        self._texts[(family, mid)] = text
        return text

    def _text(self, family: str, mid: str, kind: StepType | None) -> _Text:
        return self._texts.get((family, mid)) or self._open_text(family, mid, kind)

    def _close_text(self, family: str, mid: str) -> None:
        text = self._texts.pop((family, mid), None)
        if text is None or text.kind is None:
            return
        content = "".join(text.parts)
        self._slots[text.slot] = Step(type=text.kind, content=content)
        if text.kind == "assistant":
            self._last_text = content

    def _open_call(self, cid: str, name: str) -> None:
        self._slots.append(None)
        self._calls[cid] = _Call(len(self._slots) - 1, name)
        self._names[cid] = name

    def _call(self, cid: str) -> _Call:
        if cid not in self._calls:
            self._open_call(cid, self._names.get(cid, ""))
        return self._calls[cid]

    def _end_call(self, cid: str) -> None:
        call = self._call(cid)
        if call.ended_at is not None:
            return
        call.ended_at = time.perf_counter()
        self._slots[call.slot] = Step.model_validate(
            {
                "type": "tool_call",
                "tool_name": call.name,
                "tool_args": _args(call.parts),
                "tool_call_id": cid,
            }
        )

    def _tool_result(self, event: core.ToolCallResultEvent) -> None:
        cid = event.tool_call_id
        latency = None
        if cid in self._calls:  # else a call from an earlier run, known by its id only
            self._end_call(cid)
            ended_at = self._calls.pop(cid).ended_at or time.perf_counter()
            latency = round((time.perf_counter() - ended_at) * 1000, 3)
        meta = event.metadata or {}
        failed = meta.get("status") == "error" or bool(meta.get("error"))
        self._slots.append(
            Step.model_validate(
                {
                    "type": "tool_result",
                    "tool_name": self._names.get(cid),
                    "tool_output": _content(event.content),
                    "status": "error" if failed else "ok",
                    "latency_ms": latency,
                    "tool_call_id": cid,
                }
            )
        )

    # -- output ---------------------------------------------------------------------------

    def reply_fields(self) -> dict[str, Any]:
        """``output``, ``trajectory`` and ``token_usage`` of the finished run, and ``model``
        or ``usage_by_model`` when the run named its model(s)."""
        for family, mid in list(self._texts):
            self._close_text(family, mid)
        for cid in list(self._calls):
            self._end_call(cid)
        result = self._result
        if isinstance(result, dict) and isinstance(result.get("output"), str):
            output: str | None = result["output"]
        else:
            output = result if isinstance(result, str) else self._last_text
        fields = {
            "output": output or "",
            "trajectory": tuple(s for s in self._slots if s is not None),
            "token_usage": self._usage or _NO_USAGE,
        }
        models = {part.model for part in self._parts}
        if len(models) > 1:
            fields["usage_by_model"] = self._parts
        model = next(iter(models)) if len(models) == 1 else None
        if model or self._model:
            fields["model"] = model or self._model
        return fields


_FOLD_PLAIN: dict[str, Callable[[Fold, dict[str, Any]], object]] = {
    # Each does what ``Fold._fold`` does with the validated model of the same event (f: the
    # fold, e: the event).
    "RUN_STARTED": lambda f, e: None,
    "RUN_FINISHED": lambda f, e: f._finish(e.get("result"), None),
    "TEXT_MESSAGE_START": lambda f, e: f._open_text(
        "text", e["messageId"], _role_kind(e.get("role"))
    ),
    "TEXT_MESSAGE_CONTENT": lambda f, e: f._text("text", e["messageId"], "assistant").parts.append(
        e["delta"]
    ),
    "TEXT_MESSAGE_END": lambda f, e: f._close_text("text", e["messageId"]),
    "TOOL_CALL_START": lambda f, e: f._open_call(e["toolCallId"], e["toolCallName"]),
    "TOOL_CALL_ARGS": lambda f, e: f._call(e["toolCallId"]).parts.append(e["delta"]),
    "TOOL_CALL_END": lambda f, e: f._end_call(e["toolCallId"]),
    "REASONING_MESSAGE_START": lambda f, e: f._open_text("reasoning", e["messageId"], "thinking"),
    "REASONING_MESSAGE_CONTENT": lambda f, e: f._text(
        "reasoning", e["messageId"], "thinking"
    ).parts.append(e["delta"]),
    "REASONING_MESSAGE_END": lambda f, e: f._close_text("reasoning", e["messageId"]),
}
_NO_USAGE = TokenUsage()  # immutable: one for every run that reported none
_PLAIN_PATH = {kind: (shape.plain, _FOLD_PLAIN[kind]) for kind, shape in PLAIN.items()}


def _role_kind(role: str | None) -> StepType | None:
    if role in (None, "assistant"):
        return "assistant"
    return "user" if role == "user" else None


def _args(parts: list[str]) -> dict[str, Any]:
    text = "".join(parts).strip()
    if not text:
        return {}
    try:
        value = wire.parse_json(text)
    except ValueError:  # not JSON, or not JSON we could record (NaN): kept as sent
        return {"_raw": text}  # what the agent sent, so a matcher can show it
    return value if isinstance(value, dict) else {"_value": value}


def _content(content: Any) -> Any:
    if isinstance(content, str):
        try:
            return wire.parse_json(content)
        except ValueError:
            return content
    return "".join(getattr(part, "text", "") or "" for part in content)


def _named(holder: Any) -> str | None:
    """The ``model`` a dict of the stream names, if any."""
    model = holder.get("model") if isinstance(holder, dict) else None
    return model if isinstance(model, str) and model else None


def _sum_usage(usage: list[core.TokenUsage] | None) -> TokenUsage | None:
    if not usage:
        return None
    prompt = sum(u.input_tokens or 0 for u in usage)
    completion = sum(u.output_tokens or 0 for u in usage)
    total = sum(u.total_tokens or (u.input_tokens or 0) + (u.output_tokens or 0) for u in usage)
    return TokenUsage(prompt=prompt, completion=completion, total=total)
