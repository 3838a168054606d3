"""What a test becomes in OTLP: a tree of plain span records, built from what the run recorded.

One trace per test: the trace id of the ``traceparent`` its ``agent.run()`` sent (so the
agent's own spans, parented to that traceparent, land in the same trace, and the traces
sources still tell this test's spans from other tests'), or a new one for a test that never
ran the agent. The run has a trace of its own; each test span links to the run span and the
run span links back to its tests::

    test <title>                 the test: id, labels, repeat, status, cause, score, hash;
    │                            one gen_ai.evaluation.result event per signal
    ├── invoke_agent <agent>     agent.run(): its span id is the traceparent's parent id
    │   ├── execute_tool <name>  each tool call of the trajectory (with its result)
    │   └── chat [<model>]       each assistant turn of the trajectory
    └── chat <judge model>       each judge() call that asked a model

Times are what was recorded: the test's start and duration, agent.run()'s and each judge
call's wall-clock window. Steps of a trajectory carry at most a latency; those without one
are laid out in order inside the invoke_agent window and say so (``agent_health.timing``).
What is content (the agent's words, and every text that may quote them) goes on a span only
when the run captures content (:mod:`.redaction`).
Nothing here imports OpenTelemetry: :mod:`.encode` writes these records as OTLP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent_health import statuses
from agent_health.otel import conventions as cv
from agent_health.otel import records, redaction, trajectory_spans
from agent_health.sdk.results import Signal, TestResult


@dataclass(frozen=True)
class JudgeCall:
    """One ``judge()`` call that asked its backend: the signal it recorded and when."""

    signal: Signal
    started: float  # epoch seconds
    ended: float


@dataclass(frozen=True)
class Recorded:
    """What the engine kept of one test beyond its :class:`TestResult`."""

    traceparent: str | None = None
    agent_window: tuple[float, float] | None = None  # agent.run()'s call, epoch seconds
    agent_error: str | None = None
    agent_timed_out: bool = False
    judge_calls: tuple[JudgeCall, ...] = ()
    retry: int = 0


@dataclass(frozen=True)
class RunContext:
    """What every test span of a run shares."""

    trace_id: int
    span_id: int
    agent: str | None = None
    judge_provider: str | None = None
    capture_content: bool = False
    linked: bool = True
    """Whether the run's span is exported (a local run); a cell exports its test alone."""
    evaluation_run: str | None = None
    """The EvaluationRun a cell's test belongs to (``agent_health.run.name``)."""


def parse_traceparent(value: str | None) -> tuple[int, int] | None:
    """(trace id, parent id) of a W3C ``traceparent``, or ``None`` when it is not one."""
    if not value:
        return None
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None


def test_spans(result: TestResult, recorded: Recorded, run: RunContext) -> list[records.SpanRecord]:
    """The spans of one (test, repeat, try): the test span first, then its descendants."""
    ids = parse_traceparent(recorded.traceparent)
    trace_id = ids[0] if ids else records.new_trace_id()
    start = records.ns(result.started_at)
    end = max(start, start + int(result.duration_ms * 1e6))
    failed = result.status in statuses.NOT_PASSED
    test = records.SpanRecord(
        name=f"test {result.title}",
        trace_id=trace_id,
        span_id=records.new_span_id(),
        parent_id=None,
        start_ns=start,
        end_ns=end,
        attributes=_test_attributes(result, recorded, run),
        links=[records.Link(run.trace_id, run.span_id, {cv.LINK_ROLE: "run"})]
        if run.linked
        else [],
        error=_test_error(result, run.capture_content) if failed else None,
        ok=result.status in statuses.PASSING,
    )
    judged = {id(call.signal): call for call in recorded.judge_calls}
    test.events = [
        _evaluation(s, judged.get(id(s)), end, run.capture_content) for s in result.signals
    ]
    spans = [test]
    if ids is not None:
        spans.extend(_agent_spans(result, recorded, run, test, ids[1]))
    spans.extend(_judge_span(call, run, test) for call in recorded.judge_calls)
    return spans


def _test_attributes(
    result: TestResult, recorded: Recorded, run: RunContext
) -> dict[str, records.AttributeValue]:
    attributes: dict[str, records.AttributeValue] = {
        cv.TEST_ID: result.id,
        cv.TEST_NAME: result.title,
        cv.TEST_FILE: result.file,
        cv.TEST_LABELS: tuple(result.labels),
        cv.TEST_REPEAT: result.repeat,
        cv.TEST_RETRY: recorded.retry,
        cv.TEST_STATUS: result.status,
        cv.TEST_CONTENT_HASH: result.content_hash,
        cv.RUN_ID: result.run_id,
    }
    if result.cause is not None:
        attributes[cv.TEST_CAUSE] = result.cause
    if result.score is not None:
        attributes[cv.TEST_SCORE] = result.score
    if result.error:
        attributes[cv.TEST_ERROR] = records.cut(_test_error(result, run.capture_content))
    if run.evaluation_run:
        attributes[cv.RUN_NAME] = run.evaluation_run
    if result.agent or run.agent:
        attributes[cv.TEST_AGENT] = redaction.agent_name(result.agent or run.agent or "")
    return attributes


def _test_error(result: TestResult, content: bool) -> str:
    """The test's error as its span says it: the text with content, else its status."""
    status = f"{result.status} ({result.cause})" if result.cause else result.status
    return redaction.error(result.error, content, status) if result.error else "failed"


def _label(signal: Signal) -> str:
    evidence = signal.evidence or {}
    if signal.error or evidence.get("errored"):
        return "errored"
    if evidence.get("skipped"):
        return "skipped"
    if signal.passed is None:
        return "observed"
    return "passed" if signal.passed else "failed"


def _evaluation(
    signal: Signal, call: JudgeCall | None, default_ns: int, content: bool
) -> records.Event:
    """A ``gen_ai.evaluation.result`` event: name, score, label and why, of one signal (the
    why without what may quote the agent, unless ``content``)."""
    attributes: dict[str, records.AttributeValue] = {
        cv.EVALUATION_NAME: signal.name,
        cv.EVALUATION_SCORE_LABEL: _label(signal),
        cv.SIGNAL_KIND: signal.kind,
        cv.SIGNAL_ROLE: signal.role,
        cv.SIGNAL_WEIGHT: signal.weight,
    }
    if signal.score is not None:
        attributes[cv.EVALUATION_SCORE_VALUE] = float(signal.score)
    explanation = redaction.explanation(signal, content)
    if explanation:
        attributes[cv.EVALUATION_EXPLANATION] = records.cut(explanation)
    if signal.error:
        attributes[cv.ERROR_TYPE] = "judge_error" if signal.kind == "judge" else "_OTHER"
    if signal.location:
        attributes[cv.SIGNAL_LOCATION] = signal.location
    at = records.ns(call.ended) if call is not None else default_ns
    return records.Event(cv.EVALUATION_EVENT, at, attributes)


def _agent_spans(
    result: TestResult, recorded: Recorded, run: RunContext, test: records.SpanRecord, span_id: int
) -> list[records.SpanRecord]:
    """invoke_agent (the traceparent's parent id, so the agent's spans hang under it) and the
    trajectory's tool calls and assistant turns under it."""
    if recorded.agent_window is not None:
        start, end = records.ns(recorded.agent_window[0]), records.ns(recorded.agent_window[1])
    else:  # no window kept (a replay): the agent ran inside the test, as far as is known
        start, end = test.start_ns, test.end_ns
    agent = redaction.agent_name(result.agent or run.agent or "agent")
    attributes: dict[str, records.AttributeValue] = {
        cv.OPERATION_NAME: cv.INVOKE_AGENT,
        cv.AGENT_NAME: agent,
        cv.RUN_ID: result.run_id,
    }
    records.add_usage(attributes, result.token_usage)
    cost = result.metrics.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        attributes[cv.COST_USD] = float(cost)
    error = recorded.agent_error
    if error:
        attributes[cv.ERROR_TYPE] = "timeout" if recorded.agent_timed_out else "_OTHER"
        said = "the agent timed out" if recorded.agent_timed_out else "the agent's call failed"
        error = redaction.error(error, run.capture_content, said)
    invoke = records.SpanRecord(
        name=f"{cv.INVOKE_AGENT} {agent}",
        trace_id=test.trace_id,
        span_id=span_id,
        parent_id=test.span_id,
        start_ns=start,
        end_ns=max(start, end),
        kind="client",
        attributes=attributes,
        error=records.cut(error) if error else None,
    )
    steps = trajectory_spans.steps(result.trajectory, invoke, run.capture_content, result.mcp_calls)
    return [invoke, *steps]


def _judge_span(call: JudgeCall, run: RunContext, test: records.SpanRecord) -> records.SpanRecord:
    """A judge call as the ``chat`` it was: its model, tokens, whether the cache answered."""
    signal = call.signal
    evidence = signal.evidence or {}
    model = evidence.get("model")
    attributes: dict[str, records.AttributeValue] = {
        cv.OPERATION_NAME: cv.CHAT,
        cv.EVALUATION_NAME: signal.name,
        cv.JUDGE_CACHED: bool(evidence.get("cached")),
    }
    if run.judge_provider:
        attributes[cv.PROVIDER_NAME] = run.judge_provider
    if isinstance(model, str):
        attributes[cv.REQUEST_MODEL] = model
    for key, name in (("input_tokens", cv.INPUT_TOKENS), ("output_tokens", cv.OUTPUT_TOKENS)):
        value = evidence.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            attributes[name] = value
    if signal.error:
        attributes[cv.ERROR_TYPE] = "judge_error"
    start = records.ns(call.started)
    return records.SpanRecord(
        name=f"{cv.CHAT} {model}" if isinstance(model, str) else cv.CHAT,
        trace_id=test.trace_id,
        span_id=records.new_span_id(),
        parent_id=test.span_id,
        start_ns=start,
        end_ns=max(start, records.ns(call.ended)),
        kind="client",
        attributes=attributes,
        error=records.cut(redaction.error(signal.error, run.capture_content, "the judge errored"))
        if signal.error
        else None,
    )


def run_span(
    run: RunContext,
    started: float,
    ended: float,
    counts: Mapping[str, int],
    pass_rate: float | None,
    score: float | None,
    tests: Sequence[tuple[int, int]],
    max_links: int = 128,
) -> records.SpanRecord:
    """The run's own span (its own trace), linked to the first ``max_links`` test spans."""
    attributes: dict[str, records.AttributeValue] = {
        cv.RUN_TOTAL: sum(counts.values()),
        cv.RUN_PASSED: counts.get("passed", 0) + counts.get("flaky", 0),
        cv.RUN_FAILED: counts.get("failed", 0),
        cv.RUN_ERRORED: counts.get("errored", 0),
        cv.RUN_SKIPPED: counts.get("skipped", 0),
    }
    if pass_rate is not None:
        attributes[cv.RUN_PASS_RATE] = pass_rate
    if score is not None:
        attributes[cv.RUN_SCORE] = score
    if run.agent:
        attributes[cv.RUN_AGENT] = redaction.agent_name(run.agent)
    start = records.ns(started)
    return records.SpanRecord(
        name="agent-health run",
        trace_id=run.trace_id,
        span_id=run.span_id,
        parent_id=None,
        start_ns=start,
        end_ns=max(start, records.ns(ended)),
        attributes=attributes,
        links=[records.Link(t, s, {cv.LINK_ROLE: "test"}) for t, s in tests[:max_links]],
    )
