"""The gateway reads MCP on a route to a peer declared protocol=mcp: every tools/call,
tools/list, resources/read and prompts/get is sealed as an ``mcp`` record — honest traffic
and hostile traffic alike, never a traceback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types
import pydantic
import pytest
from agent_health.gateway import config, errors, recorder
from agent_health.ledger import chain, records
from hypothesis import given, settings
from hypothesis import strategies as st
from support import mcp_support
from support.gateway_support import CONTROLLER_TOKEN, KEY, RUN_ID, exchanges, read_cell, through

PEER = "peer:tools"


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    from support.gateway_support import serving

    async with serving(mcp_support.app()) as url:
        yield url


def mcp_route(upstream: str, protocol: str = "mcp") -> str:
    return f"principal=target,to={PEER},listen=127.0.0.1:0,upstream={upstream},protocol={protocol}"


def calls(ledger: Path) -> list[records.McpRecord]:
    """The MCP calls on record, whether in their exchange's record or alone."""
    return [r for r in records.unfold(read_cell(ledger)) if isinstance(r, records.McpRecord)]


async def post(
    client: aiohttp.ClientSession, url: str, body: Any, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    heads = {**mcp_support.ACCEPT, "Content-Type": "application/json", **headers}
    async with client.post(url, data=data, headers=heads) as response:
        return response.status, dict(response.headers), await response.read()


async def test_each_call_is_sealed_with_its_server_tool_arguments_result_and_session(
    tmp_path: Path, upstream: str
) -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/mcp"
        status, headers, _ = await post(client, url, init)
        session = headers["Mcp-Session-Id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await post(client, url, note, **{"Mcp-Session-Id": session}))[0] == 202
        sid = {"Mcp-Session-Id": session}
        await post(client, url, mcp_support.call(1, "echo", city="Oslo"), **sid)
        await post(client, url, {"jsonrpc": "2.0", "id": "l", "method": "tools/list"}, **sid)
        read = {"uri": "file:///notes.txt"}
        await post(client, url, {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                 "params": read}, **sid)  # fmt: skip
        prompt = {"name": "greet", "arguments": {"who": "you"}}
        await post(client, url, {"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
                                 "params": prompt}, **sid)  # fmt: skip
    assert status == 200
    lines = (tmp_path / "cell-1.jsonl").read_text().splitlines()
    assert chain.verify(lines, KEY, complete=False).ok
    recorded = calls(tmp_path)
    assert [(c.method, c.name) for c in recorded] == [
        ("tools/call", "echo"),
        ("tools/list", None),
        ("resources/read", "file:///notes.txt"),
        ("prompts/get", "greet"),
    ]
    echo = recorded[0]
    assert (echo.principal, echo.evidence, echo.server) == ("target", "none", PEER)
    assert echo.id == 1
    assert echo.arguments == {"city": "Oslo"}
    assert echo.result == {"content": [{"type": "text", "text": '{"city": "Oslo"}'}]}
    assert echo.is_error is False
    assert echo.session == session
    assert echo.problem is None
    assert echo.version == 5  # read out of its exchange's record
    assert recorded[1].result == {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    assert recorded[3].arguments == {"who": "you"}
    # initialize and the notification are exchanges, not calls; each call rides in the one
    # sealed record of the exchange that carried it (version 5), none is a record alone.
    cell = read_cell(tmp_path)
    assert [r.kind for r in cell].count("exchange") == 6
    assert "mcp" not in [r.kind for r in cell]
    carried = [r for r in cell if isinstance(r, records.Exchange) and r.mcp is not None]
    assert [(r.version, [c.name for c in r.mcp or ()]) for r in carried] == [
        (5, ["echo"]),
        (5, [None]),
        (5, ["file:///notes.txt"]),
        (5, ["greet"]),
    ]
    assert [c.seq for c in recorded] == [r.seq for r in carried]


async def test_sse_answers_and_batches_are_matched_by_id(tmp_path: Path, upstream: str) -> None:
    batch = [mcp_support.call(7, "echo", n=1), mcp_support.call("b", "fail")]
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        status, headers, body = await post(client, gw.url("target", PEER) + "/mcp?sse=1", batch)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert b"notifications/message" in body  # the stream passed unchanged
    first, second = calls(tmp_path)
    assert (first.id, first.name, first.is_error) == (7, "echo", False)
    assert first.result is not None
    assert (second.id, second.name, second.is_error) == ("b", "fail", True)


async def test_is_error_and_json_rpc_errors_are_recorded_as_the_server_said(
    tmp_path: Path, upstream: str
) -> None:
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/mcp"
        for n, name in enumerate(("fail", "liar", "missing")):
            await post(client, url, mcp_support.call(n, name))
    fail, liar, missing = calls(tmp_path)
    assert fail.is_error is True
    assert liar.is_error is True  # a server that says its success failed is taken at its word
    assert liar.result == {
        "content": [{"type": "text", "text": "all done, 3 rows"}],
        "isError": True,
    }
    assert missing.is_error is None
    assert missing.error == {"code": -32602, "message": "Unknown tool: missing"}


async def test_a_plain_route_to_the_same_server_records_no_calls(
    tmp_path: Path, upstream: str
) -> None:
    async with through(tmp_path, mcp_route(upstream, "http")) as (gw, client):
        await post(client, gw.url("target", PEER) + "/mcp", mcp_support.call(1, "echo"))
    assert calls(tmp_path) == []
    assert [r.kind for r in read_cell(tmp_path)] == ["cell-meta", "exchange"]


async def test_malformed_json_rpc_is_recorded_with_what_is_wrong(
    tmp_path: Path, upstream: str
) -> None:
    no_name = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}}
    old = {"jsonrpc": "1.0", "id": 4, "method": "tools/call", "params": {"name": "echo"}}
    float_id = {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER)
        for body in (b"{not json", b"[]", no_name, old, float_id, b'{"a": NaN}'):
            await post(client, url + "/mcp", body)
        await post(client, url + "/garbage", mcp_support.call(9, "echo"))
    recorded = calls(tmp_path)
    problems = [(c.method, c.name, c.problem) for c in recorded]
    assert problems[0][2] is not None
    assert problems[0][2].startswith("the request is not JSON")
    assert problems[1] == ("", None, "the request is an empty batch")
    assert problems[2][:2] == ("tools/call", None)
    assert problems[2][2] == "params: name: Field required"
    assert problems[3][0] == "tools/call"
    assert "not a JSON-RPC 2.0 message" in (problems[3][2] or "")
    assert problems[4][0] == "tools/list"
    assert "NaN" in (problems[5][2] or "")
    assert problems[6][1] == "echo"
    assert (problems[6][2] or "").startswith("the answer is not JSON")
    assert all(c.is_error is None for c in recorded)


async def test_colliding_ids_never_take_each_others_answers(tmp_path: Path, upstream: str) -> None:
    twice = [mcp_support.call(1, "echo", a=1), mcp_support.call(1, "echo", a=2)]
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER)
        await post(client, url + "/mcp", twice)
        # Another exchange using the same id at the same time: answered on its own.
        await asyncio.gather(
            post(client, url + "/mcp", mcp_support.call(5, "echo", who="a")),
            post(client, url + "/mcp", mcp_support.call(5, "echo", who="b")),
        )
        await post(
            client, url + "/collide", [mcp_support.call(1, "echo"), mcp_support.call(2, "x")]
        )
    recorded = calls(tmp_path)
    first, second = recorded[:2]
    assert first.arguments == {"a": 1}
    assert second.arguments == {"a": 2}
    assert first.result is not None
    assert second.result is not None
    assert first.problem == second.problem == "id 1 is used twice in one request"
    concurrent = sorted((c.arguments or {})["who"] for c in recorded[2:4])
    assert concurrent == ["a", "b"]
    for c in recorded[2:4]:
        assert json.loads(c.result["content"][0]["text"]) == c.arguments  # type: ignore[index]
    one, two = recorded[4:]
    assert (one.id, one.result is not None) == (1, True)
    assert (two.id, two.result, two.problem) == (
        2,
        None,
        "no answer to it came back in the exchange",
    )


async def test_a_100_mb_result_passes_whole_and_is_recorded_unread(
    tmp_path: Path, upstream: str
) -> None:
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        status, _, body = await post(
            client, gw.url("target", PEER) + "/huge?mb=100", mcp_support.call(1, "dump")
        )
    assert status == 200
    assert len(body) > 100 * 1024 * 1024
    [record] = calls(tmp_path)
    assert record.name == "dump"
    assert record.result is None
    assert record.is_error is None
    assert record.result_bytes == len(body)
    assert record.problem == (
        f"the answer ({len(body)} bytes) is larger than the gateway reads "
        "(--mcp-max-bytes 1048576): not read"
    )
    [exchange] = [r for r in read_cell(tmp_path) if isinstance(r, records.Exchange)]
    assert exchange.response_bytes == len(body)


async def test_a_result_past_the_keep_bound_is_cut_but_its_is_error_read(
    tmp_path: Path, upstream: str
) -> None:
    async with through(tmp_path, mcp_route(upstream), mcp_keep_bytes=1024) as (gw, client):
        await post(client, gw.url("target", PEER) + "/huge?mb=0.01", mcp_support.call(1, "dump"))
    [record] = calls(tmp_path)
    assert (record.result, record.result_cut, record.is_error) == (None, True, False)
    assert record.result_bytes > 10 * 1024


async def test_a_call_answered_on_an_endless_stream_is_on_record_while_it_streams(
    tmp_path: Path, upstream: str
) -> None:
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/endless"
        data = json.dumps(mcp_support.call(1, "echo", q="x")).encode()
        async with client.post(url, data=data, headers=mcp_support.ACCEPT) as response:
            read = 0
            while read < 4 * 1024 * 1024:  # well past anything the gateway would hold
                read += len(await response.content.read(65536))
            assert gw.recorder is not None
            await gw.recorder.flush("cell-1", wait=0)
            [record] = calls(tmp_path)
            assert (record.name, record.is_error) == ("echo", False)
            assert record.arguments == {"q": "x"}
            # Its exchange has not ended: the call is on record alone, as version 4 wrote it.
            assert record.version == 4
        await post(client, gw.url("target", PEER) + "/mcp", mcp_support.call(2, "echo", q="y"))
    # On record once, however its exchange ended; a call whose exchange ended is carried by it.
    assert [(c.version, c.arguments) for c in calls(tmp_path)] == [(4, {"q": "x"}), (5, {"q": "y"})]
    endless, plain = exchanges(tmp_path)
    assert (endless.path, endless.mcp, endless.version) == ("/endless", None, 1)
    assert [c.arguments for c in plain.mcp or ()] == [{"q": "y"}]


def test_protocol_mcp_is_for_a_route_to_a_peer() -> None:
    with pytest.raises(errors.GatewayConfigError, match="only a route to a peer"):
        config.parse_route("principal=controller,listen=127.0.0.1:0,upstream=http://x,protocol=mcp")
    with pytest.raises(errors.GatewayConfigError, match="protocol"):
        config.parse_route(f"principal=target,to={PEER},listen=127.0.0.1:0,upstream=http://x,"
                           "protocol=grpc")  # fmt: skip


BLOCKS: list[Any] = [
    {"type": "text", "text": "ok"},
    {"text": "a text block may leave its type out"},
    {"type": "image", "data": "aGk=", "mimeType": "image/png"},
    {"data": "aGk=", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
    {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "a"}},
    {"type": "text"},  # no text
    {"type": "image", "text": "an image that is text"},
    {"type": "video", "text": "no such type"},
    {"type": 7, "text": "a type that is no string"},
    "a block that is no object",
    None,
]


@pytest.mark.parametrize("block", BLOCKS, ids=repr)
def test_a_tool_answer_reads_as_the_sdks_own_types_read_it(block: Any) -> None:
    """The reader takes a tools/call answer's content blocks in order (the first member of
    the SDK's union that reads a block wins) instead of the SDK's smart union: the same blocks
    read, and the same refused, each with or without a fellow block that reads."""
    from agent_health.gateway import mcpwire

    for content in ([block], [{"type": "text", "text": "first"}, block]):
        result = {"content": content, "isError": True}
        try:
            mcp_types.CallToolResult.model_validate(result)
        except pydantic.ValidationError:
            sdk_reads = False
        else:
            sdk_reads = True
        seen: list[dict[str, Any]] = []
        caller = mcpwire.Caller("target", "none", PEER, "run")
        reader = mcpwire.Reader(caller, mcpwire.Limits(), seen.append)
        reader.request(json.dumps(mcp_support.call(1, "echo")).encode())
        reader.answer(200, "application/json", None)
        reader.response(json.dumps({"jsonrpc": "2.0", "id": 1, "result": result}).encode())
        reader.finish(None)
        [record] = seen
        records.parse_object(record)  # a valid mcp record either way
        assert (record["problem"] is None) == sdk_reads, (content, record["problem"])
        assert record["is_error"] is True  # read whether or not the blocks are
        assert record["result"] == result


async def test_the_controller_reads_the_targets_calls_to_peers_and_no_one_else_does(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the cell's controller holds its test's claims to and explains it with: the
    target's calls to peers on record (MCP calls without their results; what a server listed,
    by name), on the admin listener, with the controller's token alone."""
    from agent_health.gateway import recorder

    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/mcp"
        await post(client, url, mcp_support.call(1, "fail", why="disk"))
        await post(client, url, {"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
        asked = f"{gw.admin_url}/peers/calls?run_id={RUN_ID}"
        async with client.get(asked) as r:  # no token: the target's
            assert r.status == 403
        async with client.get(asked, headers={config.TOKEN_HEADER: CONTROLLER_TOKEN}) as r:
            assert r.status == 200
            seen = await r.json()
        monkeypatch.setattr(recorder, "SEEN_CALLS", 4)
        await post(client, url, mcp_support.call(2, "echo"))  # its exchange is the fifth
        async with client.get(asked, headers={config.TOKEN_HEADER: CONTROLLER_TOKEN}) as r:
            later = await r.json()
    assert seen["partial"] is False
    kinds = [(c["kind"], c.get("method"), c.get("name")) for c in seen["calls"]]
    assert kinds == [
        ("mcp", "tools/call", "fail"),
        ("exchange", None, None),
        ("mcp", "tools/list", None),
        ("exchange", None, None),
    ]
    failed, _, listed, exchange = seen["calls"]
    assert (failed["is_error"], failed["arguments"], failed["server"]) == (
        True,
        {"why": "disk"},
        PEER,
    )
    assert "result" not in failed  # results stay in the ledger
    assert listed["result"] == {"tools": [{"name": "echo"}]}
    assert (exchange["upstream"], exchange["status"], exchange["principal"]) == (
        PEER,
        200,
        "target",
    )
    assert later["partial"] is True
    assert len(later["calls"]) == 4
    refused = [e for e in exchanges(tmp_path) if e.upstream == "gateway"]
    assert [(e.principal, e.status) for e in refused] == [("target", 403)]


async def test_a_call_past_the_kept_calls_is_only_counted_as_left_out(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a cell keeps SEEN_CALLS of the target's calls readable, a later call is not
    flattened for it (work a long cell would do per call for nothing): the answer is partial
    and holds what it held."""
    from agent_health.gateway import recorder

    flattened: list[object] = []
    flatten = recorder._seen_call

    def counted(call: dict[str, Any], given: str | None = None) -> tuple[tuple[Any, ...], int]:
        flattened.append(call["id"])
        return flatten(call, given)

    monkeypatch.setattr(recorder, "_seen_call", counted)
    monkeypatch.setattr(recorder, "SEEN_CALLS", 2)  # a call and its exchange
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/mcp"
        asked = f"{gw.admin_url}/peers/calls?run_id={RUN_ID}"
        for n in range(3):
            await post(client, url, mcp_support.call(n, "echo"))
            # Asking puts the cell's calls on record (and kept) before the next is made.
            async with client.get(asked, headers={config.TOKEN_HEADER: CONTROLLER_TOKEN}) as r:
                seen = await r.json()
    assert flattened == [0]
    assert seen["partial"] is True
    assert [(c["kind"], c.get("id")) for c in seen["calls"]] == [("mcp", 0), ("exchange", None)]


async def test_calls_still_in_flight_are_not_waited_for_and_make_the_answer_partial(
    tmp_path: Path, upstream: str
) -> None:
    """An agent may keep a stream to its MCP server open as long as it runs: the controller
    is answered at once, with the call the stream answered, and told the rest is not whole."""
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        url = gw.url("target", PEER) + "/endless"
        data = json.dumps(mcp_support.call(1, "echo", q="x")).encode()
        async with client.post(url, data=data, headers=mcp_support.ACCEPT) as response:
            await response.content.readuntil(b"\n\n")  # the answer's event
            asked = f"{gw.admin_url}/peers/calls?run_id={RUN_ID}"
            async with client.get(asked, headers={config.TOKEN_HEADER: CONTROLLER_TOKEN}) as r:
                seen = await r.json()
    assert seen["partial"] is True
    assert [(c["kind"], c["name"]) for c in seen["calls"]] == [("mcp", "echo")]


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
_OBJECTS = st.dictionaries(st.text(max_size=2), _ANY, max_size=2)
# Mostly the plain shapes, each member now and then of another type or left out, and now and
# then a member the plain shapes do not take: what the SDK reads and what it refuses.
_IDS = st.integers(-2, 2) | st.text(max_size=2) | st.sampled_from([True, 1.0, None])
_JSONRPC = st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0])
_MORE = st.sampled_from([None, {}, "x", 1])


def _now_and_then(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """No member, mostly; now and then one of ``keys``."""
    return st.just({}) | st.just({}) | st.dictionaries(st.sampled_from(keys), _MORE, max_size=1)


def _with(
    base: st.SearchStrategy[dict[str, Any]], keys: list[str]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda a, b: {**a, **b}, base, _now_and_then(keys))


@settings(max_examples=400)  # a quarter of them the plain shape
@given(
    jsonrpc=_JSONRPC,
    id=_IDS,
    params=_with(
        st.fixed_dictionaries(
            {"name": st.text(max_size=3) | st.text(max_size=3) | _ANY},
            optional={"arguments": _OBJECTS | _OBJECTS | _ANY},
        ),
        ["_meta", "meta", "task", "requestState", "inputResponses", "x"],
    )
    | _with(st.fixed_dictionaries({"name": st.text(max_size=3)}), ["arguments"])
    | _ANY,
)
def test_a_tool_call_read_without_the_sdks_models_is_one_the_sdk_reads_alike(
    jsonrpc: Any, id: Any, params: Any
) -> None:
    """The plain shape of a tools/call request, read without the SDK's models, is a strict
    part of what the SDK's types read, to the same tool name."""
    from agent_health.gateway import mcpwire

    message = {"jsonrpc": jsonrpc, "id": id, "method": "tools/call", "params": params}
    named = mcpwire._plain_call(message)
    if named is None:
        return
    read = mcpwire._CALLS["tools/call"].model_validate(message)  # raises if the SDK refuses
    assert mcpwire._name_of(read.params) == (named or None)
    assert read.id == id
    assert type(read.id) is type(id)


_TEXT_BLOCK = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})
_BLOCKS = (
    _TEXT_BLOCK
    | _TEXT_BLOCK
    | _TEXT_BLOCK
    | _with(
        st.fixed_dictionaries(
            {"text": st.text(max_size=3) | st.text(max_size=3) | _ANY},
            optional={"type": st.sampled_from(["text", "text", "text", "image", 1])},
        ),
        ["annotations", "_meta", "meta", "x"],
    )
    | _ANY
)


@settings(max_examples=400)  # a fifth of them the plain shape
@given(
    jsonrpc=_JSONRPC,
    id=_IDS,
    result=_with(
        st.fixed_dictionaries(
            {"content": st.lists(_TEXT_BLOCK, max_size=2)},
            optional={"structuredContent": _ANY, "isError": st.booleans()},
        ),
        ["is_error", "_meta", "isError"],
    )
    | _with(
        st.fixed_dictionaries(
            {"content": st.lists(_BLOCKS, max_size=2) | st.lists(_BLOCKS, max_size=2) | _ANY},
            optional={"structuredContent": _ANY, "isError": st.booleans() | _ANY},
        ),
        ["is_error", "_meta", "meta", "resultType", "result_type", "structured_content"],
    )
    | _ANY,
)
def test_a_tool_answer_read_without_the_sdks_models_is_one_the_sdk_reads_alike(
    jsonrpc: Any, id: Any, result: Any
) -> None:
    """The plain shape of a tools/call answer, read without the SDK's models, is a strict
    part of what the SDK's types read (content blocks in order, as the reader takes them),
    to the same isError."""
    from agent_health.gateway import mcpwire

    message = {"jsonrpc": jsonrpc, "id": id, "result": result}
    is_error = mcpwire._plain_result(message)
    if is_error is None:
        return
    read = mcpwire._ANSWERS["tools/call"].model_validate(message)  # raises if the SDK refuses
    assert mcp_types.CallToolResult.model_validate(result).is_error is is_error
    assert read.result.is_error is is_error  # type: ignore[attr-defined]


def test_the_plain_shapes_are_the_usual_ones_and_no_other() -> None:
    """What the gateway reads without the SDK's models: the call and answer every client and
    server here sends (mcp-server-time's), and not a hair more."""
    from agent_health.gateway import mcpwire

    call = mcp_support.call(1, "echo", text="hi")
    assert mcpwire._plain_call(call) == "echo"
    answer: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}},
    }
    assert mcpwire._plain_result(answer) is False
    answer["result"]["isError"] = True
    assert mcpwire._plain_result(answer) is True
    for other in (
        {**call, "id": True},
        {**call, "params": {**call["params"], "_meta": {}}},
        {**call, "params": {"name": 7}},
        {**call, "method": "tools/list"},
    ):
        assert mcpwire._plain_call(other) is None, other
    for result in (
        {"content": [{"type": "text", "text": "hi", "annotations": None}]},
        {"content": [{"type": "image", "text": "hi"}]},
        {"content": [{"text": "hi"}]},
        {"content": [], "isError": 1},
        {"content": [], "is_error": True},
        {"content": (), "isError": True},
    ):
        assert mcpwire._plain_result({**answer, "result": result}) is None, result


async def test_an_exchange_holds_a_bounded_share_of_its_calls_for_its_own_record(
    tmp_path: Path, upstream: str
) -> None:
    """A batch answered with large results: past HELD_BYTES the calls are sealed alone as
    they come, so an exchange never holds more than that for its record; each call is on
    record once."""
    big = "x" * 40_000  # echoed back: about 80 kB of arguments and result a call
    batch = [mcp_support.call(n, "echo", blob=big) for n in range(7)]
    async with through(tmp_path, mcp_route(upstream)) as (gw, client):
        status, _, _ = await post(client, gw.url("target", PEER) + "/mcp?sse=1", batch)
    assert status == 200
    recorded = calls(tmp_path)
    assert sorted(c.id for c in recorded if isinstance(c.id, int)) == list(range(7))
    alone = [c for c in recorded if c.version == 4]
    carried = [c for c in recorded if c.version == 5]
    assert alone  # the first ones sealed alone as they came
    assert carried  # the rest in the exchange's record
    assert sum(len(c.model_dump_json()) for c in carried) < 2 * recorder.HELD_BYTES
    assert all(c.arguments == {"blob": big} for c in recorded)
