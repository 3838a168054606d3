"""Token usage read from a model API response body, as the gateway sees it on the wire.

Understands the two common shapes, whole or streamed as server-sent events:

* OpenAI chat completions: ``usage.prompt_tokens`` / ``usage.completion_tokens``
  (streams carry it in the final chunk when ``stream_options.include_usage`` is set);
* Anthropic messages and OpenAI responses: ``usage.input_tokens`` / ``usage.output_tokens``
  (Anthropic streams split it over ``message_start`` and ``message_delta``; OpenAI response
  streams carry it in ``response.completed``).

Anything else yields ``None``: a body without usage is normal, not an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_INPUT_KEYS = ("prompt_tokens", "input_tokens")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens")


class TokenUsage(BaseModel):
    """Tokens one model call used, as reported by the model API."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)
    model: str | None = None


def parse(body: bytes | str, content_type: str | None = None) -> TokenUsage | None:
    """Token usage of a completion response body, or ``None`` when it reports none.

    >>> parse(b'{"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}')
    TokenUsage(input_tokens=3, output_tokens=4, total_tokens=7, model='m')
    """
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    if _is_event_stream(text, content_type):
        return _merge(_sse_payloads(text))
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    return _merge(iter([payload]))


def _is_event_stream(text: str, content_type: str | None) -> bool:
    if content_type and "text/event-stream" in content_type.lower():
        return True
    head = text.lstrip()[:6]
    return head.startswith(("data:", "event:"))


def _sse_payloads(text: str) -> Iterator[Any]:
    """The JSON ``data:`` payloads of an event stream; ``[DONE]`` and non-JSON are skipped."""
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip(" ") for line in event.split("\n") if line.startswith("data:")
        )
        if not data or data.strip() == "[DONE]":
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue


def _merge(payloads: Iterator[Any]) -> TokenUsage | None:
    """Fold usage over payloads: later values win, as streams report running totals."""
    found = False
    tokens = {"input": 0, "output": 0, "total": 0}
    model: str | None = None
    for payload in payloads:
        for holder in _holders(payload):
            if isinstance(holder.get("model"), str):
                model = holder["model"]
            usage = holder.get("usage")
            if not isinstance(usage, dict):
                continue
            for field, keys in (("input", _INPUT_KEYS), ("output", _OUTPUT_KEYS)):
                value = _first_int(usage, keys)
                if value is not None:
                    tokens[field] = value
                    found = True
            total = _first_int(usage, ("total_tokens",))
            if total is not None:
                tokens["total"] = total
    if not found:
        return None
    return TokenUsage(
        input_tokens=tokens["input"],
        output_tokens=tokens["output"],
        total_tokens=tokens["total"] or tokens["input"] + tokens["output"],
        model=model,
    )


def _holders(payload: Any) -> Iterator[dict[str, Any]]:
    """The objects that may carry ``usage``: the payload, Anthropic's ``message``
    (``message_start``) and OpenAI responses' ``response`` (``response.completed``)."""
    if not isinstance(payload, dict):
        return
    yield payload
    for key in ("message", "response"):
        inner = payload.get(key)
        if isinstance(inner, dict):
            yield inner


def _first_int(usage: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
