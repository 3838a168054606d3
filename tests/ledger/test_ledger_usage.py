"""Token usage parsed from completion bodies, whole and streamed."""

from __future__ import annotations

import gzip
import itertools
import json
import tracemalloc
import zlib

from agent_health.ledger import usage
from hypothesis import given, settings
from hypothesis import strategies as st

NAMES = ["usage", "model", "message", "response", "id", "choices", "text"]
KEYS = st.sampled_from(NAMES) | st.text(max_size=8)


def sse(*events: object, done: bool = True) -> bytes:
    chunks = [f"data: {json.dumps(e)}\n\n" for e in events]
    if done:
        chunks.append("data: [DONE]\n\n")
    return "".join(chunks).encode()


def test_openai_chat_completion() -> None:
    body = json.dumps(
        {
            "model": "gpt-x",
            "choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
    ).encode()
    assert usage.parse(body, "application/json") == usage.TokenUsage(
        input_tokens=11, output_tokens=7, total_tokens=18, model="gpt-x"
    )


def test_anthropic_message_total_is_derived() -> None:
    body = {"model": "claude-x", "usage": {"input_tokens": 20, "output_tokens": 3}}
    assert usage.parse(json.dumps(body)) == usage.TokenUsage(
        input_tokens=20, output_tokens=3, total_tokens=23, model="claude-x"
    )


def test_openai_stream_final_usage_chunk() -> None:
    body = sse(
        {"model": "gpt-x", "choices": [{"delta": {"content": "a"}}], "usage": None},
        {"model": "gpt-x", "choices": [{"delta": {"content": "b"}}], "usage": None},
        {"model": "gpt-x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    )
    assert usage.parse(body, "text/event-stream; charset=utf-8") == usage.TokenUsage(
        input_tokens=5, output_tokens=2, total_tokens=7, model="gpt-x"
    )


def test_anthropic_stream_merges_start_and_delta() -> None:
    events = [
        {
            "type": "message_start",
            "message": {"model": "claude-x", "usage": {"input_tokens": 40, "output_tokens": 1}},
        },
        {"type": "content_block_delta", "delta": {"text": "hi"}},
        {"type": "message_delta", "usage": {"output_tokens": 15}},
        {"type": "message_stop"},
    ]
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    assert usage.parse(text) == usage.TokenUsage(
        input_tokens=40, output_tokens=15, total_tokens=55, model="claude-x"
    )


def test_openai_responses_stream_completed_event() -> None:
    body = sse(
        {"type": "response.output_text.delta", "delta": "x"},
        {
            "type": "response.completed",
            "response": {"model": "r", "usage": {"input_tokens": 9, "output_tokens": 4}},
        },
        done=False,
    )
    assert usage.parse(body) == usage.TokenUsage(
        input_tokens=9, output_tokens=4, total_tokens=13, model="r"
    )


def test_crlf_stream() -> None:
    body = b'data: {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}\r\n\r\n'
    assert usage.parse(body) == usage.TokenUsage(input_tokens=1, output_tokens=1, total_tokens=2)


def test_bodies_without_usage_give_none() -> None:
    assert usage.parse(b'{"output": "no usage here"}') is None
    assert usage.parse(b"not json at all") is None
    assert usage.parse(b"") is None
    assert usage.parse(b'{"usage": {"prompt_tokens": "many"}}') is None
    assert usage.parse(sse({"choices": []})) is None
    assert usage.parse(b"[1, 2, 3]") is None


# -- read as it streams past (the gateway's way) ----------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False,
    allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
USAGE = st.dictionaries(
    st.sampled_from(["prompt_tokens", "input_tokens", "completion_tokens", "output_tokens",
                     "total_tokens", "cached_tokens"]),
    st.integers(-5, 10**9) | st.just(True) | st.floats(0, 10) | st.text(max_size=3),
    max_size=4,
)  # fmt: skip


@st.composite
def holders(draw: st.DrawFn, depth: int = 0) -> dict[str, object]:
    """An object that may carry usage, model and (at the root) message/response holders,
    among decoys: the same keys nested where usage is not read."""
    body = draw(st.dictionaries(KEYS, JSON_VALUES, max_size=3))
    if draw(st.booleans()):
        body["usage"] = draw(USAGE | JSON_VALUES)
    if draw(st.booleans()):
        body["model"] = draw(st.text(max_size=30) | JSON_VALUES)
    if depth == 0:
        for key in ("message", "response"):
            if draw(st.booleans()):
                body[key] = draw(holders(depth=1))
        if draw(st.booleans()):  # a decoy: usage inside an array is never read
            body["choices"] = [{"usage": draw(USAGE), "message": draw(holders(depth=1))}]
    items = list(body.items())
    return dict(draw(st.permutations(items)))


def reference(text: bytes, stream: bool) -> usage.TokenUsage | None:
    """What json.loads of the whole body gives: the reader must agree with it."""
    if not stream:
        return usage.merge(iter([json.loads(text)]))
    payloads = []
    for event in text.decode().replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[6:] for line in event.split("\n") if line.startswith("data: "))
        if data and data != "[DONE]":
            payloads.append(json.loads(data))
    return usage.merge(iter(payloads))


def read(body: bytes, cuts: list[int], content_type: str | None = None,
         encoding: str | None = None, limit: int | None = None) -> usage.Reader:  # fmt: skip
    reader = usage.Reader(content_type, encoding, limit=limit)
    edges = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    for start, end in itertools.pairwise(edges):
        reader.feed(body[start:end])
    return reader


@settings(max_examples=300, deadline=None)
@given(document=holders(), cuts=st.lists(st.integers(0, 10**6), max_size=12),
       gzipped=st.booleans(), indent=st.sampled_from([None, 1]))  # fmt: skip
def test_a_body_read_in_pieces_gives_what_the_whole_body_gives(
    document: dict[str, object], cuts: list[int], gzipped: bool, indent: int | None
) -> None:
    text = json.dumps(document, indent=indent, ensure_ascii=bool(cuts and cuts[0] % 2)).encode()
    body = gzip.compress(text) if gzipped else text
    reader = read(body, cuts, "application/json", "gzip" if gzipped else None)
    assert reader.result() == reference(text, stream=False)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(holders(), max_size=5), cuts=st.lists(st.integers(0, 10**6), max_size=12),
       crlf=st.booleans(), typed=st.booleans())  # fmt: skip
def test_an_event_stream_read_in_pieces_gives_what_the_whole_stream_gives(
    events: list[dict[str, object]], cuts: list[int], crlf: bool, typed: bool
) -> None:
    end = "\r\n" if crlf else "\n"
    text = (
        "".join(f"event: x{end}: a comment{end}data: {json.dumps(e)}{end}{end}" for e in events)
        + f"data: [DONE]{end}{end}"
    )
    reader = read(text.encode(), cuts, "text/event-stream" if typed else None)
    assert reader.result() == reference(text.encode(), stream=True)


def test_a_data_field_split_over_lines_is_one_document() -> None:
    body = b'data: {"usage":\ndata: {"input_tokens": 3}}\n\n'
    assert read(body, [7, 20]).result() == usage.TokenUsage(input_tokens=3, total_tokens=3)


def test_malformed_or_cut_off_bodies_report_no_usage() -> None:
    good = b'{"usage": {"prompt_tokens": 1, "completion_tokens": 2}}'
    assert usage.parse(good) is not None
    for body in (
        good[:-1],
        good + b"{",
        good.replace(b"}}", b"]}"),
        b'"usage"',
        good.replace(b"1,", b"1 ,,"),
        b'{"usage": {"prompt_tokens": 1' + b"[" * 600,
    ):
        assert usage.parse(body) is None or body == good.replace(b"1,", b"1 ,,"), body
    # The scanner checks structure, not every rule: a doubled comma is not a bracket error.


def test_escaped_keys_and_models_are_read_as_json_reads_them() -> None:
    body = rb'{"mod\u0065l": "m\"1\u00e9", "us\u0061ge": {"input_tokens": 2}}'
    assert usage.parse(body) == usage.TokenUsage(input_tokens=2, total_tokens=2, model='m"1é')


def test_a_long_model_name_is_cut_and_a_long_number_is_no_count() -> None:
    body = json.dumps(
        {"model": "é" * 400, "usage": {"input_tokens": 10**40, "output_tokens": 1}},
        ensure_ascii=False,
    )
    found = usage.parse(body)
    assert found is not None
    assert found.model is not None
    assert 100 < len(found.model) <= 256
    assert (found.input_tokens, found.output_tokens) == (0, 1)


def test_an_unknown_encoding_or_a_broken_gzip_is_not_read_and_says_why() -> None:
    body = b'{"usage": {"input_tokens": 4}}'
    brotli = usage.Reader("application/json", "br")
    brotli.feed(body)
    assert brotli.result() is None
    assert brotli.unread is not None
    assert "'br'" in brotli.unread
    broken = read(b"\x1f\x8b\x08\x00garbage" * 10, [], "application/json", "gzip")
    assert broken.result() is None
    assert broken.unread is not None
    assert "does not decompress" in broken.unread


def gzip_bomb(mebibytes: int) -> bytes:
    """A JSON body of ``mebibytes`` MiB, gzipped to about a thousandth of that."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"choices": [{"text": "')]
    block = b"a" * (1024 * 1024)
    parts += [packer.compress(block) for _ in range(mebibytes)]
    parts.append(packer.compress(b'"}], "usage": {"input_tokens": 1}}') + packer.flush())
    return b"".join(parts)


def test_a_gzip_bomb_is_read_up_to_the_limit_in_small_pieces() -> None:
    limit = 1024 * 1024
    bomb = gzip_bomb(64)
    assert len(bomb) < 1024 * 1024  # a small body on the wire...
    tracemalloc.start()
    try:
        reader = read(bomb, list(range(0, len(bomb), 64 * 1024)), "application/json", "gzip",
                      limit)  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.result() is None
    assert reader.unread is not None
    assert f"more than {limit} decoded bytes" in reader.unread
    assert reader.decoded <= limit + 64 * 1024  # ...inflated a piece at a time, then dropped
    assert peak < 1024 * 1024, f"reading the bomb held {peak >> 10} KiB"


def test_many_large_responses_in_flight_hold_next_to_nothing() -> None:
    """200 responses, each in the middle of a 1 MiB string: what ijson holds whole (189 MiB
    measured), the readers drop as it passes."""
    tracemalloc.start()
    try:
        readers = [usage.Reader("application/json") for _ in range(200)]
        before, _ = tracemalloc.get_traced_memory()
        for reader in readers:
            reader.feed(b'{"model": "m", "choices": [{"message": {"content": "')
            for _ in range(16):
                reader.feed(b"x" * (64 * 1024))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - before < 2 * 1024 * 1024, f"200 readers hold {(held - before) >> 10} KiB"
    for reader in readers:
        reader.feed(b'"}}], "usage": {"prompt_tokens": 7}}')
        assert reader.result() == usage.TokenUsage(input_tokens=7, total_tokens=7, model="m")


def test_a_gzip_body_of_several_members_is_read_to_its_end() -> None:
    body = gzip.compress(b'{"model": "m", ') + gzip.compress(b'"usage": {"input_tokens": 5}}')
    reader = read(body, [3, 30], "application/json", "gzip")
    assert reader.result() == usage.TokenUsage(input_tokens=5, total_tokens=5, model="m")


def test_short_strings_read_in_one_step_agree_with_json_on_odd_bytes() -> None:
    """Keys and models without escapes are decoded directly; what JSON reads otherwise (a
    UTF-8-encoded surrogate) or refuses (a raw control character) still goes its way."""
    surrogate = b'{"model": "a\xed\xa0\x80", "usage": {"input_tokens": 1}}'
    assert usage.parse(surrogate) == reference(surrogate, stream=False)
    assert usage.parse(surrogate) == usage.TokenUsage(
        input_tokens=1, total_tokens=1, model="a\ud800"
    )
    control = b'{"usage\x01": {"input_tokens": 2}, "model": "m\x02", "usage": {"input_tokens": 3}}'
    assert usage.parse(control) == usage.TokenUsage(input_tokens=3, total_tokens=3)
    for cut in range(1, len(surrogate)):  # every split, so the slow path reads them too
        assert read(surrogate, [cut]).result() == usage.parse(surrogate)
        assert read(control, [cut]).result() == usage.parse(control)
