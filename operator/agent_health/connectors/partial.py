"""What an agent had sent when its call timed out, kept on the :class:`~.errors.AgentTimeout`.

A timed-out call has no answer to show, but the agent may well have sent most of one: a
JSON body that stopped halfway, AG-UI events up to a tool call that never returned, a
command's stdout so far. Each built-in connector keeps that (:class:`Partial`) and the test
result carries it (``TestResult.partial``), so a reader sees how far the agent got:

* REST and OpenAI-compatible: the body received so far (:class:`~.transport.Received` reads it
  as it arrives), its first :data:`KEEP_BYTES` decoded as UTF-8 with replacement;
* AG-UI: the events folded so far — the assistant's text and the steps (tool calls seen,
  messages, results), a message or call still open shown as it stood;
* subprocess: the command's stdout so far, kept as the body is.

Like every other text from the agent it is shown with its control characters made visible.
"""

import codecs
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health.connectors.protocol import Step

KEEP_BYTES = 64 * 1024
"""How much of a body or stdout a timeout keeps (and how many characters of folded text)."""

Source = Literal["body", "events", "stdout"]


class Partial(BaseModel):
    """What the agent had sent before its call timed out."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: Source = Field(
        description="body: the HTTP body received (REST, OpenAI-compatible); events: the AG-UI "
        "events folded; stdout: the command's stdout"
    )
    bytes: int = Field(default=0, ge=0, description="how many bytes had arrived, in all")
    text: str = Field(
        default="",
        description="the body or stdout (its first 64 KiB, decoded as UTF-8 with replacement), "
        "or the assistant's text folded from the events",
    )
    truncated: bool = Field(
        default=False, description="the agent had sent more than text keeps (64 KiB)"
    )
    events: int | None = Field(default=None, ge=0, description="AG-UI: the events read")
    trajectory: tuple[Step, ...] = Field(
        default=(), description="AG-UI: the steps folded so far (tool calls seen, messages)"
    )


def of_bytes(data: bytes | bytearray, source: Source, size: int | None = None) -> Partial:
    """The first :data:`KEEP_BYTES` of ``data`` (``size`` bytes had arrived: default its
    length), decoded. A UTF-8 sequence cut by the cap is left out, one cut by the agent
    stopping is shown as U+FFFD (it is what came)."""
    total = len(data) if size is None else size
    cut = total > KEEP_BYTES
    text, _ = codecs.utf_8_decode(bytes(data[:KEEP_BYTES]), "replace", not cut)
    return Partial(source=source, bytes=total, text=text, truncated=cut)


def of_events(steps: Sequence[Step], events: int, size: int) -> Partial:
    """What ``events`` AG-UI events (``size`` bytes) had folded into: ``steps``, and the
    assistant's text among them, message after message."""
    text = "\n".join(s.content for s in steps if s.type == "assistant" and s.content)
    cut = len(text) > KEEP_BYTES
    return Partial(
        source="events",
        bytes=size,
        text=text[:KEEP_BYTES] if cut else text,
        truncated=cut,
        events=events,
        trajectory=tuple(steps),
    )
