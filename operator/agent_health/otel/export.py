"""A run's OTLP export as the engine sees it: told about each test as it ends, and about the
run when it ends (``engine.running.runner.TestSpans``).

The event loop only hands each ended test over (a bounded queue, never waited on); one
worker thread, started by the first test that ends, loads the sender (:mod:`.exporter`),
turns each test into spans (:mod:`.spans`), encodes them into the pending request and sends
it when it fills or half a second after its first span. So neither loading the sender nor
building, encoding and sending spans holds up a test: all use the time the loop spends
waiting on agents. Loading this module loads no HTTP client and no protobuf.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agent_health.otel import records, spans
from agent_health.sdk import context, otlpconfig
from agent_health.sdk.results import TestResult

if TYPE_CHECKING:
    from agent_health.otel import exporter as exporter_mod

log = logging.getLogger("agent_health.otel")
MISSING_EXTRA = (
    "OTLP export over http/protobuf needs the otel extra: pip install 'agent-health[otel]' "
    "(or export OTLP/JSON, which needs none: OTEL_EXPORTER_OTLP_PROTOCOL=http/json)"
)
# What each protocol's encoder imports beyond the base install: http/json needs nothing.
_MODULES: dict[str, tuple[str, ...]] = {
    "http/protobuf": ("google.protobuf", "opentelemetry.proto.collector.trace.v1"),
    "http/json": (),
}
_Job = Callable[[], list[records.SpanRecord]]
_WAKE = 0.5  # seconds between the worker's turns: spans reach the collector within about this


class ExportUnavailable(RuntimeError):
    """Export over http/protobuf was asked for but opentelemetry-proto is not installed."""


def available(protocol: str = "http/protobuf") -> bool:
    """Whether ``protocol`` can be exported here (nothing of it is imported to tell)."""
    for name in _MODULES.get(protocol, ()):
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


class Export:
    """One run's export: the run's own span ids, the hand-over queue and its worker."""

    def __init__(
        self,
        settings: otlpconfig.Settings,
        *,
        agent: str | None = None,
        judge_provider: str | None = None,
        version: str = "",
        evaluation_run: str | None = None,
    ) -> None:
        self.settings = settings
        self.version = version
        self.run = spans.RunContext(
            trace_id=records.new_trace_id(),
            span_id=records.new_span_id(),
            agent=agent,
            judge_provider=judge_provider,
            capture_content=settings.capture_content,
            linked=evaluation_run is None,
            evaluation_run=evaluation_run,
        )
        self.started = time.time()
        self.refused = 0  # tests handed over while the queue was full: never exported
        self.unbuilt = 0  # tests whose spans could not be built or encoded (a bug: logged)
        self._tests: list[tuple[int, int]] = []  # (trace id, span id) of each test span
        self._jobs: queue.Queue[_Job] = queue.Queue(maxsize=settings.max_queue)
        self._stop = threading.Event()
        self._exporter: exporter_mod.RunExporter | None = None
        self._warning: str | None = None
        self._closed = False
        # Started by the first test that ends: the sender then loads while the loop waits on
        # agents, not while the suite loads (both want the interpreter's one lock).
        self._worker = threading.Thread(target=self._work, name="agent-health-otlp", daemon=True)

    @classmethod
    def open(
        cls,
        settings: otlpconfig.Settings,
        *,
        agent: str | None = None,
        judge_provider: str | None = None,
        version: str = "",
        evaluation_run: str | None = None,
    ) -> Export:
        """Start the export; :class:`ExportUnavailable` when its protocol's extra is missing.

        ``evaluation_run``: a cell's, which exports its one test and no run span (the run's
        cells share only their EvaluationRun's name)."""
        if not available(settings.protocol):
            raise ExportUnavailable(MISSING_EXTRA)
        return cls(
            settings,
            agent=agent,
            judge_provider=judge_provider,
            version=version,
            evaluation_run=evaluation_run,
        )

    def test_ended(self, result: TestResult, ctx: context.TestContext | None) -> None:
        """Hand one ended (test, repeat, try) over; never blocks."""
        recorded = (
            spans.Recorded(
                traceparent=ctx.traceparent,
                agent_window=ctx.agent_window,
                agent_error=ctx.agent_error,
                # Its own timeout (what it had sent is kept) or the test's deadline on it.
                agent_timed_out=ctx.partial is not None or "agent" in ctx.cut_short,
                judge_calls=tuple(spans.JudgeCall(s, a, b) for s, a, b in ctx.judge_windows),
                retry=ctx.info.retry,
            )
            if ctx is not None
            else spans.Recorded()
        )

        def job() -> list[records.SpanRecord]:
            records = spans.test_spans(result, recorded, self.run)
            self._tests.append((records[0].trace_id, records[0].span_id))
            return records

        self._hand_over(job)

    def run_ended(
        self, results: Sequence[TestResult], pass_rate: float | None, score: float | None
    ) -> None:
        """The run's span, from its start to now, linked to its tests."""
        ended = time.time()
        counts: dict[str, int] = {}
        for result in results:
            counts[result.status] = counts.get(result.status, 0) + 1

        def job() -> list[records.SpanRecord]:
            # Runs after every test's job (one worker, in order): all their ids are known.
            run = spans.run_span(
                self.run, self.started, ended, counts, pass_rate, score, self._tests
            )
            return [run]

        self._hand_over(job)

    def _hand_over(self, job: _Job) -> None:
        if self._closed:
            return
        if not self._worker.is_alive() and self._worker.ident is None:
            self._worker.start()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            self.refused += 1

    def _work(self) -> None:
        try:
            from agent_health.otel import exporter as exporter_mod

            self._exporter = exporter_mod.RunExporter(self.settings, version=self.version)
        except Exception as err:  # a broken install: the run goes on, unexported
            tests = 0
            while not self._stop.wait(_WAKE):
                tests += self._drain()
            self._warning = f"could not start ({err}): {tests + self._drain()} tests not exported"
            return
        exporter = self._exporter
        closing = False
        while not closing:
            # Woken twice a second, not by each test: handing a test over wakes no thread, so
            # the loop and this thread take turns with the interpreter's lock a few times a
            # run, not hundreds. What ended since is sent now: within about half a second.
            closing = self._stop.wait(_WAKE)
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                try:
                    exporter.submit(job())
                except Exception:  # one test that cannot be exported must not stop the others
                    log.debug("a test's spans could not be built", exc_info=True)
                    self.unbuilt += 1
            exporter.flush()
        self._warning = exporter.close()

    def _drain(self) -> int:
        count = 0
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                return count
            count += 1

    def close(self) -> str | None:
        """Send what is left and stop (blocking, bounded by the export timeout); the one
        warning to show when spans were dropped, else ``None``."""
        if not self._closed:
            self._closed = True
            if self._worker.ident is None:
                return None  # no test ended: nothing to send
            self._stop.set()
        self._worker.join(self.settings.timeout + 5.0)
        if self._worker.is_alive():
            return (
                f"OTLP export to {self.settings.endpoint} did not finish within "
                f"{self.settings.timeout + 5.0:g} s; the spans still queued are dropped"
            )
        parts = [self._warning] if self._warning else []
        if self.refused:
            parts.append(f"{self.refused} tests not exported (the export queue was full)")
        if self.unbuilt:
            parts.append(f"{self.unbuilt} tests whose spans could not be built (a bug)")
        if not parts:
            return None
        return (
            f"OTLP export to {self.settings.endpoint}: {'; '.join(parts)}; the run's results "
            "are unaffected"
        )

    async def aclose(self) -> str | None:
        """:meth:`close`, off the event loop."""
        return await asyncio.to_thread(self.close)
