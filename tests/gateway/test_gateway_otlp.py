"""The gateway's OTLP receiver over real HTTP on 127.0.0.1: protobuf and JSON exports join the
run whose trace the controller's call carried; malformed, oversized and foreign ones do not."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agent_health import gateway
from agent_health.gateway import config, recorder
from agent_health.gateway import otlp as otlp_receiver
from agent_health.ledger import chain, filestore, records
from agent_health.ledger import otlp as ledger_otlp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from support.gateway_support import (
    CELL,
    CONTROLLER_TOKEN,
    KEY,
    RUN_ID,
    TOKENS,
    controller_route,
    read_cell,
    serving,
    settings,
    upstream_app,
)
from support.otlp_bodies import FakeSpan, agent_trace, json_body, protobuf, traceparent

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async with serving(upstream_app()) as url:
        yield url


def _gateway(ledger: Path, upstream: str, **fields: Any) -> gateway.Gateway:
    s = settings(controller_route(upstream), otlp_listen="127.0.0.1:0", **fields)
    caps = recorder.Caps(s.max_cell_exchanges, s.max_cell_bytes)
    record = gateway.Recorder(filestore.FileBackend(ledger), KEY, default_cell=CELL, caps=caps)
    return gateway.Gateway(s, tokens=config.Tokens(TOKENS), record=record)


async def _run(client: aiohttp.ClientSession, gw: gateway.Gateway, parent: str) -> None:
    """The controller's call of the target, carrying the run's traceparent."""
    headers = {config.TOKEN_HEADER: CONTROLLER_TOKEN, "traceparent": parent}
    async with client.post(gw.url("controller") + "/echo", headers=headers, data=b"{}") as r:
        assert r.status == 200


async def _export(
    client: aiohttp.ClientSession, gw: gateway.Gateway, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    assert gw.otlp_url is not None
    async with client.post(gw.otlp_url + "/v1/traces", data=body, headers=headers) as r:
        return r.status, await r.read()


async def _kept(client: aiohttp.ClientSession, gw: gateway.Gateway) -> dict[str, Any]:
    assert gw.admin_url is not None
    headers = {config.TOKEN_HEADER: CONTROLLER_TOKEN}
    async with client.get(f"{gw.admin_url}/otlp/spans?run_id={RUN_ID}", headers=headers) as r:
        assert r.status == 200
        answer: dict[str, Any] = await r.json()
        return answer


async def _health(client: aiohttp.ClientSession, gw: gateway.Gateway) -> dict[str, Any]:
    async with client.get(f"{gw.admin_url}/healthz") as r:
        answer: dict[str, Any] = await r.json()
        return answer["otlp"]


def _spans_records(ledger: Path) -> list[records.SpansRecord]:
    return [r for r in read_cell(ledger) if isinstance(r, records.SpansRecord)]


async def test_protobuf_spans_of_the_runs_trace_are_kept_served_and_sealed(
    tmp_path: Path, upstream: str
) -> None:
    parent, trace_id = traceparent()
    spans = agent_trace(trace_id, parent=parent.split("-")[2])
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        status, body = await _export(client, gw, protobuf(*spans), PROTOBUF)
        assert status == 200
        answer = trace_service_pb2.ExportTraceServiceResponse.FromString(body)
        assert answer.partial_success.rejected_spans == 0
        kept = await _kept(client, gw)
        assert (await _health(client, gw))["spans_kept"] == 3
    assert kept["trace_id"] == trace_id
    names = [s["name"] for s in kept["spans"]]
    assert names == ["invoke_agent rca", "chat gpt-4o-mini", "execute_tool search_logs"]
    chat = kept["spans"][1]
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == 120
    assert chat["parent_span_id"] == spans[0].span_id
    assert chat["service"] == "otel-agent"
    assert chat["start_ns"] == spans[1].start_ns
    sealed = _spans_records(tmp_path)
    assert len(sealed) == 1
    assert sealed[0].principal == "target"
    assert sealed[0].evidence == "none"
    assert sealed[0].run_id == RUN_ID
    assert sealed[0].trace_id == trace_id
    assert [s["span_id"] for s in sealed[0].spans] == [s.span_id for s in spans]
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=False).ok


async def test_json_spans_with_hex_ids_are_kept_like_protobuf(
    tmp_path: Path, upstream: str
) -> None:
    parent, trace_id = traceparent()
    spans = agent_trace(trace_id)
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        status, body = await _export(client, gw, json_body(*spans), JSON)
        assert status == 200
        assert json.loads(body) == {}
        kept = await _kept(client, gw)
    assert [s["span_id"] for s in kept["spans"]] == [s.span_id for s in spans]
    assert kept["spans"][1]["attributes"]["gen_ai.usage.output_tokens"] == 30
    assert kept["spans"][0]["status"] == "ok"
    assert _spans_records(tmp_path)[0].content_type == "application/json"


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("Deflate", _raw_deflate)],
)
async def test_a_gzipped_or_deflated_export_is_inflated(
    tmp_path: Path, upstream: str, encoding: str, pack: Callable[[bytes], bytes]
) -> None:
    parent, trace_id = traceparent()
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        headers = {**PROTOBUF, "Content-Encoding": encoding}
        status, _ = await _export(client, gw, pack(protobuf(*agent_trace(trace_id))), headers)
        assert status == 200
        assert len((await _kept(client, gw))["spans"]) == 3
        cut = gzip.compress(json_body(*agent_trace(trace_id)))[:-12]
        status, answer = await _export(client, gw, cut, {**JSON, "Content-Encoding": "gzip"})
        assert (status, json.loads(answer)["message"]) == (
            400,
            "the gzip body is corrupt: the gzip stream ends before its end",
        )


def _with_start(start: str) -> bytes:
    """One span (of no run) whose start time is ``start``, JSON text (a number or a string)."""
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "x", "startTimeUnixNano": 0}
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    return text.replace('"startTimeUnixNano": 0', f'"startTimeUnixNano": {start}').encode()


def _with_attribute(value: str) -> bytes:
    """One span (of no run) with one attribute whose AnyValue is ``value``, JSON text."""
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "x",
            "attributes": [{"key": "v", "value": "VALUE"}]}  # fmt: skip
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    return text.replace('"VALUE"', value).encode()


def _kvlists(levels: int) -> str:
    """An AnyValue nested ``levels`` deep through key-value lists only (no arrays)."""
    head = '{"kvlistValue": {"values": [{"key": "k", "value": '
    return head * levels + '{"stringValue": "bottom"}' + "}]}}" * levels


@pytest.mark.parametrize(
    ("body", "headers", "says"),
    [
        (b"\xff\xfe not protobuf \x00\x01", PROTOBUF, "not a protobuf"),
        (b'{"resourceSpans": [', JSON, "not JSON"),
        (b'{"resourceSpans": {"a": 1}}', JSON, "is not a list"),
        (b"\x1f\x8b broken gzip", {**JSON, "Content-Encoding": "gzip"}, "corrupt"),
        # Hostile ones: each was a 500 nobody counted (a RecursionError, int()'s digit limit).
        (b'{"resourceSpans": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", JSON, "nested deeper"),
        (_with_start('"' + "9" * 5000 + '"'), JSON, "an integer of 5000 digits"),
        (_with_start("9" * 5000), JSON, "5000 digits"),
        (_with_attribute('{"intValue": "' + "9" * 5000 + '"}'), JSON, "an integer of 5000 digits"),
        (_with_attribute(_kvlists(2000)), JSON, "nested deeper"),  # past the JSON's depth
        (_with_attribute(_kvlists(9)), JSON, "nested more than 8 deep"),  # within it
    ],
)
async def test_malformed_exports_are_refused_400_and_counted_and_the_gateway_serves_on(
    tmp_path: Path, upstream: str, body: bytes, headers: dict[str, str], says: str
) -> None:
    parent, trace_id = traceparent()
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        status, answer = await _export(client, gw, body, headers)
        assert status == 400
        assert says in json.loads(answer)["message"]
        health = await _health(client, gw)
        assert health["refused"] == {"400": 1}
        assert says in health["last_refusal"]
        # Still serving: a good export after the bad one is kept.
        status, _ = await _export(client, gw, json_body(*agent_trace(trace_id)), JSON)
        assert status == 200
        assert len((await _kept(client, gw))["spans"]) == 3


@pytest.mark.parametrize("encoding", ["br", "zstd", "x-unknown", "gzip, gzip"])
async def test_an_encoding_it_does_not_inflate_is_refused_415_not_read_as_plain(
    tmp_path: Path, upstream: str, encoding: str
) -> None:
    """An export whose Content-Encoding the receiver does not inflate is never read as if it
    had none (a plain body so labelled was kept)."""
    parent, trace_id = traceparent()
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        headers = {**JSON, "Content-Encoding": encoding}
        status, answer = await _export(client, gw, json_body(*agent_trace(trace_id)), headers)
        assert status == 415
        assert "send gzip, deflate or none" in json.loads(answer)["message"]
        assert (await _health(client, gw))["refused"] == {"415": 1}
        assert (await _kept(client, gw))["spans"] == []
        headers["Content-Encoding"] = "identity"
        status, _ = await _export(client, gw, json_body(*agent_trace(trace_id)), headers)
        assert status == 200
        assert len((await _kept(client, gw))["spans"]) == 3


async def test_spans_that_fail_their_checks_are_left_out_counted_and_named_in_the_answer(
    tmp_path: Path, upstream: str
) -> None:
    """A hostile agent's spans (a start time of 400 digits, Infinity, a negative token count,
    a bad id) never reach its run, its ledger or its trajectory; the rest of the export does."""
    parent, trace_id = traceparent()
    good = agent_trace(trace_id)
    hostile = [
        FakeSpan("chat inf", trace_id, attributes={"gen_ai.operation.name": "chat",
                                                   "cost": float("inf")}),
        FakeSpan("chat negative", trace_id, attributes={"gen_ai.operation.name": "chat",
                                                        "gen_ai.usage.input_tokens": -10**6}),
        FakeSpan("backwards", trace_id, start_ns=2_000, end_ns=1_000),
    ]  # fmt: skip
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        status, answer = await _export(client, gw, protobuf(*good, *hostile), PROTOBUF)
        assert status == 200
        partial = trace_service_pb2.ExportTraceServiceResponse.FromString(answer).partial_success
        assert partial.rejected_spans == 3
        assert "3 invalid spans (the first: span 'chat inf'.cost.doubleValue inf" in (
            partial.error_message
        )
        as_json = json.loads(json_body(*good))
        spans = as_json["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans.append({**spans[1], "spanId": "ef" * 8, "startTimeUnixNano": "9" * 400})
        spans.append({**spans[1], "spanId": "0" * 16})
        status, answer = await _export(client, gw, json.dumps(as_json).encode(), JSON)
        assert status == 200
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "2"
        kept = await _kept(client, gw)
        health = await _health(client, gw)
    assert [s["name"] for s in kept["spans"]] == [s.name for s in good] * 2
    assert health["spans_invalid"] == 5
    assert "startTimeUnixNano '999" in health["last_invalid"]
    assert health["refused"] == {}
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=False).ok
    assert [len(r.spans) for r in _spans_records(tmp_path)] == [3, 3]


async def test_other_media_types_paths_and_methods_are_refused_and_counted(
    tmp_path: Path, upstream: str
) -> None:
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        assert gw.otlp_url is not None
        status, _ = await _export(client, gw, b"x", {"Content-Type": "text/plain"})
        assert status == 415
        async with client.post(gw.otlp_url + "/v1/metrics", data=b"{}", headers=JSON) as r:
            assert r.status == 404
        async with client.get(gw.otlp_url + "/v1/traces") as r:
            assert r.status == 405
        assert (await _health(client, gw))["refused"] == {"404": 1, "405": 1, "415": 1}


async def test_an_oversized_export_is_refused_413_unread_and_a_gzip_bomb_too(
    tmp_path: Path, upstream: str
) -> None:
    parent, _trace_id = traceparent()
    async with (
        _gateway(tmp_path, upstream, otlp_max_bytes=64 * 1024) as gw,
        aiohttp.ClientSession() as client,
    ):
        await _run(client, gw, parent)
        status, answer = await _export(client, gw, b"{" + b" " * 200_000 + b"}", JSON)
        assert status == 413
        assert b"more than 65536 bytes" in answer
        bomb = gzip.compress(b"{" + b" " * 10_000_000 + b"}")
        assert len(bomb) < 64 * 1024
        status, answer = await _export(client, gw, bomb, {**JSON, "Content-Encoding": "gzip"})
        assert status == 413
        assert b"more than 65536 bytes once inflated" in answer
        assert (await _health(client, gw))["refused"] == {"413": 2}
        assert (await _kept(client, gw))["spans"] == []
    assert _spans_records(tmp_path) == []


async def test_spans_of_another_runs_trace_are_rejected_not_attached(
    tmp_path: Path, upstream: str
) -> None:
    parent, trace_id = traceparent()
    _, other_trace = traceparent()
    mine = agent_trace(trace_id)
    claims_other_run = FakeSpan(
        "chat",
        trace_id,
        attributes={"agent_health.run_id": "someone-else", "gen_ai.usage.input_tokens": 9},
    )
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        body = protobuf(*mine, *agent_trace(other_trace), claims_other_run)
        status, answer = await _export(client, gw, body, PROTOBUF)
        assert status == 200
        partial = trace_service_pb2.ExportTraceServiceResponse.FromString(answer).partial_success
        assert partial.rejected_spans == 4
        assert "no run here was sent" in partial.error_message
        kept = await _kept(client, gw)
        health = await _health(client, gw)
        # Only another run's trace: nothing of it is kept, the answer says so.
        status, answer = await _export(client, gw, json_body(*agent_trace(other_trace)), JSON)
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "3"
    assert [s["span_id"] for s in kept["spans"]] == [s.span_id for s in mine]
    assert kept["rejected"] == 1  # the span in this run's trace that named another run
    assert health["spans_rejected"] == 4
    sealed = _spans_records(tmp_path)
    assert len(sealed) == 1
    assert sealed[0].rejected == 1
    assert all(s["trace_id"] == trace_id for s in sealed[0].spans)


async def test_a_trace_id_only_the_target_named_joins_no_run(tmp_path: Path, upstream: str) -> None:
    """A call without the controller's token names no trace: the target cannot adopt one."""
    parent, trace_id = traceparent()
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        async with client.post(
            gw.url("controller") + "/echo", headers={"traceparent": parent}, data=b"{}"
        ) as r:
            assert r.status == 200
        status, answer = await _export(client, gw, json_body(*agent_trace(trace_id)), JSON)
        assert status == 200
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "3"
        assert (await _kept(client, gw))["spans"] == []


async def test_a_run_keeps_at_most_its_cap_of_spans_and_counts_the_rest(
    tmp_path: Path, upstream: str
) -> None:
    parent, trace_id = traceparent()
    async with (
        _gateway(tmp_path, upstream, otlp_max_spans=2) as gw,
        aiohttp.ClientSession() as client,
    ):
        await _run(client, gw, parent)
        _, answer = await _export(client, gw, json_body(*agent_trace(trace_id)), JSON)
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "1"
        _, answer = await _export(client, gw, json_body(*agent_trace(trace_id)), JSON)
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "3"
        kept = await _kept(client, gw)
        assert (await _health(client, gw))["spans_dropped"] == 4
    assert len(kept["spans"]) == 2
    assert kept["dropped"] == 4
    assert [r.dropped for r in _spans_records(tmp_path)] == [1, 3]


async def test_only_the_controller_reads_the_runs_spans(tmp_path: Path, upstream: str) -> None:
    async with (
        _gateway(tmp_path, upstream) as gw,
        aiohttp.ClientSession() as client,
        client.get(f"{gw.admin_url}/otlp/spans?run_id={RUN_ID}") as r,
    ):
        assert r.status == 403


async def test_without_otlp_listen_there_is_no_receiver(tmp_path: Path, upstream: str) -> None:
    s = settings(controller_route(upstream))
    record = gateway.Recorder(filestore.FileBackend(tmp_path), KEY, default_cell=CELL)
    async with gateway.Gateway(s, tokens=config.Tokens(TOKENS), record=record) as gw:
        assert gw.otlp_url is None
        async with aiohttp.ClientSession() as client:
            headers = {config.TOKEN_HEADER: CONTROLLER_TOKEN}
            async with client.get(f"{gw.admin_url}/otlp/spans", headers=headers) as r:
                assert r.status == 409
                health = await (await client.get(f"{gw.admin_url}/healthz")).json()
    assert "otlp" not in health


async def test_an_export_while_four_are_being_read_is_answered_503_to_retry(
    tmp_path: Path, upstream: str
) -> None:
    """The target cannot hold the gateway's memory with many slow bodies: four at a time."""
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        assert gw.otlp_url is not None
        host, port = gw.otlp_url.removeprefix("http://").split(":")
        slow = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection(host, int(port))
            head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            writer.write(f"{head}Content-Length: 1000\r\n\r\n{{".encode())
            await writer.drain()
            slow.append((reader, writer))
        await _until(client, gw, lambda reading: reading == 4)
        status, answer = await _export(client, gw, b"{}", JSON)
        assert status == 503
        assert b"4 exports are being read" in answer
        for _, writer in slow:
            writer.close()
        await _until(client, gw, lambda reading: reading == 0)
        status, _ = await _export(client, gw, b"{}", JSON)
        assert status == 200
        assert (await _health(client, gw))["refused"]["503"] == 1


async def _until(
    client: aiohttp.ClientSession, gw: gateway.Gateway, ok: Callable[[int], bool]
) -> None:
    """Until ``ok`` holds for the exports being read (pytest's timeout bounds it)."""
    for _ in itertools.count():
        if ok((await _health(client, gw))["reading"]):
            return
        await asyncio.sleep(0.01)


def test_a_run_takes_spans_from_at_most_its_bytes_of_exports() -> None:
    _, trace_id = traceparent()
    body = json_body(*agent_trace(trace_id))
    cap = len(body) + 100
    collector = otlp_receiver.Collector(otlp_receiver.Limits(max_run_bytes=cap))
    collector.expect(RUN_ID, trace_id)
    spans = ledger_otlp.decode(body, ledger_otlp.JSON).spans
    args = {"principal": "target", "evidence": "none", "content_type": ledger_otlp.JSON}
    assert collector.receive(spans, body=body, **args) == (0, "")
    rejected, why = collector.receive(spans, body=body, **args)
    assert rejected == 3
    assert f"past the run's cap of {cap} bytes of exports" in why
    assert len(collector.spans(RUN_ID)) == 3
    assert collector.report(RUN_ID)["dropped"] == 3


async def test_spans_after_the_cell_ended_are_counted_not_written_after_its_end(
    tmp_path: Path, upstream: str
) -> None:
    """A batching exporter sends late: the cell stays whole and the gateway healthy."""
    parent, trace_id = traceparent()
    mine = {config.TOKEN_HEADER: CONTROLLER_TOKEN}
    async with _gateway(tmp_path, upstream) as gw, aiohttp.ClientSession() as client:
        await _run(client, gw, parent)
        status, _ = await _export(client, gw, json_body(*agent_trace(trace_id)[:1]), JSON)
        assert status == 200
        end = [{"kind": "cell-end", "status": "passed"}]
        async with client.post(f"{gw.admin_url}/ledger/records", json=end, headers=mine) as r:
            assert r.status == 200
        status, _ = await _export(client, gw, json_body(*agent_trace(trace_id)[1:]), JSON)
        assert status == 200
        async with client.get(f"{gw.admin_url}/healthz") as r:
            health = await r.json()
            assert r.status == 200, health
    assert health["spans_after_cell_end"] == 2
    assert health["ledger_failures"] == []
    kinds = [r.kind for r in read_cell(tmp_path)]
    assert kinds == ["cell-meta", "exchange", "spans", "cell-end"]
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=True).ok


def test_the_receiver_holds_the_spans_of_its_last_runs_only() -> None:
    collector = otlp_receiver.Collector()
    traces = [traceparent()[1] for _ in range(otlp_receiver.MAX_RUNS + 1)]
    for n, trace_id in enumerate(traces):
        collector.expect(f"run-{n}", trace_id)
    args = {"principal": "target", "evidence": "none", "content_type": ledger_otlp.JSON}
    for trace_id, kept in ((traces[0], 0), (traces[-1], 3)):
        body = json_body(*agent_trace(trace_id))
        rejected, _ = collector.receive(
            ledger_otlp.decode(body, ledger_otlp.JSON).spans, body=body, **args
        )
        assert rejected == 3 - kept
    assert collector.report("run-0")["spans"] == []
    assert len(collector.spans(f"run-{otlp_receiver.MAX_RUNS}")) == 3


async def test_spans_take_at_most_half_a_cells_byte_cap_and_never_mark_it_incomplete(
    tmp_path: Path, upstream: str
) -> None:
    """A target flooding spans cannot crowd out the exchanges or get its cell graded infra."""
    parent, trace_id = traceparent()
    big = FakeSpan("chat", trace_id, attributes={"note": "x" * 1500})
    async with (
        _gateway(tmp_path, upstream, max_cell_bytes=8192) as gw,
        aiohttp.ClientSession() as client,
    ):
        await _run(client, gw, parent)
        for _ in range(6):
            status, _ = await _export(client, gw, json_body(big), JSON)
            assert status == 200
            assert gw.recorder is not None
            await gw.recorder.flush(CELL)
        await _run(client, gw, parent)  # an exchange after the flood is still recorded
        async with client.get(f"{gw.admin_url}/healthz") as r:
            health = await r.json()
    sealed = _spans_records(tmp_path)
    assert 1 <= len(sealed) < 6
    assert health["spans_past_cell_cap"] == 6 - len(sealed)
    lines = (tmp_path / f"{CELL}.jsonl").read_text().splitlines()
    assert sum(len(line) for line in lines if '"kind":"spans"' in line) <= 8192 // 2
    assert health["exchanges_dropped"] == 0
    cell = read_cell(tmp_path)
    assert [r.kind for r in cell].count("exchange") == 2
    assert not any(isinstance(r, records.CellMeta) and r.dropped for r in cell)
