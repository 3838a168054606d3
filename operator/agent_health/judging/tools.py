"""The ``trace_query`` tool pack: run-scoped, read-only tools an agentic judge may call.

``get_spans``, ``get_logs``, ``query`` and ``metrics`` read one run's telemetry through a
:class:`TraceSource`. The pack is bound to a single ``run_id`` when it is made: the model
cannot name another run (an argument ``run_id`` that differs is refused) and every record a
source returns is filtered to this run again, so a prompt injection in the agent's output
cannot read another run's data even through a source that over-returns. Nothing writes.

Where the records come from (:func:`source_for`): when the run's traces come from
OpenSearch (``traces={"opensearch": {...}}``), :class:`ViewSource` reads the OTel spans and
log records there, through the run's own traces view (which drops another run's records
before the pack filters again); otherwise :class:`RunResultSource` derives spans, logs and
metrics from the RunResult, one span per trajectory step. Any other source plugs in by
implementing :class:`TraceSource`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agent_health import sdk
from agent_health.judging.chat import ToolSpec
from agent_health.sdk.results import RunResult
from agent_health.traces import errors as traces_errors
from agent_health.traces import metrics as metrics_mod

PACK_NAME = "trace_query"
MAX_LIMIT = 200
MAX_RESULT_CHARS = 12_000


class TraceSource(Protocol):
    """Where the trace tools read a run's spans, logs and metrics (read-only)."""

    async def spans(self, run_id: str) -> Sequence[Mapping[str, Any]]: ...

    async def logs(self, run_id: str) -> Sequence[Mapping[str, Any]]: ...

    async def metrics(self, run_id: str) -> Mapping[str, Any]: ...


SourceFactory = Callable[[RunResult], TraceSource]


def source_for(result: RunResult) -> TraceSource:
    """The tools' source for ``result``: its OTel spans (OpenSearch's, or those the agent
    exported to agent-health's receiver) when that is where its traces come from, else its
    own trajectory (the default :data:`SourceFactory`).

    The traces view is the one the test body sees (``result.traces``), so the judge and the
    body read the same spans; outside the test (the judge service) there is none.
    """
    try:
        view = result.traces
    except (sdk.AgentHealthError, traces_errors.TracesError):
        return RunResultSource(result)  # traces off, or not inside the test that ran it
    if getattr(view, "source", None) in ("opensearch", "otel"):
        return ViewSource(result, view)
    return RunResultSource(result)


class RunResultSource:
    """Spans, logs and metrics derived from the RunResult (one span per trajectory step)."""

    def __init__(self, result: RunResult) -> None:
        self.result = result

    async def spans(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        if run_id != self.result.run_id:
            return []
        return [
            {
                "run_id": run_id,
                "span_id": f"step-{i}",
                "name": step.tool_name or step.type,
                "kind": step.type,
                "status": step.status or "ok",
                "duration_ms": step.latency_ms,
                "attributes": step.model_dump(mode="json", exclude_none=True),
            }
            for i, step in enumerate(self.result.trajectory_steps)
        ]

    async def logs(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        if run_id != self.result.run_id:
            return []
        records = []
        for i, step in enumerate(self.result.trajectory_steps):
            message = step.content if step.content is not None else step.tool_output
            if message is None:
                continue
            records.append(
                {
                    "run_id": run_id,
                    "span_id": f"step-{i}",
                    "level": "error" if step.status == "error" else "info",
                    "source": step.tool_name or step.type,
                    "message": message if isinstance(message, str) else json.dumps(message),
                }
            )
        return records

    async def metrics(self, run_id: str) -> Mapping[str, Any]:
        return metrics_mod.derive(self.result) if run_id == self.result.run_id else {}


class ViewSource:
    """Spans, logs and metrics of one run from its traces view (OpenSearch): OTel spans with
    their GenAI attributes, the run's log records, and the derived metrics plus what the
    trace itself says (tokens, model calls, tool calls)."""

    def __init__(self, result: RunResult, view: Any) -> None:
        self.result = result
        self.view = view

    async def spans(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        if run_id != self.result.run_id:
            return []
        snapshot = await self.view.load()
        return [
            {"run_id": run_id, **span.to_dict(), "kind": span.operation} for span in snapshot.spans
        ]

    async def logs(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        if run_id != self.result.run_id:
            return []
        try:
            found = await self.view.logs()
        except traces_errors.TracesNotEnabled:
            # No logs index configured: the agent's own steps are the run's only log.
            return await RunResultSource(self.result).logs(run_id)
        return [
            {
                "run_id": run_id,
                "span_id": record.span_id,
                "trace_id": record.trace_id,
                "time_ms": record.time_ms,
                "level": (record.severity or "info").lower(),
                "message": record.body,
                "attributes": dict(record.attributes),
            }
            for record in found
        ]

    async def metrics(self, run_id: str) -> Mapping[str, Any]:
        if run_id != self.result.run_id:
            return {}
        derived = dict(await self.view.metrics())
        snapshot = await self.view.load()
        trace: dict[str, Any] = {"source": snapshot.source, "spans": len(snapshot.spans)}
        for name in ("llm_calls", "tool_calls", "tool_histogram", "total_tokens", "error_spans"):
            try:
                value = getattr(snapshot, name)
            except traces_errors.TracesError as err:
                value = {"unknown": str(err)}  # the trace lacks it: say so, never a zero
            trace[name] = len(value) if name == "error_spans" else value
        return {**derived, "trace": trace}


class ShippedSource:
    """Telemetry read where the test ran and shipped with the judge call (:func:`ship`): the
    judge service answers a cell's trace tools from it, as the cell would from OpenSearch. A
    part that could not be read raises what reading it raised there."""

    def __init__(self, trace: Mapping[str, Any]) -> None:
        self.trace = trace

    def _part(self, name: str) -> Any:
        part = self.trace.get(name)
        if isinstance(part, Mapping) and "error" in part:
            raise traces_errors.TracesError(str(part["error"]))
        return part

    async def spans(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        return [s for s in self._part("spans") or () if s.get("run_id") == run_id]

    async def logs(self, run_id: str) -> Sequence[Mapping[str, Any]]:
        return [r for r in self._part("logs") or () if r.get("run_id") == run_id]

    async def metrics(self, run_id: str) -> Mapping[str, Any]:
        found = self._part("metrics") or {}
        return dict(found) if self.trace.get("run_id") == run_id else {}


async def ship(result: RunResult) -> dict[str, Any] | None:
    """The run's OpenSearch telemetry as JSON data for a judge that answers elsewhere (the
    judge service, from a cell); ``None`` when the tools would read the trajectory, which
    the judge has anyway. A part that cannot be read is shipped as its error."""
    source = source_for(result)
    if not isinstance(source, ViewSource):
        return None
    run_id = result.run_id
    shipped: dict[str, Any] = {"run_id": run_id, "source": "opensearch"}
    for name, read in (("spans", source.spans), ("logs", source.logs), ("metrics", source.metrics)):
        try:
            shipped[name] = json.loads(json.dumps(await read(run_id), default=str))
        except traces_errors.TracesError as err:
            shipped[name] = {"error": str(err)}
    return shipped


def _schema(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


_LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
SPECS = (
    ToolSpec(
        "get_spans",
        "Spans of this run (OTel spans when the run is traced, else one per agent step: tool "
        "calls, results, answers), optionally only those whose name, kind (the operation: "
        "invoke_agent, chat, execute_tool, ...) or status match.",
        _schema(
            {
                "name": {"type": "string"},
                "kind": {"type": "string"},
                "status": {"type": "string"},
                "limit": _LIMIT,
            }
        ),
    ),
    ToolSpec(
        "get_logs",
        "Log records of this run, optionally by level or containing a text.",
        _schema({"level": {"type": "string"}, "contains": {"type": "string"}, "limit": _LIMIT}),
    ),
    ToolSpec(
        "query",
        "Search this run's spans and logs for a text, and/or records whose fields equal "
        "the given values (where: {field: value}).",
        _schema({"text": {"type": "string"}, "where": {"type": "object"}, "limit": _LIMIT}),
    ),
    ToolSpec("metrics", "Derived metrics of this run: tokens, latency, tool calls.", _schema({})),
)


class TracePack:
    """The tools of one run. Custom evaluators get one as ``tools``; the agentic judge too."""

    specs: tuple[ToolSpec, ...] = SPECS

    def __init__(self, source: TraceSource, run_id: str) -> None:
        self.source = source
        self.run_id = run_id

    async def get_spans(
        self,
        name: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[Mapping[str, Any]]:
        """This run's spans, filtered by exact name / kind / status."""
        wanted = {"name": name, "kind": kind, "status": status}
        spans = self._own(await self.source.spans(self.run_id))
        return _cap(
            [s for s in spans if all(v is None or s.get(k) == v for k, v in wanted.items())], limit
        )

    async def get_logs(
        self, level: str | None = None, contains: str | None = None, limit: int = 50
    ) -> list[Mapping[str, Any]]:
        """This run's log records, by level and/or containing a text (case-insensitive)."""
        logs = self._own(await self.source.logs(self.run_id))
        found = [
            r
            for r in logs
            if (level is None or r.get("level") == level)
            and (contains is None or contains.lower() in str(r.get("message", "")).lower())
        ]
        return _cap(found, limit)

    async def query(
        self, text: str | None = None, where: Mapping[str, Any] | None = None, limit: int = 50
    ) -> list[Mapping[str, Any]]:
        """Spans and logs of this run containing ``text`` and/or with fields equal to ``where``."""
        records = [
            *({"record": "span", **s} for s in self._own(await self.source.spans(self.run_id))),
            *({"record": "log", **r} for r in self._own(await self.source.logs(self.run_id))),
        ]
        found = [
            r
            for r in records
            if (text is None or text.lower() in json.dumps(r, default=str).lower())
            and all(_field(r, k) == v for k, v in (where or {}).items())
        ]
        return _cap(found, limit)

    async def metrics(self) -> Mapping[str, Any]:
        """Derived metrics of this run."""
        return await self.source.metrics(self.run_id)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call of the model; every problem is answered as text, never raised."""
        args = dict(arguments)
        other = args.pop("run_id", self.run_id)
        if other != self.run_id:
            return _json({"error": f"refused: this judge may read only run {self.run_id}"})
        spec = next((s for s in self.specs if s.name == name), None)
        if spec is None:
            known = ", ".join(s.name for s in self.specs)
            return _json({"error": f"unknown tool {name!r}; tools: {known}"})
        allowed = set(spec.parameters["properties"])
        extra = sorted(set(args) - allowed)
        if extra:
            return _json({"error": f"{name} takes only {sorted(allowed)}; got {extra}"})
        try:
            value: Any = await getattr(self, name)(**args)
        except (TypeError, ValueError, AttributeError) as err:
            return _json({"error": f"{name}: bad arguments: {err}"})
        except traces_errors.TracesError as err:  # e.g. no spans landed: the model is told
            return _json({"error": f"{name}: {err}"})
        return _json(value)

    def _own(self, records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [r for r in records if r.get("run_id") == self.run_id]


def _field(record: Mapping[str, Any], key: str) -> Any:
    if key in record:
        return record[key]
    attributes = record.get("attributes")
    return attributes.get(key) if isinstance(attributes, Mapping) else None


def _cap(records: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    return list(records[: max(1, min(int(limit), MAX_LIMIT))])


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        return text[:MAX_RESULT_CHARS] + f"... [truncated; {len(text)} chars, use filters]"
    return text
