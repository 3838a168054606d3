"""The AG-UI fold's plain path: an event the package's model would take as it is is folded
without the model's validation, and every event — plain or not — folds, or is refused, exactly
as through the model."""

from __future__ import annotations

import json
import typing
from typing import Any

import pydantic
import pytest
from ag_ui import core
from agent_health.connectors import errors
from agent_health.connectors.agui import fold, plain

MID = {"messageId": "m"}
CID = {"toolCallId": "c"}
RUN = {"threadId": "t", "runId": "r"}

# Variants of each plain-path event type: plain ones and ones the model coerces, refuses or
# reads under another spelling (each must go the model's way).
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "RUN_STARTED": [
        RUN,
        {**RUN, "timestamp": 1_700_000_000_000, "parentRunId": "p", "input": None},
        {**RUN, "timestamp": 1.0},
        {**RUN, "timestamp": 2**60},
        {**RUN, "timestamp": True},
        {**RUN, "input": {"threadId": "t", "runId": "r"}},
        {"threadId": "t"},
        {**RUN, "runId": 7},
        {"thread_id": "t", "run_id": "r"},
    ],
    "TEXT_MESSAGE_START": [
        MID,
        {**MID, "role": "assistant", "name": "bot", "subagentRunId": None},
        {**MID, "role": "user"},
        {**MID, "role": "system"},
        {**MID, "role": None},
        {**MID, "role": "tool"},
        {**MID, "role": 1},
        {"message_id": "m"},
        {"messageId": None},
        {},
    ],
    "TEXT_MESSAGE_CONTENT": [
        {**MID, "delta": "po"},
        {**MID, "delta": ""},
        {**MID, "delta": "x", "metadata": {"k": [1]}, "rawEvent": [1, "a"], "extra": {"y": 1}},
        {**MID, "delta": "x", "metadata": [1]},
        {**MID, "delta": 5},
        {**MID, "delta": None},
        {**MID},
        {"message_id": "m", "delta": "x"},
        {**MID, "delta": "x", "message_id": "other"},
        {**MID, "delta": "x", "subagent_run_id": 5},
    ],
    "TEXT_MESSAGE_END": [MID, {**MID, "timestamp": None}, {"messageId": 3}],
    "TOOL_CALL_START": [
        {**CID, "toolCallName": "search"},
        {**CID, "toolCallName": "search", "parentMessageId": "m"},
        {**CID, "toolCallName": "search", "parentMessageId": 1},
        {**CID},
        {**CID, "tool_call_name": "search"},
        {**CID, "toolCallName": "search", "parent_message_id": 1},  # by its Python name
    ],
    "TOOL_CALL_ARGS": [
        {**CID, "delta": '{"q": '},
        {**CID, "delta": ["x"]},
        {"delta": "x"},
    ],
    "TOOL_CALL_END": [CID, {"toolCallId": None}],
    "REASONING_MESSAGE_START": [
        MID,
        {**MID, "role": "reasoning"},
        {**MID, "role": "assistant"},
    ],
    "REASONING_MESSAGE_CONTENT": [{**MID, "delta": "hm"}, {**MID, "delta": 0}],
    "REASONING_MESSAGE_END": [MID],
    "RUN_FINISHED": [
        RUN,
        {**RUN, "result": "done"},
        {**RUN, "result": {"output": "o", "token_usage": {"prompt": 2, "completion": 3}}},
        {**RUN, "result": None},
        {**RUN, "usage": [{"inputTokens": 4, "outputTokens": 1}]},
        {**RUN, "usage": None, "result": 1},
        {**RUN, "outcome": {"type": "success"}},
        {**RUN, "runId": None},
    ],
}


def folded(events: list[dict[str, Any]], *, plain_path: bool) -> tuple[str, Any]:
    """What folding ``events`` gives: the reply's fields and the events, or the refusal."""
    folding = fold.Fold("http://agent.invalid/agui", plain=plain_path)
    try:
        seen = [folding.feed(json.dumps(e)) for e in events]
        fields = folding.reply_fields()
    except errors.ConnectorError as err:
        return "refused", (type(err), str(err))
    steps = [s.model_dump(exclude={"latency_ms"}) for s in fields["trajectory"]]
    return "folded", (fields["output"], steps, fields["token_usage"], seen, folding.finished)


def streams() -> list[list[dict[str, Any]]]:
    """Each variant inside a stream that gives it something to act on."""
    opened = [
        {"type": "RUN_STARTED", **RUN},
        {"type": "TEXT_MESSAGE_START", **MID},
        {"type": "TOOL_CALL_START", **CID, "toolCallName": "search"},
        {"type": "REASONING_MESSAGE_START", **MID},
    ]
    closing = [
        {"type": "TEXT_MESSAGE_CONTENT", **MID, "delta": "!"},
        {"type": "TOOL_CALL_END", **CID},
        {"type": "RUN_FINISHED", **RUN},
    ]
    return [
        [*opened, {"type": kind, **variant}, *closing]
        for kind, variants in VARIANTS.items()
        for variant in variants
    ]


@pytest.mark.parametrize("events", streams(), ids=lambda events: str(events[4])[:60])
def test_every_event_folds_or_is_refused_as_through_the_model(
    events: list[dict[str, Any]],
) -> None:
    assert folded(events, plain_path=True) == folded(events, plain_path=False)


def test_the_variants_take_both_paths() -> None:
    """The comparison above is worth something only if both paths run."""
    taken = {True: 0, False: 0}
    for kind, variants in VARIANTS.items():
        shape = fold.PLAIN[kind]
        for variant in variants:
            taken[shape.plain({"type": kind, **variant})] += 1
    assert taken[True] >= 20
    assert taken[False] >= 20


@pytest.mark.parametrize("kind", sorted(plain.MODELS))
def test_a_plain_event_is_one_the_model_keeps_as_it_is(kind: str) -> None:
    model = plain.MODELS[kind]
    shape = fold.PLAIN[kind]
    for variant in VARIANTS[kind]:
        raw = {"type": kind, **variant}
        if not shape.plain(raw):
            continue
        event = model.model_validate(raw)
        names = {info.alias or name: name for name, info in model.model_fields.items()}
        kept = {
            key: (
                getattr(event, names[key])
                if key in names
                else (event.model_extra or {}).get(key, "dropped")
            )
            for key in raw
        }
        kept["type"] = kept["type"].value
        assert kept == raw
        assert all(type(kept[key]) is type(raw[key]) for key in raw if key != "type")


def test_each_plain_type_is_the_model_the_union_picks() -> None:
    union = typing.get_args(typing.get_args(core.Event)[0])
    for kind, model in plain.MODELS.items():
        assert model in union
        assert model.model_fields["type"].default.value == kind
    assert set(fold.PLAIN) == set(plain.MODELS)  # every one has a plain shape


def test_a_model_that_does_more_than_check_types_has_no_plain_shape() -> None:
    class Checked(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        name: str

        @pydantic.field_validator("name")
        @classmethod
        def _upper(cls, value: str) -> str:
            return value.upper()

    class Closed(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        name: str

    class Nested(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        inner: Closed

    assert plain.shape(Checked) is None
    assert plain.shape(Closed) is None
    assert plain.shape(Nested) is None  # a required field it cannot check
