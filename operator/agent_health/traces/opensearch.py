"""A trace source over OpenSearch: OTel spans as Data Prepper indexes them.

Data Prepper writes one document per span into ``otel-v1-apm-span-*`` with ``traceId``,
``spanId``, ``parentSpanId``, ``name``, ``startTime``/``endTime`` (ISO 8601, nanoseconds),
``status.code`` (0 unset, 1 ok, 2 error), ``serviceName`` and every span attribute flattened
as ``span.attributes.<key>`` with dots written as ``@`` (``gen_ai.usage.input_tokens`` is
``span.attributes.gen_ai@usage@input_tokens``). A run's spans are found by the trace id of
the ``traceparent`` agent-health sent, or by the run id attribute the agent set.

Spans land seconds after the agent answered, so reading waits: it polls every
``poll_seconds`` until the ``invoke_agent`` span has landed or the span count stops changing,
for at most ``wait_seconds``, then raises "no spans for run X in index Y after N s".
The client is opensearch-py's ``AsyncOpenSearch`` (the ``[opensearch]`` extra), created on
first use and closed by :meth:`OpenSearchSource.aclose`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from agent_health.sdk import tracesconfig
from agent_health.traces import errors, records
from agent_health.traces import traceparent as traceparent_mod

if TYPE_CHECKING:
    from opensearchpy import AsyncOpenSearch

T = TypeVar("T")
SPAN_PREFIXES = ("span.attributes.", "attributes.")
LOG_PREFIXES = ("log.attributes.", "attributes.")
STATUS = {0: "unset", 1: "ok", 2: "error"}


def attribute_field(prefix: str, key: str) -> str:
    """The document field Data Prepper stores attribute ``key`` under."""
    return prefix + key.replace(".", "@")


def span_query(
    run_id: str, traceparent: str | None, cfg: tracesconfig.OpenSearchSettings
) -> dict[str, Any]:
    """The ``_search`` body that finds this run's spans (trace id or run id attribute)."""
    should: list[dict[str, Any]] = [
        {"term": {attribute_field(prefix, cfg.run_id_attribute): run_id}}
        for prefix in SPAN_PREFIXES
    ]
    trace_id = traceparent_mod.trace_id_of(traceparent)
    if trace_id is not None:
        should.insert(0, {"term": {"traceId": trace_id}})
    return {
        "size": cfg.max_spans,
        "query": {"bool": {"should": should, "minimum_should_match": 1}},
    }


def log_query(
    run_id: str, traceparent: str | None, cfg: tracesconfig.OpenSearchSettings
) -> dict[str, Any]:
    """The ``_search`` body that finds this run's log records."""
    should: list[dict[str, Any]] = [
        {"term": {attribute_field(prefix, cfg.run_id_attribute): run_id}} for prefix in LOG_PREFIXES
    ]
    trace_id = traceparent_mod.trace_id_of(traceparent)
    if trace_id is not None:
        should.insert(0, {"term": {"traceId": trace_id}})
    return {
        "size": cfg.max_spans,
        "query": {"bool": {"should": should, "minimum_should_match": 1}},
    }


def parse_span(source: Mapping[str, Any]) -> records.Span:
    """One Data Prepper span document as a :class:`~records.Span`."""
    attributes = _attributes(source, SPAN_PREFIXES)
    status = source.get("status.code", _nested(source, "status", "code"))
    try:
        code = int(status) if status is not None else 0
    except (TypeError, ValueError):
        code = 0
    parent = source.get("parentSpanId") or None
    return records.Span(
        trace_id=str(source.get("traceId", "")),
        span_id=str(source.get("spanId", "")),
        name=str(source.get("name", "")),
        parent_span_id=str(parent) if parent else None,
        start_ms=parse_time(source.get("startTime")),
        end_ms=parse_time(source.get("endTime")),
        status=STATUS.get(code, "unset"),  # type: ignore[arg-type]
        attributes=attributes,
        service=source.get("serviceName") or attributes.get("service.name"),
        elapsed_ms=_nanos_to_ms(source.get("durationInNanos")),
    )


def parse_log(source: Mapping[str, Any]) -> records.LogRecord:
    """One Data Prepper log document as a :class:`~records.LogRecord`."""
    body = source.get("body", source.get("message", ""))
    return records.LogRecord(
        body=body if isinstance(body, str) else str(body),
        time_ms=parse_time(source.get("time") or source.get("observedTime")),
        severity=source.get("severityText"),
        trace_id=source.get("traceId") or None,
        span_id=source.get("spanId") or None,
        attributes=_attributes(source, LOG_PREFIXES),
    )


def parse_time(value: Any) -> float | None:
    """ISO 8601 (nanosecond precision allowed) or epoch millis → epoch milliseconds."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # Python parses at most microseconds: trim nanoseconds, keep the offset
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:digits][:6]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(text).timestamp() * 1000
    except ValueError:
        return None


def _nanos_to_ms(value: Any) -> float | None:
    try:
        return int(value) / 1e6 if value is not None else None
    except (TypeError, ValueError):
        return None


def _nested(source: Mapping[str, Any], *path: str) -> Any:
    value: Any = source
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _attributes(source: Mapping[str, Any], prefixes: Sequence[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    nested = source.get("attributes")
    if isinstance(nested, Mapping):
        found.update({str(k).replace("@", "."): v for k, v in nested.items()})
    resource = _nested(source, "resource", "attributes")
    if isinstance(resource, Mapping):
        found.update({str(k).replace("@", "."): v for k, v in resource.items()})
    for key, value in source.items():
        if key.startswith("resource.attributes."):
            found[key[len("resource.attributes.") :].replace("@", ".")] = value
            continue
        for prefix in prefixes:
            if key.startswith(prefix):
                found[key[len(prefix) :].replace("@", ".")] = value
                break
    return found


class OpenSearchSource:
    """Spans (and logs, with ``logs_index``) of one run from OpenSearch.

    ``remote``: a queried backend, which may return records of other runs; they are dropped
    here (:func:`records.belongs`) and again by the traces view, which trusts no backend.
    """

    name = "opensearch"
    remote = True

    def __init__(self, cfg: tracesconfig.OpenSearchSettings) -> None:
        self.cfg = cfg
        self._client: AsyncOpenSearch | None = None

    @property
    def run_id_attribute(self) -> str:
        return self.cfg.run_id_attribute

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[records.Span]:
        body = span_query(run_id, traceparent, self.cfg)

        def own(span: records.Span) -> bool:
            return records.belongs(
                span.trace_id,
                span.attributes,
                run_id=run_id,
                traceparent=traceparent,
                run_id_attribute=self.cfg.run_id_attribute,
            )

        spans = await self._poll(self.cfg.index, body, "spans", run_id, parse_span, own, _settled)
        spans.sort(key=lambda s: (s.start_ms is None, s.start_ms or 0.0))
        return spans

    async def logs(
        self, run_id: str, traceparent: str | None = None
    ) -> Sequence[records.LogRecord]:
        if self.cfg.logs_index is None:
            raise errors.TracesNotEnabled(
                f"logs of run {run_id}: set traces.opensearch.logs_index to read logs from "
                "OpenSearch"
            )
        body = log_query(run_id, traceparent, self.cfg)

        def own(record: records.LogRecord) -> bool:
            return records.belongs(
                record.trace_id,
                record.attributes,
                run_id=run_id,
                traceparent=traceparent,
                run_id_attribute=self.cfg.run_id_attribute,
            )

        logs = await self._poll(self.cfg.logs_index, body, "logs", run_id, parse_log, own, bool)
        logs.sort(key=lambda r: (r.time_ms is None, r.time_ms or 0.0))
        return logs

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _poll(
        self,
        index: str,
        body: dict[str, Any],
        what: str,
        run_id: str,
        parse: Callable[[Mapping[str, Any]], T],
        own: Callable[[T], bool],
        settled: Callable[[list[T]], bool],
    ) -> list[T]:
        """This run's records, parsed: searched until they settle or the wait is over.

        Records of other runs are dropped before anything else looks at them: another run's
        root span must not end the wait for this one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.wait_seconds
        previous: list[T] | None = None
        while True:
            found = [parse(doc) for doc in await self._search(index, body)]
            hits = [record for record in found if own(record)]
            if hits and (settled(hits) or (previous is not None and len(previous) == len(hits))):
                return hits
            remaining = deadline - loop.time()
            if remaining <= 0:
                if hits:  # spans still arriving at the deadline: take what landed
                    return hits
                raise errors.TracesNotFound(
                    f"no {what} for run {run_id} in index {index} after "
                    f"{self.cfg.wait_seconds:g} s (is the agent exporting OTel {what} with "
                    f"{self.cfg.run_id_attribute} or the traceparent it was sent?)"
                    + (
                        f"; {len(found)} {what} of other runs were returned and dropped"
                        if found
                        else ""
                    )
                )
            previous = hits
            await asyncio.sleep(min(self.cfg.poll_seconds, remaining))

    async def _search(self, index: str, body: dict[str, Any]) -> list[Mapping[str, Any]]:
        from opensearchpy import exceptions

        client = self._connect()
        try:
            answer = await client.search(index=index, body=body)
        except exceptions.TransportError as err:
            raise errors.TracesBackendError(_describe(err, index, self.cfg)) from err
        except exceptions.ImproperlyConfigured as err:
            raise errors.TracesBackendError(f"traces.opensearch: {err}") from err
        try:
            return [h["_source"] for h in answer["hits"]["hits"]]
        except (KeyError, TypeError) as err:
            raise errors.TracesBackendError(
                f"OpenSearch answered a search of {index} without hits.hits[]._source"
            ) from err

    def _connect(self) -> AsyncOpenSearch:
        if self._client is None:
            try:
                from opensearchpy import AsyncOpenSearch
            except ImportError as err:
                raise errors.TracesBackendError(
                    "traces.opensearch needs the opensearch extra: "
                    "pip install 'agent-health[opensearch]'"
                ) from err
            self._client = AsyncOpenSearch(
                hosts=list(self.cfg.hosts),
                http_auth=self._auth(),
                verify_certs=self.cfg.verify_certs,
                timeout=self.cfg.timeout,
                max_retries=1,
            )
        return self._client

    def _auth(self) -> tuple[str, str] | None:
        if not self.cfg.username_env:
            return None
        values = []
        for field in ("username_env", "password_env"):
            name = getattr(self.cfg, field)
            value = os.environ.get(name) if name else ""
            if value is None:
                raise errors.TracesBackendError(
                    f"environment variable {name} (traces.opensearch.{field}) is not set"
                )
            values.append(value)
        return values[0], values[1]


def _settled(spans: list[records.Span]) -> bool:
    """The agent's root span has landed: the trace is complete."""
    return any(s.operation == records.INVOKE_AGENT for s in spans)


def _describe(err: Any, index: str, cfg: tracesconfig.OpenSearchSettings) -> str:
    status = getattr(err, "status_code", None)
    hosts = ", ".join(cfg.hosts)
    if status in (401, 403):
        return (
            f"OpenSearch at {hosts} refused the search of {index} ({status}); check "
            "traces.opensearch.username_env/password_env"
        )
    if status == "N/A" or status is None:
        return f"OpenSearch at {hosts} is unreachable: {getattr(err, 'info', err)}"
    reason = getattr(err, "error", "")
    return f"OpenSearch at {hosts} failed the search of {index}: {status} {reason}"
