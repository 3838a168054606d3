"""A trace source over the exchanges the gateway recorded for this run.

The gateway (docs/ledger.md) records every call that crosses it as an ``exchange`` record
of the ledger (:class:`agent_health.ledger.records.Exchange`, read back from the ledger as
it was sealed): who called (``principal``: ``controller``, ``target`` or ``peer:NAME``),
whom (``upstream``), the method, path, status, start and end time, and the token usage it
read from model answers. This module reads those records as they are; it needs no model
of its own (the ledger is the leaf every package may import), and loads the ledger's
models only for type checking: a run reads its exchanges through the ledger, which has
them loaded already.

Exchanges become spans: the controller's call of the agent is ``invoke_agent``, a call that
carried token usage (or reached a model API path) is ``chat``, any other call the agent made
is ``execute_tool`` (named after the peer, else the last path segment), and calls to the
judge are ``judge`` spans that never count towards the agent's tokens. An exchange that got
no answer (``status`` null: the upstream failed, or the call was cut) is an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agent_health.traces import errors, records
from agent_health.traces import traceparent as traceparent_mod

if TYPE_CHECKING:
    from agent_health import ledger

MODEL_PATHS = ("/chat/completions", "/v1/messages", "/responses", "/completions", ":generate")

ExchangeReader = Callable[[str], Awaitable[Sequence["ledger.Exchange"]]]
"""Reads the exchanges recorded for one run id (the ledger provides one)."""


class ExchangeSource:
    """Spans and logs of a run from the gateway's recorded exchanges."""

    name = "gateway"

    def __init__(self, read: ExchangeReader, *, where: str = "the ledger") -> None:
        self._read = read
        self._where = where

    async def _exchanges(self, run_id: str) -> list[ledger.Exchange]:
        found = [e for e in await self._read(run_id) if e.run_id == run_id]
        if not found:
            raise errors.TracesNotFound(
                f"no gateway exchanges for run {run_id} in {self._where}; was the agent "
                "reached through the gateway?"
            )
        return sorted(found, key=lambda e: e.started_at)

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[records.Span]:
        found = await self._exchanges(run_id)
        trace_id = traceparent_mod.trace_id_of(traceparent) or _hex(run_id, 32)
        root = next((e for e in found if _kind(e) == records.INVOKE_AGENT), None)
        root_id = _hex(f"{run_id}:root", 16)
        spans = []
        for n, e in enumerate(found):
            kind = _kind(e)
            is_root = e is root
            spans.append(
                records.Span(
                    trace_id=trace_id,
                    span_id=root_id if is_root else _hex(f"{run_id}:{n}", 16),
                    name=_name(e, kind),
                    parent_span_id=traceparent_mod.span_id_of(traceparent) if is_root else root_id,
                    start_ms=e.started_at.timestamp() * 1000,
                    end_ms=e.ended_at.timestamp() * 1000,
                    status="error" if _failed(e) else "ok",
                    attributes=_attributes(e, kind),
                    service=e.upstream,
                )
            )
        return spans

    async def logs(
        self, run_id: str, traceparent: str | None = None
    ) -> Sequence[records.LogRecord]:
        return [
            records.LogRecord(
                body=f"{e.principal} → {e.upstream}: {e.method} {e.path} {_answer(e)}",
                time_ms=e.ended_at.timestamp() * 1000,
                severity="ERROR" if _failed(e) else "INFO",
                attributes={"principal": e.principal, "upstream": e.upstream},
            )
            for e in await self._exchanges(run_id)
        ]


def _failed(e: ledger.Exchange) -> bool:
    return e.status is None or e.status >= 400


def _answer(e: ledger.Exchange) -> str:
    if e.status is not None:
        return str(e.status)
    return f"no answer ({e.error})" if e.error else "no answer"


def _kind(e: ledger.Exchange) -> str:
    if e.upstream == "judge":
        return "judge"
    if e.principal == "controller":
        return records.INVOKE_AGENT
    if e.usage is not None:
        return records.CHAT
    if any(e.path.split("?", 1)[0].endswith(p) for p in MODEL_PATHS):
        return records.CHAT
    return records.EXECUTE_TOOL


def _tool(e: ledger.Exchange) -> str:
    if e.upstream.startswith("peer:"):
        return e.upstream[len("peer:") :]
    return e.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or e.path


def _name(e: ledger.Exchange, kind: str) -> str:
    if kind == records.EXECUTE_TOOL:
        return f"{kind} {_tool(e)}"
    if kind == records.CHAT and e.usage is not None and e.usage.model:
        return f"{kind} {e.usage.model}"
    return kind


def _attributes(e: ledger.Exchange, kind: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        records.OPERATION: kind,
        "http.request.method": e.method,
        "url.path": e.path,
        "agent_health.principal": e.principal,
    }
    if e.status is not None:
        attrs["http.response.status_code"] = e.status
    else:
        attrs["error.type"] = e.error or "no answer"
    if kind == records.EXECUTE_TOOL:
        attrs[records.TOOL_NAME] = _tool(e)
    if kind in (records.CHAT, records.INVOKE_AGENT) and e.usage is not None:
        attrs[records.INPUT_TOKENS] = e.usage.input_tokens
        attrs[records.OUTPUT_TOKENS] = e.usage.output_tokens
        if e.usage.model:
            attrs[records.REQUEST_MODEL] = e.usage.model
    return attrs


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]
