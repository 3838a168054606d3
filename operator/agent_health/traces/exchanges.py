"""A trace source over the exchanges the gateway recorded for this run.

The gateway (docs/ledger.md) records every call that crosses it: who called
(``principal``: ``controller``, ``target`` or ``peer:NAME``), whom (``upstream``), the
method, path, status, start and end time, and the token usage it read from model answers.
This module needs only those fields, so it states them as the :class:`Exchange` Protocol
rather than importing the ledger's record model; any object with these attributes (a
ledger record, a dataclass) fits, and :func:`from_mapping` adapts a plain dict.

Exchanges become spans: the controller's call of the agent is ``invoke_agent``, a call that
carried token usage (or reached a model API path) is ``chat``, any other call the agent made
is ``execute_tool`` (named after the peer, else the last path segment), and calls to the
judge are ``judge`` spans that never count towards the agent's tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent_health.traces import errors, records

MODEL_PATHS = ("/chat/completions", "/v1/messages", "/responses", "/completions", ":generate")


class Exchange(Protocol):
    """The fields of one recorded exchange that traces need. Times are epoch seconds."""

    @property
    def run_id(self) -> str: ...
    @property
    def principal(self) -> str: ...
    @property
    def upstream(self) -> str | None: ...
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def ended_at(self) -> float: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def model(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """A plain :class:`Exchange` (what :func:`from_mapping` builds)."""

    run_id: str
    principal: str
    method: str
    path: str
    status: int
    started_at: float
    ended_at: float
    upstream: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None


def from_mapping(data: Mapping[str, Any]) -> ExchangeRecord:
    """An exchange from a dict (a JSONL line); a clear error naming the missing field."""
    try:
        usage = data.get("token_usage") or {}
        return ExchangeRecord(
            run_id=str(data["run_id"]),
            principal=str(data["principal"]),
            method=str(data["method"]),
            path=str(data["path"]),
            status=int(data["status"]),
            started_at=float(data["started_at"]),
            ended_at=float(data["ended_at"]),
            upstream=data.get("upstream"),
            input_tokens=data.get("input_tokens", usage.get("input")),
            output_tokens=data.get("output_tokens", usage.get("output")),
            model=data.get("model"),
        )
    except KeyError as err:
        raise errors.TracesBackendError(f"exchange record has no field {err.args[0]!r}") from err
    except (TypeError, ValueError) as err:
        raise errors.TracesBackendError(f"exchange record is malformed: {err}") from err


ExchangeReader = Callable[[str], Awaitable[Sequence[Exchange]]]
"""Reads the exchanges recorded for one run id (the ledger provides one)."""


class ExchangeSource:
    """Spans and logs of a run from the gateway's recorded exchanges."""

    name = "gateway"

    def __init__(self, read: ExchangeReader, *, where: str = "the ledger") -> None:
        self._read = read
        self._where = where

    async def _exchanges(self, run_id: str) -> list[Exchange]:
        found = [e for e in await self._read(run_id) if e.run_id == run_id]
        if not found:
            raise errors.TracesNotFound(
                f"no gateway exchanges for run {run_id} in {self._where}; was the agent "
                "reached through the gateway?"
            )
        return sorted(found, key=lambda e: e.started_at)

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[records.Span]:
        found = await self._exchanges(run_id)
        trace_id = records.trace_id_of(traceparent) or _hex(run_id, 32)
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
                    parent_span_id=records.span_id_of(traceparent) if is_root else root_id,
                    start_ms=e.started_at * 1000,
                    end_ms=e.ended_at * 1000,
                    status="error" if e.status >= 400 else "ok",
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
                body=f"{e.principal} → {e.upstream or '?'}: {e.method} {e.path} {e.status}",
                time_ms=e.ended_at * 1000,
                severity="ERROR" if e.status >= 400 else "INFO",
                attributes={"principal": e.principal, "upstream": e.upstream},
            )
            for e in await self._exchanges(run_id)
        ]


def _kind(e: Exchange) -> str:
    if e.upstream == "judge":
        return "judge"
    if e.principal == "controller":
        return records.INVOKE_AGENT
    if e.input_tokens is not None or e.output_tokens is not None:
        return records.CHAT
    if any(e.path.split("?", 1)[0].endswith(p) for p in MODEL_PATHS):
        return records.CHAT
    return records.EXECUTE_TOOL


def _tool(e: Exchange) -> str:
    if e.upstream and e.upstream.startswith("peer:"):
        return e.upstream[len("peer:") :]
    return e.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or e.path


def _name(e: Exchange, kind: str) -> str:
    if kind == records.EXECUTE_TOOL:
        return f"{kind} {_tool(e)}"
    if kind == records.CHAT and e.model:
        return f"{kind} {e.model}"
    return kind


def _attributes(e: Exchange, kind: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        records.OPERATION: kind,
        "http.request.method": e.method,
        "url.path": e.path,
        "http.response.status_code": e.status,
        "agent_health.principal": e.principal,
    }
    if kind == records.EXECUTE_TOOL:
        attrs[records.TOOL_NAME] = _tool(e)
    if kind in (records.CHAT, records.INVOKE_AGENT):
        if e.input_tokens is not None:
            attrs[records.INPUT_TOKENS] = e.input_tokens
        if e.output_tokens is not None:
            attrs[records.OUTPUT_TOKENS] = e.output_tokens
        if e.model:
            attrs[records.REQUEST_MODEL] = e.model
    return attrs


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]
