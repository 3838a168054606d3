"""The streaming proxy against real upstreams on loopback: what passes, what is recorded."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from agent_health import gateway
from agent_health.ledger import chain
from aiohttp import web
from support.gateway_support import (
    CONTROLLER_TOKEN,
    HANG,
    HANG_ARRIVED,
    KEY,
    PEER_TOKEN,
    RUN_ID,
    SSE_DONE,
    SSE_RELEASE,
    completion_body,
    controller_route,
    exchanges,
    serving,
    through,
    upstream_app,
)
from yarl import URL

TOKEN = {gateway.TOKEN_HEADER: CONTROLLER_TOKEN}


@pytest.fixture
def app() -> web.Application:
    return upstream_app()


@pytest.fixture
async def upstream(app: web.Application) -> AsyncIterator[str]:
    async with serving(app) as url:
        yield url


async def test_the_example_agent_through_the_gateway(tmp_path: Path, triage_url: str) -> None:
    base = triage_url.rsplit("/", 1)[0]
    payload = {"prompt": "Diagnose the payment service", "context": [], "run_id": "r-7"}
    headers = {**TOKEN, gateway.RUN_ID_HEADER: "r-7"}
    async with through(tmp_path, controller_route(base)) as (gw, client):
        async with client.post(triage_url, json=payload) as direct:
            direct_body = await direct.json()
        async with client.post(gw.url("controller") + "/run", json=payload, headers=headers) as r:
            assert r.status == 200
            raw = await r.read()
    body = json.loads(raw)
    assert body["output"] == direct_body["output"]
    assert body["trajectory"][1]["tool_name"] == "search_logs"
    [record] = exchanges(tmp_path)
    sent = json.dumps(payload).encode()
    assert (record.principal, record.evidence) == ("controller", gateway.token_id(CONTROLLER_TOKEN))
    assert (record.upstream, record.method, record.path, record.status, record.run_id) == (
        "target",
        "POST",
        "/run",
        200,
        "r-7",
    )
    assert record.request_bytes == len(sent)
    assert record.request_sha256 == hashlib.sha256(sent).hexdigest()
    assert record.response_bytes == len(raw)
    assert record.response_sha256 == hashlib.sha256(raw).hexdigest()
    assert record.error is None
    assert record.started_at <= record.ended_at


async def test_a_peer_route_records_the_target_calling_the_peer(
    tmp_path: Path, upstream: str
) -> None:
    route = f"principal=target,to=peer:tools,listen=127.0.0.1:0,upstream={upstream}"
    async with (
        through(tmp_path, route) as (gw, client),
        client.get(gw.url("target", "peer:tools") + "/echo?q=1") as response,
    ):
        seen = await response.json()
    assert seen["query"] == "q=1"
    [record] = exchanges(tmp_path)
    assert (record.principal, record.upstream, record.evidence) == ("target", "peer:tools", "none")


@pytest.mark.parametrize("forged", [None, "a-guess", CONTROLLER_TOKEN])
async def test_a_call_to_a_peer_carries_the_peers_own_token_and_nothing_the_caller_claimed(
    tmp_path: Path, upstream: str, forged: str | None
) -> None:
    """The target shares the pod's loopback with its peers; a peer tells the gateway's calls
    from the target's direct ones by its own token, which only the gateway adds."""
    to_peer = f"principal=target,to=peer:tools,listen=127.0.0.1:0,upstream={upstream}"
    to_target = f"principal=peer:tools,to=target,listen=127.0.0.1:0,upstream={upstream}"
    headers = {gateway.VIA_HEADER: forged} if forged else {}
    async with through(tmp_path, to_peer, to_target) as (gw, client):
        async with client.get(gw.url("target", "peer:tools") + "/echo", headers=headers) as got:
            at_peer = (await got.json())["headers"]
        call = {**headers, gateway.TOKEN_HEADER: PEER_TOKEN}
        async with client.get(gw.url("peer:tools", "target") + "/echo", headers=call) as got:
            at_target = (await got.json())["headers"]
    assert at_peer[gateway.VIA_HEADER.lower()] == PEER_TOKEN
    # Nor does the target learn any token: not the peer's, not what a caller claimed.
    assert gateway.VIA_HEADER.lower() not in at_target
    assert PEER_TOKEN not in json.dumps(at_target)
    text = (tmp_path / "cell-1.jsonl").read_text()
    assert PEER_TOKEN not in text


async def test_headers_hop_by_hop_dropped_run_id_and_traceparent_forwarded(
    tmp_path: Path, upstream: str
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = {
        **TOKEN,
        "traceparent": traceparent,
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "drop me",
        "Proxy-Authorization": "Basic Zm9vOmJhcg==",
        "TE": "trailers",
        "X-Kept": "kept",
    }
    with_run = {**TOKEN, gateway.RUN_ID_HEADER: "mine"}
    async with through(tmp_path, controller_route(upstream + "/api")) as (gw, client):
        url = gw.url("controller")
        exact = URL(url + "/echo?a=%2F&b=2", encoded=True)
        async with client.get(exact, headers=headers) as response:
            seen = await response.json()
            assert response.headers["X-Upstream"] == "yes"
            assert response.headers.getall("Set-Cookie") == ["a=1", "b=2"]
            assert "Proxy-Authenticate" not in response.headers
            assert "Keep-Alive" not in response.headers
        async with client.get(url + "/echo", headers=with_run) as response:
            mine = await response.json()
    sent = seen["headers"]
    assert seen["path"] == "/api/echo"
    assert seen["query"] == "a=%2F&b=2"
    assert sent["traceparent"] == traceparent
    assert sent["x-kept"] == "kept"
    assert sent[gateway.RUN_ID_HEADER.lower()] == RUN_ID  # the cell's run id when absent
    for dropped in ("x-hop", "proxy-authorization", "te", gateway.TOKEN_HEADER.lower()):
        assert dropped not in sent, dropped
    assert mine["headers"][gateway.RUN_ID_HEADER.lower()] == "mine"


@pytest.mark.parametrize("code", [201, 404, 500, 503])
async def test_status_codes_and_bodies_pass_unchanged(
    tmp_path: Path, upstream: str, code: int
) -> None:
    async with (
        through(tmp_path, controller_route(upstream)) as (gw, client),
        client.get(gw.url("controller") + f"/status/{code}") as response,
    ):
        assert response.status == code
        assert response.headers["X-Code"] == str(code)
        assert await response.text() == f"status {code}"
    [record] = exchanges(tmp_path)
    assert record.status == code
    assert record.error is None


async def test_big_bodies_stream_both_ways(tmp_path: Path, upstream: str) -> None:
    upload = bytes(range(256)) * (48 * 1024)  # 12 MiB
    size = 9 * 1024 * 1024 + 17
    digest, total, chunks = hashlib.sha256(), 0, 0
    route = controller_route(upstream)
    async with through(tmp_path, route, usage_max_bytes=1024 * 1024) as (gw, client):
        async with client.post(gw.url("controller") + "/upload", data=upload) as response:
            seen = await response.json()
        async with client.get(gw.url("controller") + f"/big?n={size}") as response:
            async for chunk in response.content.iter_any():
                digest.update(chunk)
                total += len(chunk)
                chunks += 1
    assert seen["body_len"] == len(upload)
    assert seen["body_sha256"] == hashlib.sha256(upload).hexdigest()
    assert total == size
    assert chunks > 1
    posted, fetched = exchanges(tmp_path)
    assert posted.request_bytes == len(upload)
    assert posted.request_sha256 == hashlib.sha256(upload).hexdigest()
    assert fetched.response_bytes == size
    assert fetched.response_sha256 == digest.hexdigest()
    assert fetched.usage is None  # beyond usage_max_bytes: not kept, not parsed


@pytest.mark.timeout(60)
async def test_sse_first_event_arrives_before_the_upstream_finishes(
    tmp_path: Path, app: web.Application, upstream: str
) -> None:
    async with (
        through(tmp_path, controller_route(upstream)) as (gw, client),
        client.get(gw.url("controller") + "/sse", headers=TOKEN) as response,
    ):
        assert response.headers["Content-Type"] == "text/event-stream"
        first = await response.content.readuntil(b"\n\n")
        # The upstream cannot finish until we release it: a buffering proxy would
        # never have delivered this first event.
        assert b"first" in first
        assert not app[SSE_DONE].is_set()
        app[SSE_RELEASE].set()
        rest = await response.read()
    assert b"second" in rest
    assert rest.endswith(b"data: [DONE]\n\n")
    [record] = exchanges(tmp_path)
    assert record.response_bytes == len(first) + len(rest)
    assert record.usage is not None
    assert (record.usage.input_tokens, record.usage.output_tokens) == (11, 7)
    assert record.usage.model == "m1"


@pytest.mark.parametrize("compressed", [False, True])
async def test_token_usage_of_a_completion_is_recorded(
    tmp_path: Path, upstream: str, compressed: bool
) -> None:
    route = f"principal=controller,to=judge,listen=127.0.0.1:0,upstream={upstream}"
    async with through(tmp_path, route) as (gw, client):
        url = gw.url("controller", "judge") + "/v1/chat/completions"
        url += "?gzip=1" if compressed else ""
        async with client.post(url, json={"messages": []}, headers=TOKEN) as response:
            assert await response.read() == completion_body()
    [record] = exchanges(tmp_path)
    assert record.upstream == "judge"
    assert record.usage is not None
    assert (record.usage.input_tokens, record.usage.output_tokens) == (5, 3)
    assert record.usage.total_tokens == 8


async def test_a_down_upstream_is_a_502_with_the_reason_and_a_recorded_error(
    tmp_path: Path,
) -> None:
    async with through(tmp_path, controller_route("http://127.0.0.1:9")) as (gw, client):
        url = gw.url("controller") + "/run"
        async with client.post(url, data=b"hello", headers=TOKEN) as response:
            assert response.status == 502
            body = await response.json()
    assert body["error"] == "bad gateway"
    assert body["upstream"] == "target"
    assert "cannot reach target" in body["reason"]
    [record] = exchanges(tmp_path)
    assert record.status is None
    assert record.response_sha256 is None
    assert "cannot reach target" in (record.error or "")
    assert record.request_sha256 == hashlib.sha256(b"hello").hexdigest()


async def test_an_idle_upstream_times_out_with_504(
    tmp_path: Path, app: web.Application, upstream: str
) -> None:
    route = controller_route(upstream)
    async with through(tmp_path, route, idle_timeout=0.2) as (gw, client):
        async with client.get(gw.url("controller") + "/hang") as response:
            assert response.status == 504
            assert "timed out" in (await response.json())["reason"]
        assert app[HANG_ARRIVED].is_set()
        app[HANG].set()
    [record] = exchanges(tmp_path)
    assert "timed out" in (record.error or "")


async def test_an_upstream_that_breaks_off_cuts_the_caller_and_is_recorded(
    tmp_path: Path, upstream: str
) -> None:
    async with (
        through(tmp_path, controller_route(upstream)) as (gw, client),
        client.get(gw.url("controller") + "/broken") as response,
    ):
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    [record] = exchanges(tmp_path)
    assert record.status == 200
    assert "broke off the response" in (record.error or "")


@pytest.mark.parametrize(
    ("presented", "principal", "evidence"),
    [
        (CONTROLLER_TOKEN, "controller", gateway.token_id(CONTROLLER_TOKEN)),
        (PEER_TOKEN, "peer:tools", gateway.token_id(PEER_TOKEN)),
        ("not-a-token", "target", "invalid-token"),
        (None, "target", "none"),
    ],
)
async def test_tokens_decide_the_principal_and_never_reach_the_ledger(
    tmp_path: Path, upstream: str, presented: str | None, principal: str, evidence: str
) -> None:
    headers = {gateway.TOKEN_HEADER: presented} if presented else {}
    async with (
        through(tmp_path, controller_route(upstream)) as (gw, client),
        client.get(gw.url("controller") + "/echo", headers=headers) as response,
    ):
        seen = await response.json()
    assert gateway.TOKEN_HEADER.lower() not in seen["headers"]
    [record] = exchanges(tmp_path)
    assert (record.principal, record.evidence) == (principal, evidence)
    text = (tmp_path / "cell-1.jsonl").read_text()
    for token in (CONTROLLER_TOKEN, PEER_TOKEN, "not-a-token"):
        assert token not in text
    assert chain.verify(text.splitlines(), KEY, complete=False).ok


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encoding", ["gzip", "br", "x-unknown"])
async def test_an_encoded_request_body_passes_as_sent_and_is_hashed_as_sent(
    tmp_path: Path, encoding: str
) -> None:
    # The gateway is a proxy: it neither inflates a request body nor refuses an encoding it
    # does not know. The upstream gets the bytes the caller sent, labelled as the caller
    # labelled them, and the record's hash is of those bytes.
    payload = gzip.compress(b'{"prompt": "hello"}') if encoding == "gzip" else b"\x0b\x07\x80ab"
    seen: dict[str, object] = {}

    async def raw(request: web.Request) -> web.Response:
        seen["encoding"] = request.headers.get("Content-Encoding")
        seen["body"] = await request.read()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/run", raw)
    runner = web.AppRunner(app, shutdown_timeout=1, auto_decompress=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        upstream_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        headers = {**TOKEN, "Content-Encoding": encoding, "Content-Type": "application/json"}
        async with (
            through(tmp_path, controller_route(upstream_url)) as (gw, client),
            client.post(gw.url("controller") + "/run", data=payload, headers=headers) as r,
        ):
            assert r.status == 200, await r.text()
    finally:
        await runner.cleanup()
    assert seen == {"encoding": encoding, "body": payload}
    [record] = exchanges(tmp_path)
    assert record.request_bytes == len(payload)
    assert record.request_sha256 == hashlib.sha256(payload).hexdigest()
