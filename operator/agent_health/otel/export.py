"""A run's OTLP export as the engine sees it: told about each test as it ends, and about the
run when it ends (``engine.runner.TestSpans``).

Loading this module loads no OpenTelemetry; :meth:`Export.open` does, and says what to install
when the ``otel`` extra is missing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent_health.otel import settings as settings_mod
from agent_health.otel import spans
from agent_health.sdk import context as ctx_mod
from agent_health.sdk.results import TestResult

if TYPE_CHECKING:
    from agent_health.otel import exporter as exporter_mod

MISSING_EXTRA = (
    "OTLP export needs the otel extra: pip install 'agent-health[otel]' "
    "(or drop --otlp / unset OTEL_EXPORTER_OTLP_ENDPOINT)"
)


class ExportUnavailable(RuntimeError):
    """Export was asked for but the OpenTelemetry SDK is not installed."""


class Export:
    """One run's export: the run's own span ids, and the exporter that queues the spans."""

    def __init__(
        self,
        exporter: exporter_mod.RunExporter,
        *,
        agent: str | None = None,
        judge_provider: str | None = None,
        capture_content: bool = False,
        evaluation_run: str | None = None,
    ) -> None:
        self.exporter = exporter
        self.run = spans.RunContext(
            trace_id=spans.new_trace_id(),
            span_id=spans.new_span_id(),
            agent=agent,
            judge_provider=judge_provider,
            capture_content=capture_content,
            linked=evaluation_run is None,
            evaluation_run=evaluation_run,
        )
        self.started = time.time()
        self._tests: list[tuple[int, int]] = []

    @classmethod
    def open(
        cls,
        settings: settings_mod.Settings,
        *,
        agent: str | None = None,
        judge_provider: str | None = None,
        version: str = "",
        evaluation_run: str | None = None,
    ) -> Export:
        """Start the exporter; :class:`ExportUnavailable` when the otel extra is missing.

        ``evaluation_run``: a cell's, which exports its one test and no run span (the run's
        cells share only their EvaluationRun's name)."""
        try:
            from agent_health.otel import exporter as exporter_mod
        except ImportError as err:
            raise ExportUnavailable(MISSING_EXTRA) from err
        return cls(
            exporter_mod.RunExporter(settings, version=version),
            agent=agent,
            judge_provider=judge_provider,
            capture_content=settings.capture_content,
            evaluation_run=evaluation_run,
        )

    def test_ended(self, result: TestResult, ctx: ctx_mod.TestContext | None) -> None:
        recorded = (
            spans.Recorded(
                traceparent=ctx.traceparent,
                agent_window=ctx.agent_window,
                agent_error=ctx.agent_error,
                judge_calls=tuple(spans.JudgeCall(s, a, b) for s, a, b in ctx.judge_windows),
                retry=ctx.info.retry,
            )
            if ctx is not None
            else spans.Recorded()
        )
        records = spans.test_spans(result, recorded, self.run)
        self._tests.append((records[0].trace_id, records[0].span_id))
        self.exporter.submit(records)

    def run_ended(
        self, results: Sequence[TestResult], pass_rate: float | None, score: float | None
    ) -> None:
        """The run's span, from its start to now, linked to its tests."""
        counts: dict[str, int] = {}
        for result in results:
            counts[result.status] = counts.get(result.status, 0) + 1
        span = spans.run_span(
            self.run, self.started, time.time(), counts, pass_rate, score, self._tests
        )
        self.exporter.submit([span])

    def close(self) -> str | None:
        """Flush and stop (blocking, bounded by the export timeout); the one warning to show
        when spans were dropped."""
        return self.exporter.close()

    async def aclose(self) -> str | None:
        """:meth:`close`, off the event loop."""
        return await asyncio.to_thread(self.exporter.close)
