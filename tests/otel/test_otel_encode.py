"""OTLP export's own encoding and sending (otel/encode.py, otel/exporter.py): span records
sent to a real OTLP/HTTP receiver on 127.0.0.1, every field decoded with opentelemetry-proto
(or read back from OTLP/JSON) and compared with the records; batches, gzip, a receiver that
fails; and that an export loads no OpenTelemetry SDK (and, over http/json, no protobuf)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_health.ledger import otlp as ledger_otlp
from agent_health.otel import conventions as cv
from agent_health.otel import export, exporter, records
from agent_health.sdk import otlpconfig
from agent_health.sdk.results import TestResult
from google.protobuf import json_format
from support.helpers import INPROC_CONFIG, ONE_TEST
from support.otlp_support import receiving

TRACE = 0x0AF7651916CD43DD8448EB211C80319C
OTHER_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
BIG = 2**62 + 1  # past what a double (or a JSON number) holds exactly
ROOT = records.SpanRecord(
    name="test every value",
    trace_id=TRACE,
    span_id=0xB7AD6B7169203331,
    parent_id=None,
    start_ns=1_700_000_000_123_456_789,
    end_ns=1_700_000_001_000_000_001,
    attributes={
        "s": "text ü ✓",
        "yes": True,
        "no": False,
        "i": 42,
        "neg": -7,
        "big": BIG,
        "huge": 2**64,  # no int64 holds it: sent as its digits
        "x": 0.25,
        "labels": ("category:RCA", "difficulty:hard"),
        "empty": (),
    },
    events=[
        records.Event(
            cv.EVALUATION_EVENT,
            1_700_000_000_900_000_000,
            {cv.EVALUATION_NAME: "to_equal", cv.EVALUATION_SCORE_VALUE: 0.5, "n": 3, "ok": True},
        ),
        records.Event("bare", 1_700_000_000_950_000_000, {}),
    ],
    links=[records.Link(OTHER_TRACE, 0x00F067AA0BA902B7, {cv.LINK_ROLE: "run"})],
    ok=True,
)
CHILD = records.SpanRecord(
    name="invoke_agent rest+http://agent",
    trace_id=TRACE,
    span_id=0x1111111111111111,
    parent_id=ROOT.span_id,
    start_ns=1_700_000_000_200_000_000,
    end_ns=1_700_000_000_800_000_000,
    kind="client",
    attributes={cv.ERROR_TYPE: "timeout", cv.INPUT_TOKENS: 120},
    error="the agent did not answer within 2 s",
)
UNSET = records.SpanRecord(
    name="chat",
    trace_id=TRACE,
    span_id=0x2222222222222222,
    parent_id=CHILD.span_id,
    start_ns=1_700_000_000_300_000_000,
    end_ns=1_700_000_000_300_000_000,
)
RECORDS = [ROOT, CHILD, UNSET]


@pytest.fixture(autouse=True)
def _no_ambient_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def _settings(url: str, **fields: Any) -> otlpconfig.Settings:
    return otlpconfig.Settings(endpoint=otlpconfig.traces_url(url), **fields)


async def _send(settings: otlpconfig.Settings, *batches: list[records.SpanRecord]) -> Any:
    """Each batch submitted as one test's spans, then close: the warning, if any."""

    def run() -> str | None:
        sink = exporter.RunExporter(settings, version="9.9.9")
        for batch in batches:
            sink.submit(batch)
        return sink.close()

    return await asyncio.to_thread(run)


def _hex(value: int, size: int) -> str:
    return value.to_bytes(size, "big").hex()


async def test_every_field_of_every_record_reaches_the_receiver_as_recorded() -> None:
    async with receiving() as receiver:
        settings = _settings(receiver.url, service_name="nightly", resource={"team": "sre"})
        assert await _send(settings, RECORDS) is None
    assert receiver.requests == 1
    assert receiver.headers[0]["Content-Type"] == "application/x-protobuf"
    assert receiver.headers[0]["User-Agent"] == "agent-health/9.9.9"
    assert receiver.resources == [{"team": "sre", "service.name": "nightly"}]
    [message] = receiver.messages
    [scope_spans] = message.resource_spans[0].scope_spans
    assert (scope_spans.scope.name, scope_spans.scope.version) == (cv.SCOPE, "9.9.9")
    assert scope_spans.schema_url == cv.SCHEMA_URL
    # Parent not remote (HAS_IS_REMOTE set, IS_REMOTE not), sampled; links the same.
    assert [s.flags for s in scope_spans.spans] == [0x101] * 3
    assert scope_spans.spans[0].links[0].flags == 0x101

    root, child, unset = receiver.spans
    assert root == {
        "name": "test every value",
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": "b7ad6b7169203331",
        "parent_id": None,
        "kind": 1,  # SPAN_KIND_INTERNAL
        "start_ns": 1_700_000_000_123_456_789,
        "end_ns": 1_700_000_001_000_000_001,
        "attributes": {
            "s": "text ü ✓",
            "yes": True,
            "no": False,
            "i": 42,
            "neg": -7,
            "big": BIG,
            "huge": str(2**64),
            "x": 0.25,
            "labels": ("category:RCA", "difficulty:hard"),
            "empty": (),
        },
        "events": [
            {
                "name": cv.EVALUATION_EVENT,
                "at_ns": 1_700_000_000_900_000_000,
                "attributes": {
                    cv.EVALUATION_NAME: "to_equal",
                    cv.EVALUATION_SCORE_VALUE: 0.5,
                    "n": 3,
                    "ok": True,
                },
            },
            {"name": "bare", "at_ns": 1_700_000_000_950_000_000, "attributes": {}},
        ],
        "links": [
            {
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                "span_id": "00f067aa0ba902b7",
                "attributes": {cv.LINK_ROLE: "run"},
            }
        ],
        "status": 1,  # STATUS_CODE_OK
        "status_message": "",
    }
    assert child["parent_id"] == "b7ad6b7169203331"
    assert child["kind"] == 3  # SPAN_KIND_CLIENT
    assert (child["status"], child["status_message"]) == (2, CHILD.error)  # STATUS_CODE_ERROR
    assert child["attributes"] == {cv.ERROR_TYPE: "timeout", cv.INPUT_TOKENS: 120}
    assert (child["start_ns"], child["end_ns"]) == (CHILD.start_ns, CHILD.end_ns)
    assert unset["parent_id"] == "1111111111111111"
    assert (unset["status"], unset["attributes"], unset["events"], unset["links"]) == (
        0,
        {},
        [],
        [],
    )
    # The value kinds themselves, not only what they decode to.
    kinds = {kv.key: kv.value.WhichOneof("value") for kv in scope_spans.spans[0].attributes}
    assert kinds == {
        "s": "string_value",
        "yes": "bool_value",
        "no": "bool_value",
        "i": "int_value",
        "neg": "int_value",
        "big": "int_value",
        "huge": "string_value",
        "x": "double_value",
        "labels": "array_value",
        "empty": "array_value",
    }


def _ids_to_hex(value: Any) -> Any:
    """protobuf's JSON mapping writes bytes in base64; OTLP/JSON's ids are hex."""
    if isinstance(value, list):
        return [_ids_to_hex(v) for v in value]
    if not isinstance(value, dict):
        return value
    ids = ("traceId", "spanId", "parentSpanId")
    return {k: base64.b64decode(v).hex() if k in ids else _ids_to_hex(v) for k, v in value.items()}


async def test_http_json_is_the_otlp_json_mapping_of_the_same_request() -> None:
    async with receiving() as receiver:
        await _send(_settings(receiver.url, resource={"team": "sre"}), RECORDS)
        await _send(
            _settings(receiver.url, protocol="http/json", resource={"team": "sre"}), RECORDS
        )
    assert receiver.requests == 2
    assert receiver.headers[1]["Content-Type"] == "application/json"
    sent = json.loads(receiver.bodies[1])
    # The protobuf request, in protobuf's JSON mapping (camelCase, int64 as strings, enums as
    # integers), ids in hex: the OTLP/JSON mapping, field for field.
    as_json = json_format.MessageToDict(receiver.messages[0], use_integers_for_enums=True)
    assert sent == _ids_to_hex(as_json)
    span = sent["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == "0af7651916cd43dd8448eb211c80319c"
    assert span["startTimeUnixNano"] == "1700000000123456789"
    assert {"key": "big", "value": {"intValue": str(BIG)}} in span["attributes"]
    assert span["events"][0]["timeUnixNano"] == "1700000000900000000"

    # And agent-health's own OTLP/JSON reader (the receiver's) reads it back.
    read = ledger_otlp.decode(receiver.bodies[1], ledger_otlp.JSON).spans
    for got, record in zip(read, RECORDS, strict=True):
        assert got["trace_id"] == _hex(record.trace_id, 16)
        assert got["span_id"] == _hex(record.span_id, 8)
        assert got["parent_span_id"] == (_hex(record.parent_id, 8) if record.parent_id else None)
        assert (got["name"], got["start_ns"], got["end_ns"]) == (
            record.name,
            record.start_ns,
            record.end_ns,
        )
        assert got["kind"] == {"internal": 1, "client": 3}[record.kind]
        assert got["status"] == ("error" if record.error else "ok" if record.ok else "unset")
        assert got["status_message"] == record.error
        assert got["service"] == "agent-health"
    assert read[0]["attributes"]["big"] == BIG
    assert read[0]["attributes"]["labels"] == ["category:RCA", "difficulty:hard"]


def test_non_finite_doubles_are_spelled_as_the_json_mapping_spells_them() -> None:
    from agent_health.otel import encode

    encoder = encode.Json({}, "")
    encoder.add(records.SpanRecord("x", 1, 1, None, 0, 0, attributes={"a": float("nan")}))
    body = encoder.take()
    [pair] = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    assert pair == {"key": "a", "value": {"doubleValue": "NaN"}}


def _many(count: int) -> list[records.SpanRecord]:
    return [
        records.SpanRecord(f"span {n}", TRACE, n + 1, None, n, n + 1, attributes={"n": n})
        for n in range(count)
    ]


async def test_a_batch_holds_at_most_512_spans_and_gzip_is_sent_when_asked_for() -> None:
    async with receiving() as receiver:
        assert await _send(_settings(receiver.url, compression="gzip"), _many(600)) is None
    assert [len(m.resource_spans[0].scope_spans[0].spans) for m in receiver.messages] == [512, 88]
    assert {h["Content-Encoding"] for h in receiver.headers} == {"gzip"}
    assert [s["attributes"]["n"] for s in receiver.spans] == list(range(600))


@pytest.mark.parametrize(
    ("status", "reason"), [(500, "Internal Server Error"), (503, "Service Unavailable")]
)
async def test_a_failing_receiver_is_tried_once_and_the_rest_is_dropped(
    status: int, reason: str
) -> None:
    async with receiving() as receiver:
        receiver.answer = status
        warning = await _send(_settings(receiver.url), _many(600), _many(10))
    assert receiver.requests == 1  # the first full batch; nothing after it failed
    assert warning == f"610 of 610 spans dropped (HTTP {status} {reason})"


def _result(name: str) -> TestResult:
    return TestResult(
        id=f"t.py::{name}",
        name=name,
        title=name,
        file="t.py",
        line=1,
        status="passed",
        run_id=name,
        started_at=time.time(),
        duration_ms=5.0,
    )


async def test_a_pending_request_goes_out_without_waiting_for_the_end_of_the_run() -> None:
    async with receiving() as receiver:
        run = export.Export.open(_settings(receiver.url))
        run.test_ended(_result("one"), None)
        for _ in range(600):  # 30 s at most: the request is due half a second after the test
            if receiver.requests:
                break
            await asyncio.sleep(0.05)
        sent_before_close = receiver.requests
        assert await run.aclose() is None
    assert sent_before_close == 1
    assert [s["attributes"][cv.RUN_ID] for s in receiver.spans] == ["one"]


def test_the_protocol_compression_and_resource_settings_resolve() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=ci,team=s%20re,service.name=x",
    }
    got = otlpconfig.resolve("http://x:4318", None, env)
    assert got is not None
    assert (got.protocol, got.compression) == ("http/json", "gzip")
    assert dict(got.resource) == {"deployment.environment": "ci", "team": "s re"}
    assert got.service_name == "x"  # OTEL_RESOURCE_ATTRIBUTES' service.name, unless...
    named = otlpconfig.resolve("http://x:4318", None, {**env, "OTEL_SERVICE_NAME": "y"})
    assert named is not None
    assert named.service_name == "y"  # ...OTEL_SERVICE_NAME says otherwise, as the spec says
    plain = otlpconfig.resolve("http://x:4318", None, {})
    assert plain is not None
    assert (plain.protocol, plain.compression, plain.service_name) == (
        "http/protobuf",
        "none",
        "agent-health",
    )
    with pytest.raises(otlpconfig.SettingsError, match="compression 'zstd' is not supported"):
        otlpconfig.resolve("http://x:4318", None, {"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"})


# Run before the CLI in the subprocess: protobuf and opentelemetry-proto cannot be found, as
# in an install without the otel extra.
WITHOUT_PROTOBUF = """
import sys


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("google", "opentelemetry"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""


async def _run_exported(
    cwd: Path, url: str, protocol: str, prelude: str = ""
) -> tuple[int, str, set[str]]:
    """``agent-health run --otlp URL`` in a fresh interpreter: exit code, stderr, and the
    modules loaded by the time it returned."""
    out = cwd / "modules.json"
    code = (
        f"{prelude}\nimport json, sys\nfrom agent_health.cli import app\n"
        f"code = app.main(['run', '.', '--agent', 'a', '--no-ledger', '--otlp', {url!r}])\n"
        f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\nsys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, cwd=cwd, env=env, stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    _, err = await process.communicate()
    modules = set(json.loads(out.read_text())) if out.exists() else set()
    return process.returncode or 0, err.decode(), modules


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "test_one.py").write_text(ONE_TEST)
    (tmp_path / "agent-health.config.py").write_text(INPROC_CONFIG)
    return tmp_path


def _loaded(modules: set[str], *names: str) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


SDK = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.trace", "requests")


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
async def test_an_export_loads_no_opentelemetry_sdk(tmp_path: Path, protocol: str) -> None:
    async with receiving() as receiver:
        code, err, modules = await _run_exported(_suite(tmp_path), receiver.url, protocol)
    assert code == 0, err
    assert receiver.requests >= 1
    assert json.loads(receiver.bodies[0]) if protocol == "http/json" else receiver.spans
    assert _loaded(modules, *SDK) == []
    assert "agent_health.otel.exporter" in modules  # it did export, in this process
    if protocol == "http/json":
        assert _loaded(modules, "google.protobuf", "opentelemetry") == []


async def test_http_json_needs_no_extra_and_protobuf_says_what_to_install(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    async with receiving() as receiver:
        code, err, _ = await _run_exported(suite, receiver.url, "http/json", WITHOUT_PROTOBUF)
        assert code == 0, err
        assert receiver.requests >= 1
        sent = json.loads(receiver.bodies[-1])["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert [s["name"] for s in sent] == ["test one", "invoke_agent a", "agent-health run"]
        code, err, _ = await _run_exported(suite, receiver.url, "http/protobuf", WITHOUT_PROTOBUF)
    assert code == 2
    assert "needs the otel extra" in err
    assert "pip install 'agent-health[otel]'" in err
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/json" in err
