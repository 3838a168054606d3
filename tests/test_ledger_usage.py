"""Token usage parsed from completion bodies, whole and streamed."""

from __future__ import annotations

import json

from agent_health.ledger import usage


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
