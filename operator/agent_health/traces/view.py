"""``result.traces``: this run's trace, read lazily from its sources.

Reading is asynchronous (a source may wait for spans to land), so every question is a
coroutine::

    spans = await result.traces.spans()               # list[Span], GenAI semantic conventions
    tokens = await result.traces.total_tokens()       # from the spans, never a silent zero
    expect(await result.traces.llm_calls()).to_be_less_than(5)

or load once and read plain properties::

    trace = await result.traces.load()                # a TraceSnapshot
    trace.total_tokens, trace.tool_histogram, trace.llm_calls

Sources, most detailed first: the spans the agent exported to agent-health's own OTLP
receiver (``otel``, when spans of the run arrived by the time the test reads its traces),
OpenSearch (when ``traces.opensearch`` is configured), the gateway's recorded exchanges (when
the run went through the gateway), and the agent's own trajectory (always). Questions go to
the first one unless ``source="..."`` names another.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import (
    errors,
    exchanges,
    metrics,
    opensearch,
    received,
    records,
    trajectory,
)


@dataclass(frozen=True)
class TraceSnapshot:
    """The spans one source returned for a run, and the numbers read from them."""

    run_id: str
    source: str
    spans: tuple[records.Span, ...]
    prices: tracesconfig.PriceTable = field(default_factory=tracesconfig.PriceTable)
    steps_known: bool = True
    """False when the source has no record of the agent's steps (it reported none)."""
    foreign: int = 0
    """Spans the source returned that belong to another run (dropped, never counted)."""

    @property
    def llm_calls(self) -> int:
        self._need_steps("llm_calls")
        return sum(1 for s in self.spans if s.is_llm_call)

    @property
    def tool_calls(self) -> int:
        self._need_steps("tool_calls")
        return sum(1 for s in self.spans if s.is_tool_call)

    @property
    def tool_histogram(self) -> dict[str, int]:
        self._need_steps("tool_histogram")
        return dict(Counter(s.tool_name or "?" for s in self.spans if s.is_tool_call))

    def _need_steps(self, what: str) -> None:
        if not self.steps_known:
            raise errors.TracesNotFound(
                f"{what} of run {self.run_id} is unknown: the agent reported no trajectory "
                f"and {self.source} has no other record of its steps"
            )

    @property
    def error_spans(self) -> list[records.Span]:
        return [s for s in self.spans if s.status == "error"]

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens or 0 for s in self._usage_spans())

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens or 0 for s in self._usage_spans())

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_usd(self) -> float:
        """Priced per model from the price table; an error when a model has no price."""
        total = 0.0
        for s in self._usage_spans():
            cost = self.prices.cost(s.model, s.input_tokens or 0, s.output_tokens or 0)
            if cost is None:
                raise errors.TracesError(
                    f"no price for model {s.model or '(unnamed)'} of run {self.run_id}; add it "
                    "(or 'default') to define_config(prices={...})"
                )
            total += cost
        return round(total, 8)

    @property
    def duration_ms(self) -> float | None:
        roots = self._roots(self.spans)
        return roots[0].duration_ms if roots else None

    def _usage_spans(self) -> list[records.Span]:
        """LLM-call spans with usage; else the top agent spans (never both: no double count)."""
        calls = [s for s in self.spans if s.is_llm_call and s.has_usage]
        if calls:
            return calls
        agents = [s for s in self._roots(self.spans) if s.has_usage]
        if agents:
            return agents
        raise errors.TracesNotFound(
            f"no token usage in the {len(self.spans)} spans of run {self.run_id} from "
            f"{self.source} (no {records.INPUT_TOKENS}/{records.OUTPUT_TOKENS} on chat or "
            "invoke_agent spans)"
        )

    @staticmethod
    def _roots(spans: Sequence[records.Span]) -> list[records.Span]:
        ids = {s.span_id for s in spans}
        return [
            s
            for s in spans
            if s.operation == records.INVOKE_AGENT and (s.parent_span_id not in ids)
        ]


class TracesView:
    """The trace of one run, read lazily and cached per source."""

    def __init__(
        self,
        result: RunResult,
        sources: Sequence[records.TraceSource],
        prices: tracesconfig.PriceTable | None = None,
        *,
        preferred: received.ReceivedSource | None = None,
    ) -> None:
        if not sources and preferred is None:
            raise ValueError("a TracesView needs at least one source")
        self._result = result
        self._sources = {s.name: s for s in sources}
        self._order = [s.name for s in sources]
        # The agent's own OTLP spans answer by default once some arrived (asked once, on the
        # first read); until then, and when none did, the other sources do.
        self._preferred = preferred
        if preferred is not None:
            self._sources[preferred.name] = preferred
            self._order.append(preferred.name)
        self._prices = prices or tracesconfig.PriceTable()
        self._loaded: dict[str, TraceSnapshot] = {}
        self._lock = asyncio.Lock()

    @property
    def run_id(self) -> str:
        return self._result.run_id

    @property
    def source(self) -> str:
        """The source questions go to by default (the most detailed one configured)."""
        return self._order[0]

    @property
    def sources(self) -> list[str]:
        return list(self._order)

    @property
    def loaded(self) -> TraceSnapshot | None:
        """The default source's snapshot if it was already loaded (no waiting)."""
        return self._loaded.get(self.source)

    def _pick(self, source: str | None) -> records.TraceSource:
        name = source or self.source
        if name not in self._sources:
            raise errors.TracesNotEnabled(
                f"trace source {name!r} is not configured for run {self.run_id}; "
                f"available: {', '.join(self._order)}"
            )
        return self._sources[name]

    async def _decide(self) -> None:
        preferred, self._preferred = self._preferred, None
        if preferred is not None and await preferred.present(self.run_id):
            self._order.remove(preferred.name)
            self._order.insert(0, preferred.name)

    async def load(self, source: str | None = None) -> TraceSnapshot:
        """Read (once) and return this run's spans from ``source`` (default: :attr:`source`)."""
        if source is None and self._preferred is not None:
            async with self._lock:
                await self._decide()
        chosen = self._pick(source)
        async with self._lock:
            if chosen.name not in self._loaded:
                returned = await chosen.spans(self.run_id, self._result.traceparent)
                spans = [s for s in returned if self._own(chosen, s.trace_id, s.attributes)]
                self._loaded[chosen.name] = TraceSnapshot(
                    run_id=self.run_id,
                    source=chosen.name,
                    spans=tuple(spans),
                    prices=self._prices,
                    steps_known=getattr(chosen, "steps_known", True),
                    foreign=len(returned) - len(spans),
                )
            return self._loaded[chosen.name]

    def _own(self, source: records.TraceSource, trace_id: str | None, attributes: Any) -> bool:
        """Whether a record a source returned is this run's. A local source (the trajectory,
        the gateway's exchanges) is made from this run alone; a ``remote`` one (a queried
        backend such as OpenSearch) is not trusted: another run's records are dropped."""
        if not getattr(source, "remote", False):
            return True
        return records.belongs(
            trace_id,
            attributes,
            run_id=self.run_id,
            traceparent=self._result.traceparent,
            run_id_attribute=getattr(source, "run_id_attribute", records.RUN_ID_ATTRIBUTE),
        )

    async def spans(self, source: str | None = None) -> list[records.Span]:
        return list((await self.load(source)).spans)

    async def logs(self, source: str | None = None) -> list[records.LogRecord]:
        # The receiver takes spans only: logs come from the first source that has them.
        chosen = self._pick(source or next(n for n in self._order if n != received.NAME))
        returned = await chosen.logs(self.run_id, self._result.traceparent)
        return [r for r in returned if self._own(chosen, r.trace_id, r.attributes)]

    async def total_tokens(self, source: str | None = None) -> int:
        return (await self.load(source)).total_tokens

    async def input_tokens(self, source: str | None = None) -> int:
        return (await self.load(source)).input_tokens

    async def output_tokens(self, source: str | None = None) -> int:
        return (await self.load(source)).output_tokens

    async def cost_usd(self, source: str | None = None) -> float:
        return (await self.load(source)).cost_usd

    async def llm_calls(self, source: str | None = None) -> int:
        return (await self.load(source)).llm_calls

    async def tool_calls(self, source: str | None = None) -> int:
        return (await self.load(source)).tool_calls

    async def tool_histogram(self, source: str | None = None) -> dict[str, int]:
        return (await self.load(source)).tool_histogram

    async def error_spans(self, source: str | None = None) -> list[records.Span]:
        return (await self.load(source)).error_spans

    async def metrics(self) -> dict[str, Any]:
        """The derived metrics of this run (the ``metrics`` of its report entry)."""
        return metrics.derive(self._result, self._prices)

    async def aclose(self) -> None:
        """Release source connections (the engine calls this when the test ends)."""
        for source in self._sources.values():
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()


def build(
    result: RunResult,
    config: tracesconfig.TracesSettings,
    *,
    agent: str | None,
    prices: tracesconfig.PriceTable | None = None,
    read_exchanges: exchanges.ExchangeReader | None = None,
    read_received: received.SpansReader | None = None,
) -> TracesView:
    """The view the engine attaches to a run; raises when traces are off for ``agent``."""
    if not config.enabled_for(agent):
        raise errors.TracesNotEnabled(
            f"traces not enabled for agent {agent or '(unnamed)'}; set traces.enabled in "
            "agent-health.config.py (True, or a list of agent names)"
        )
    sources: list[records.TraceSource] = []
    if config.opensearch is not None:
        sources.append(opensearch.OpenSearchSource(config.opensearch))
    if read_exchanges is not None:
        sources.append(exchanges.ExchangeSource(read_exchanges))
    sources.append(trajectory.TrajectorySource(result))
    preferred = None
    if read_received is not None:
        preferred = received.ReceivedSource(read_received, wait_seconds=config.otlp.wait_seconds)
    return TracesView(
        result, sources, prices or tracesconfig.PriceTable(config.prices), preferred=preferred
    )
