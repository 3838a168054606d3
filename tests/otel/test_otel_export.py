"""OTLP export (docs/otel.md): a run through the real CLI, its spans decoded with
opentelemetry-proto on a real OTLP/HTTP receiver on 127.0.0.1, checked against the run's JSON
report; the trace context the agent was sent; an unreachable collector; the settings."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.otel import conventions as cv
from agent_health.sdk import otlpconfig
from aiohttp import web
from support.helpers import run_cli
from support.judge_servers import Answer, ScriptedModel
from support.loopback import serving
from support.otlp_support import receiving

SUITE = """
from agent_health import test


@test("diagnoses the outage", labels=["category:RCA", "difficulty:hard"])
async def diagnoses(agent, expect, judge):
    result = await agent.run("Why is the payment service failing?")
    expect(result).to_have_called_tool("search_logs")
    expect(result.output).to_contain("db-primary")
    await judge(result, "names the database as the cause")


@test("fails a check", labels=["category:RCA"])
async def fails(agent, expect):
    result = await agent.run("Is the search service healthy?")
    expect(result.output).to_contain("nowhere in the answer")


@test("data only")
async def data_only(expect):
    expect(2 + 2).to_equal(4)
"""
TRAJECTORY = [
    {"type": "assistant", "content": "I will look at the logs.", "model": "agent-model-1"},
    {
        "type": "tool_call",
        "tool_name": "search_logs",
        "tool_args": {"service": "payment"},
        "tool_call_id": "call-1",
    },
    {
        "type": "tool_result",
        "tool_name": "search_logs",
        "tool_output": "Connection refused to db-primary:5432",
        "tool_call_id": "call-1",
        "latency_ms": 12.5,
    },
    {
        "type": "tool_call",
        "tool_name": "service_status",
        "tool_args": {"name": "db-primary"},
        "tool_call_id": "call-2",
    },
    {
        "type": "tool_result",
        "tool_name": "service_status",
        "tool_output": {"error": "unreachable"},
        "tool_call_id": "call-2",
        "status": "error",
    },
    {"type": "assistant", "content": "db-primary is down."},
]


class Agent:
    """A REST agent that keeps the headers of each call and answers a fixed trajectory."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append({**request.headers, "run_id": body["run_id"]})
        await asyncio.sleep(0.05)  # longer than the latencies it reports, as a real run is
        return web.json_response(
            {
                "output": "The payment service cannot reach db-primary.",
                "trajectory": TRAJECTORY,
                "token_usage": {"prompt": 120, "completion": 30},
            }
        )


def _judge_env(monkeypatch: pytest.MonkeyPatch, server: ScriptedModel, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_PROVIDER", "openai")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_MODEL", "scripted-judge")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_BASE_URL", server.url)
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_API_KEY_ENV", "SCRIPTED_JUDGE_KEY")
    monkeypatch.setenv("SCRIPTED_JUDGE_KEY", "sk-scripted")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    monkeypatch.delenv("AGENT_HEALTH_SKIP_JUDGE", raising=False)


@pytest.fixture(autouse=True)
def _no_ambient_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_SDK_DISABLED",
        otlpconfig.CONTENT_VARIABLE,
    ):
        monkeypatch.delenv(name, raising=False)


async def _exported_run(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str
) -> tuple[Any, Any, Agent]:
    agent = Agent()
    server = await ScriptedModel.start(
        "openai", default=Answer(True, 0.75, "db-primary is named"), api_key="sk-scripted"
    )
    _judge_env(monkeypatch, server, tmp_path)
    suite = write_suite(**{"test_otel.py": SUITE})
    try:
        async with serving(agent.handle, path="/run") as url, receiving() as receiver:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=sre,x-token=a%3Db")
            run = await run_cli(
                suite, "--agent", f"rest+{url}", "--otlp", receiver.url, "--no-ledger", *flags
            )
    finally:
        await server.close()
    return run, receiver, agent


async def test_each_test_is_a_trace_whose_spans_and_events_match_the_json_report(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, receiver, agent = await _exported_run(write_suite, tmp_path, monkeypatch)
    assert run.code == 1  # "fails a check" failed; the export changes no outcome
    assert receiver.requests >= 1
    assert receiver.headers[0]["x-team"] == "sre"
    assert receiver.headers[0]["x-token"] == "a=b"  # URL-decoded, as the spec says
    assert {scope for scope in receiver.scopes} == {(cv.SCOPE, cv.SCHEMA_URL)}
    assert receiver.resources[0]["service.name"] == "agent-health"

    [run_span] = receiver.named("agent-health run")
    summary = run.report["summary"]
    assert run_span["parent_id"] is None
    assert run_span["attributes"][cv.RUN_TOTAL] == summary["total"] == 3
    assert run_span["attributes"][cv.RUN_FAILED] == summary["failed"] == 1
    assert run_span["attributes"][cv.RUN_PASS_RATE] == summary["pass_rate"]

    tests = receiver.named("test ")
    assert len(tests) == len(run.report["tests"]) == 3
    linked = {(link["trace_id"], link["span_id"]) for link in run_span["links"]}
    for entry in run.report["tests"]:
        [span] = [s for s in tests if s["attributes"][cv.RUN_ID] == entry["run_id"]]
        attributes = span["attributes"]
        assert span["name"] == f"test {entry['name']}"
        assert span["parent_id"] is None
        assert attributes[cv.TEST_ID] == entry["id"]
        assert attributes[cv.TEST_STATUS] == entry["status"]
        assert attributes[cv.TEST_REPEAT] == entry["repeat"]
        assert attributes[cv.TEST_CONTENT_HASH] == entry["content_hash"]
        assert list(attributes.get(cv.TEST_LABELS, ())) == entry["labels"]
        assert attributes.get(cv.TEST_SCORE) == entry["score"]
        assert span["start_ns"] <= span["end_ns"]
        # Its own trace, linked both ways to the run's.
        assert span["trace_id"] != run_span["trace_id"]
        assert (span["trace_id"], span["span_id"]) in linked
        assert [(link["trace_id"], link["span_id"]) for link in span["links"]] == [
            (run_span["trace_id"], run_span["span_id"])
        ]
        # One gen_ai.evaluation.result event per signal the body recorded.
        body_signals = [s for s in entry["signals"] if s["kind"] != "metric"]
        events = span["events"]
        assert [e["name"] for e in events] == [cv.EVALUATION_EVENT] * len(body_signals)
        for event, signal in zip(events, body_signals, strict=True):
            got = event["attributes"]
            assert got[cv.EVALUATION_NAME] == signal["name"]
            assert got.get(cv.EVALUATION_SCORE_VALUE) == signal["score"]
            assert got[cv.SIGNAL_ROLE] == signal["role"]
            label = {True: "passed", False: "failed", None: "observed"}[signal["passed"]]
            assert got[cv.EVALUATION_SCORE_LABEL] == label
        if entry["status"] == "failed":
            assert span["status"] == 2  # STATUS_CODE_ERROR: red in a trace viewer
        if entry["name"] == "data only":
            assert entry["trace_id"] is None
            assert receiver.children(span) == []  # never ran the agent, no judge
            continue
        assert span["trace_id"] == entry["trace_id"]

    # The test that ran the agent, the tools and the judge: the whole tree.
    entry = run.by_name("diagnoses the outage")
    [test_span] = [s for s in tests if s["attributes"][cv.RUN_ID] == entry["run_id"]]
    judge_event = test_span["events"][-1]["attributes"]
    assert judge_event[cv.EVALUATION_NAME] == "names the database as the cause"
    assert judge_event[cv.EVALUATION_SCORE_VALUE] == 0.75
    # The judge's reasoning may quote the agent: content, exported with --otlp-content only.
    assert judge_event[cv.EVALUATION_EXPLANATION] == (
        "the reasoning is withheld: it may quote the agent (--otlp-content exports it)"
    )
    invoke, judge_span = sorted(receiver.children(test_span), key=lambda s: s["start_ns"])
    assert invoke["name"] == "invoke_agent rest+" + invoke["attributes"][cv.AGENT_NAME][5:]
    assert invoke["attributes"][cv.OPERATION_NAME] == "invoke_agent"
    assert invoke["attributes"][cv.INPUT_TOKENS] == 120
    assert invoke["attributes"][cv.OUTPUT_TOKENS] == 30
    assert invoke["kind"] == 3  # SPAN_KIND_CLIENT
    assert test_span["start_ns"] <= invoke["start_ns"] <= invoke["end_ns"] <= test_span["end_ns"]
    steps = sorted(receiver.children(invoke), key=lambda s: s["start_ns"])
    assert [s["name"] for s in steps] == [
        "chat agent-model-1",
        "execute_tool search_logs",
        "execute_tool service_status",
        "chat",
    ]
    search, status = steps[1]["attributes"], steps[2]["attributes"]
    assert (search[cv.TOOL_NAME], search[cv.TOOL_CALL_ID]) == ("search_logs", "call-1")
    assert steps[1]["end_ns"] - steps[1]["start_ns"] == 12_500_000  # its recorded latency
    assert cv.TIMING not in search
    assert status[cv.TIMING] == "estimated"
    assert status[cv.ERROR_TYPE] == "tool_error"
    assert steps[2]["status"] == 2
    # Arguments and results are opt-in (--otlp-content).
    assert cv.TOOL_CALL_ARGUMENTS not in search
    assert cv.TOOL_CALL_RESULT not in search
    for step in steps:
        assert invoke["start_ns"] <= step["start_ns"] <= step["end_ns"] <= invoke["end_ns"]
    assert judge_span["name"] == "chat scripted-judge"
    assert judge_span["attributes"][cv.PROVIDER_NAME] == "openai"
    assert judge_span["attributes"][cv.REQUEST_MODEL] == "scripted-judge"
    assert judge_span["attributes"][cv.JUDGE_CACHED] is False
    assert judge_span["attributes"][cv.INPUT_TOKENS] > 0

    # Propagation: the agent was sent this test's trace, with the invoke_agent span as parent.
    [sent] = [h for h in agent.seen if h["run_id"] == entry["run_id"]]
    version, trace_id, parent_id, flags = sent["traceparent"].split("-")
    assert (version, flags) == ("00", "01")
    assert trace_id == entry["trace_id"] == invoke["trace_id"]
    assert parent_id == invoke["span_id"]
    assert sent["tracestate"] == f"agent-health={entry['run_id']}"


async def test_tool_arguments_and_results_are_exported_only_when_asked_for(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, receiver, _ = await _exported_run(
        write_suite, tmp_path, monkeypatch, "--otlp-content", "--grep", "diagnoses"
    )
    assert run.code == 0
    [search] = receiver.named("execute_tool search_logs")
    assert json.loads(search["attributes"][cv.TOOL_CALL_ARGUMENTS]) == {"service": "payment"}
    assert search["attributes"][cv.TOOL_CALL_RESULT] == "Connection refused to db-primary:5432"
    [status] = receiver.named("execute_tool service_status")
    assert json.loads(status["attributes"][cv.TOOL_CALL_RESULT]) == {"error": "unreachable"}
    [test_span] = receiver.named("test diagnoses")
    assert test_span["events"][-1]["attributes"][cv.EVALUATION_EXPLANATION] == "db-primary is named"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_collector_changes_nothing_but_one_warning(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    agent = Agent()
    suite = write_suite(**{"test_otel.py": SUITE})
    dead = f"http://127.0.0.1:{_closed_port()}"
    async with serving(agent.handle, path="/run") as url:
        plain = await run_cli(suite, "--agent", f"rest+{url}", "--no-ledger", "--no-judge")
        capsys.readouterr()
        exported = await run_cli(
            suite, "--agent", f"rest+{url}", "--no-ledger", "--no-judge", "--otlp", dead
        )
    err = capsys.readouterr().err
    assert exported.code == plain.code == 1
    statuses = [(t["name"], t["status"]) for t in exported.report["tests"]]
    assert statuses == [(t["name"], t["status"]) for t in plain.report["tests"]]
    warnings = [line for line in err.splitlines() if "OTLP export" in line]
    assert len(warnings) == 1, err
    assert f"{dead}/v1/traces" in warnings[0]
    assert "spans dropped" in warnings[0]
    assert "cannot connect" in warnings[0]
    dropped = int(warnings[0].split(": ", 2)[2].split(" of ")[0])
    total = int(warnings[0].split(" of ")[1].split(" spans")[0])
    assert dropped == total > 0  # every span, counted, none sent


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["--otlp", "127.0.0.1:4318"], {}, "not an http(s) URL"),
        (["--otlp-content"], {}, "nothing is exported"),
        (
            [],
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "protocol 'grpc' is not supported",
        ),
        (
            [],
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_HEADERS": "x",
            },
            "OTEL_EXPORTER_OTLP_HEADERS: 'x' is not key=value",
        ),
    ],
)
def test_a_bad_export_setting_stops_the_run_before_any_test(
    write_suite: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    argv: list[str],
    env: dict[str, str],
    says: str,
) -> None:
    suite = write_suite(**{"test_otel.py": SUITE})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = cli.main(["run", str(suite), "--agent", "rest+http://127.0.0.1:9/run", *argv])
    assert code == 2
    assert says in capsys.readouterr().err


def test_settings_resolve_in_the_documented_order() -> None:
    cfg = otlpconfig.OtlpConfig(endpoint="http://config:4318", headers_env="MY_HEADERS")
    env = {"MY_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_HEADERS": "b=2"}
    got = otlpconfig.resolve(None, cfg, env)
    assert got is not None
    assert got.endpoint == "http://config:4318/v1/traces"
    assert dict(got.headers) == {"a": "1", "b": "2"}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://env:4318/"
    assert otlpconfig.resolve(None, cfg, env).endpoint == "http://env:4318/v1/traces"  # type: ignore[union-attr]
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://env:4318/custom"
    assert otlpconfig.resolve(None, cfg, env).endpoint == "http://env:4318/custom"  # type: ignore[union-attr]
    flagged = otlpconfig.resolve("http://flag:4318/v1/traces", cfg, env)
    assert flagged is not None
    assert flagged.endpoint == "http://flag:4318/v1/traces"
    assert otlpconfig.resolve(None, cfg, {**env, "OTEL_SDK_DISABLED": "true"}) is None
    assert otlpconfig.resolve(None, None, {}) is None
    timed = otlpconfig.resolve("http://x:1", None, {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"})
    assert timed is not None
    assert timed.timeout == 2.5
    content = otlpconfig.resolve("http://x:1", None, {otlpconfig.CONTENT_VARIABLE: "true"})
    assert content is not None
    assert content.capture_content


def test_every_gen_ai_name_is_one_of_the_pinned_conventions() -> None:
    from opentelemetry.semconv import schemas
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

    published = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_")}
    assert set(cv.GEN_AI) <= published, sorted(set(cv.GEN_AI) - published)
    assert cv.SCHEMA_URL in {s.value for s in schemas.Schemas}
    names = gen_ai_attributes.GenAiOperationNameValues
    assert {cv.INVOKE_AGENT, cv.EXECUTE_TOOL, cv.CHAT} <= {n.value for n in names}


CELL_SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, "names the database as the cause")
"""


async def test_a_cell_exports_its_test_through_its_gateway_and_no_run_span(
    tmp_path: Path, triage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses
    from urllib.parse import urlsplit

    from agent_health.engine.controller import cell
    from support import cell_support

    cell_support.private_judge_cache(monkeypatch, tmp_path)
    async with (
        cell_support.judge_service(tmp_path, Answer(True, 0.9, "names db-primary")) as judge,
        receiving() as receiver,
    ):
        port = urlsplit(triage_url).port
        assert port is not None
        proxy = await cell_support.cell_gateway(tmp_path, port, judge[0])
        try:
            settings = dataclasses.replace(
                cell_support.cell_settings(tmp_path, proxy, CELL_SUITE),
                otlp=otlpconfig.resolve(None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}),
                evaluation_run="triage-nightly",
            )
            code, result = await cell.run_cell(settings)
        finally:
            await proxy.stop()
    assert code == 0
    assert result is not None
    assert receiver.named("agent-health run") == []  # the operator's run, not a cell's
    [test_span] = receiver.named("test ")
    assert test_span["attributes"][cv.RUN_NAME] == "triage-nightly"
    assert test_span["attributes"][cv.RUN_ID] == result.run_id
    assert test_span["links"] == []
    assert test_span["trace_id"] == result.trace_id
    names = sorted(s["name"] for s in receiver.children(test_span))
    assert names[0].startswith("chat")  # the judge's call, through the judge service
    assert names[1].startswith("invoke_agent")
    [invoke] = receiver.named("invoke_agent")
    tools = [s["attributes"].get(cv.TOOL_NAME) for s in receiver.children(invoke)]
    assert "search_logs" in tools
    assert len(test_span["events"]) == len(result.signals) == 2


async def test_tests_beyond_the_queue_are_dropped_counted_and_said_once() -> None:
    """A receiver that does not answer yet holds the export's worker: what the bounded queue
    cannot hold meanwhile is dropped at once (the caller never waits), counted, and named in
    the one warning; what it held is sent once the receiver answers."""
    import time

    from agent_health.otel import export
    from agent_health.sdk.results import TestResult

    posted = asyncio.Event()
    release = asyncio.Event()
    bodies: list[bytes] = []

    async def slow(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        posted.set()
        await release.wait()
        return web.Response(content_type="application/x-protobuf")

    def result(n: int) -> TestResult:
        return TestResult(
            id=f"t.py::t{n}",
            name=f"t{n}",
            title=f"t{n}",
            file="t.py",
            line=1,
            status="passed",
            run_id=f"r{n}",
            started_at=time.time(),
            duration_ms=5.0,
        )

    async with serving(slow, path="/v1/traces") as url:
        run = export.Export.open(otlpconfig.Settings(endpoint=url, max_queue=2))
        run.test_ended(result(0), None)
        await posted.wait()  # the worker is in its first POST, half a second later
        for n in range(1, 11):
            run.test_ended(result(n), None)  # two fit the queue; eight never wait
        release.set()
        warning = await run.aclose()
    assert warning == (
        f"OTLP export to {url}: 8 tests not exported (the export queue was full); the run's "
        "results are unaffected"
    )
    assert len(bodies) == 2  # the first test, then the two the queue held


HANGS = """
from agent_health import test


@test("the agent never answers")
async def hangs(agent, expect):
    await agent.run("Why is the payment service failing?", timeout=0.2)
"""


async def test_an_agent_that_times_out_is_an_errored_invoke_agent_span(
    write_suite: Any, tmp_path: Path
) -> None:
    never = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await request.read()
        await never.wait()
        return web.json_response({"output": ""})

    suite = write_suite(**{"test_hangs.py": HANGS})
    async with serving(hang, path="/run") as url, receiving() as receiver:
        run = await run_cli(suite, "--agent", f"rest+{url}", "--no-ledger", "--otlp", receiver.url)
        never.set()
    assert run.code == 3  # errored only
    [entry] = run.report["tests"]
    assert (entry["status"], entry["cause"]) == ("errored", "agent")
    [test_span] = receiver.named("test ")
    assert test_span["attributes"][cv.TEST_CAUSE] == "agent"
    assert test_span["status"] == 2
    [invoke] = receiver.children(test_span)
    assert invoke["attributes"][cv.ERROR_TYPE] == "timeout"
    assert invoke["status"] == 2
    assert invoke["status_message"]  # the reason, as the report gives it
    assert invoke["trace_id"] == entry["trace_id"]


SECRET = "tok-3e7c91"  # what the agent says and does: in its output, a tool's args and output
PASSWORD = "pw-5b2d40"  # in the agent's URL
LEAKY = """
from agent_health import test


@test("checks every kind of evidence")
async def checks(agent, expect, judge):
    result = await agent.run("Where is the key?")
    expect(result.output).to_contain("nowhere in the answer")
    expect(result.output).to_match(r"^nothing$")
    expect(result).to_have_called_tool("vault_read", args={"path": "other"})
    expect(result).to_have_no_tool_errors()
    expect(result.json()).to_equal({"answer": "none"})
    await judge(result, "keeps the key to itself")
    assert "nowhere" in result.output, f"the answer was {result.output}"


@test("an agent that fails quotes its body")
async def fails(agent):
    await agent.run("Fail, please.")


@test("a body that raises quotes the output")
async def raises(agent):
    result = await agent.run("Where is the key?")
    raise RuntimeError(f"cannot go on with {result.output}")
"""


async def _leaky_agent(request: web.Request) -> web.Response:
    body = await request.json()
    if body["prompt"] == "Fail, please.":
        return web.Response(status=500, text=f"vault error: {SECRET} is not allowed here")
    return web.json_response(
        {
            "output": f'{{"answer": "the key is {SECRET}"}}',
            "trajectory": [
                {"type": "tool_call", "tool_name": "vault_read", "tool_args": {"path": SECRET}},
                {
                    "type": "tool_result",
                    "tool_name": "vault_read",
                    "tool_output": f"denied: {SECRET}",
                    "status": "error",
                },
            ],
        }
    )


async def _leaky_run(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str
) -> tuple[Any, Any]:
    server = await ScriptedModel.start(
        "openai",
        default=Answer(False, 0.1, f"the answer gives the key away: {SECRET}"),
        api_key="sk-scripted",
    )
    _judge_env(monkeypatch, server, tmp_path)
    suite = write_suite(**{"test_leaky.py": LEAKY})
    try:
        async with serving(_leaky_agent, path="/run") as url, receiving() as receiver:
            agent = url.replace("http://", f"rest+http://health:{PASSWORD}@")
            run = await run_cli(
                suite, "--agent", agent, "--no-ledger", "--otlp", receiver.url, *flags
            )
    finally:
        await server.close()
    return run, receiver


async def test_without_content_no_span_says_what_the_agent_said(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, receiver = await _leaky_run(write_suite, tmp_path, monkeypatch)
    assert run.code == 1
    # The report has it all: the evidence quotes the agent (the export must not).
    checks = run.by_name("checks every kind of evidence")
    assert SECRET in json.dumps(checks["signals"])
    assert SECRET in run.by_name("an agent that fails quotes its body")["error"]
    assert SECRET in run.by_name("a body that raises quotes the output")["error"]
    # Not one byte of any export request holds the agent's words, or the URL's password.
    assert receiver.bodies
    for body in receiver.bodies:
        assert SECRET.encode() not in body
        assert PASSWORD.encode() not in body
    # What is not content stays: names, labels, scores, what the test expected, error types.
    [span] = [s for s in receiver.named("test ") if s["name"] == "test " + checks["name"]]
    events = [e["attributes"] for e in span["events"]]
    assert [e[cv.EVALUATION_SCORE_LABEL] for e in events] == ["failed"] * 7
    contain = json.loads(events[0][cv.EVALUATION_EXPLANATION])
    assert contain == {"expected": "nowhere in the answer", "withheld": ["actual"]}
    called = json.loads(events[2][cv.EVALUATION_EXPLANATION])
    assert called["expected"] == {"tool": "vault_read", "args": {"path": "other"}, "times": ">=1"}
    assert "--otlp-content exports it" in events[5][cv.EVALUATION_EXPLANATION]  # the reasoning
    assert json.loads(events[6][cv.EVALUATION_EXPLANATION]) == {"withheld": ["message"]}
    [fails] = receiver.named("test an agent that fails")
    assert fails["attributes"][cv.TEST_CAUSE] == "agent"
    assert fails["status_message"].startswith("errored (agent); the error's text is withheld")
    [invoke] = receiver.children(fails)
    assert invoke["attributes"][cv.ERROR_TYPE] == "_OTHER"
    assert invoke["attributes"][cv.AGENT_NAME].startswith("rest+http://127.0.0.1:")


async def test_with_content_the_evidence_and_errors_are_exported(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, receiver = await _leaky_run(write_suite, tmp_path, monkeypatch, "--otlp-content")
    assert run.code == 1
    [span] = receiver.named("test checks every kind of evidence")
    events = [e["attributes"] for e in span["events"]]
    assert SECRET in json.loads(events[0][cv.EVALUATION_EXPLANATION])["actual"]
    assert SECRET in events[5][cv.EVALUATION_EXPLANATION]  # the judge's reasoning
    [fails] = receiver.named("test an agent that fails")
    assert SECRET in fails["attributes"][cv.TEST_ERROR]
    # Credentials are never content: the URL's password stays out either way.
    assert all(PASSWORD.encode() not in body for body in receiver.bodies)


def test_a_tool_the_gateway_read_from_an_mcp_server_is_named_as_the_conventions_name_mcp() -> None:
    from agent_health.connectors.protocol import Step
    from agent_health.otel import records as span_records
    from agent_health.otel import trajectory_spans
    from opentelemetry.semconv._incubating.attributes import mcp_attributes

    assert cv.MCP_METHOD_NAME == mcp_attributes.MCP_METHOD_NAME
    assert mcp_attributes.McpMethodNameValues.TOOLS_CALL.value == cv.MCP_TOOLS_CALL
    invoke = span_records.SpanRecord(
        name="invoke_agent a", trace_id="1" * 32, span_id="2" * 16, parent_id=None,
        start_ns=0, end_ns=1_000_000, attributes={},
    )  # fmt: skip
    trajectory = [
        Step(type="tool_call", tool_name="get_current_time", tool_args={}),
        Step(type="tool_result", tool_name="get_current_time", tool_output="12:00"),
        Step(type="tool_call", tool_name="page_oncall", tool_args={}),
        Step(type="tool_result", tool_name="page_oncall", tool_output="down", status="ok"),
        Step(type="tool_call", tool_name="local_tool", tool_args={}),
    ]
    calls = [
        {"server": "peer:time", "method": "tools/call", "name": "get_current_time",
         "is_error": False, "error": None},
        {"server": "peer:tickets", "method": "tools/call", "name": "page_oncall",
         "is_error": True, "error": None},
    ]  # fmt: skip
    now, page, local = trajectory_spans.steps(trajectory, invoke, False, calls)
    assert now.attributes[cv.MCP_METHOD_NAME] == "tools/call"
    assert now.attributes[cv.MCP_SERVER] == "peer:time"
    assert now.attributes[cv.TOOL_NAME] == "get_current_time"
    assert cv.ERROR_TYPE not in now.attributes
    # The agent said ok; the server answered isError.
    assert page.attributes[cv.ERROR_TYPE] == "tool_error"
    assert page.error == "the MCP server answered an error"
    assert cv.MCP_METHOD_NAME not in local.attributes
