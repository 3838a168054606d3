"""Reading hostile JSON: what Python's json takes and JSON cannot say is refused, saying where."""

from __future__ import annotations

import json
import math

import pytest
from agent_health.ledger import encoding, errors, strictjson


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [1.5, -0.0, 1e-300, 1e300], "c": "NaN and Infinity, as text"}',
        '{"id": "x", "n": 123456789012345678901234567890}',  # a big integer is no float
        '{"a": "\\ud800"}',  # a lone surrogate: pydantic-core refuses it, json takes it
        '{"a": "line100e100"}',  # looks like a big number to the fast path's guard
        "[" * 256 + "]" * 256,  # 255 levels that hold something, then an empty one
    ],
)
def test_json_we_can_hold_reads_as_json_reads_it(text: str) -> None:
    assert repr(strictjson.loads(text)) == repr(json.loads(text))
    assert repr(strictjson.loads(text.encode())) == repr(json.loads(text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"tests": [{"score": NaN}]}', "tests[0].score: NaN: JSON has no NaN or Infinity"),
        ('{"a": {"b": Infinity}}', "a.b: Infinity: JSON has no NaN or Infinity"),
        ("[-Infinity]", "[0]: -Infinity: JSON has no NaN or Infinity"),
        ('{"x": 1e400}', "x: 1e400 is too large for a 64-bit float"),
        ('{"x": -2.5E+999}', "x: -2.5E+999 is too large for a 64-bit float"),
        ('{"x": ' + "9" * 400 + ".0}", "is too large for a 64-bit float"),
        ('{"a": "\\ud800", "b": NaN}', "b: NaN: JSON has no NaN"),  # the slow path names it too
        ('{"args": ' + "[" * 300 + "]" * 300 + "}", "args[0][0][0][0][0]…: nested deeper than"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 256 levels"),  # a RecursionError
        ("{nope", "Expecting property name"),  # plain malformed text: the parser's words
    ],
)
def test_what_json_cannot_hold_is_refused_saying_where(text: str, message: str) -> None:
    with pytest.raises(strictjson.JSONError) as raised:
        strictjson.loads(text)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)  # what "not JSON" handlers already catch
    plain = message.startswith("Expecting")
    assert (raised.value.reason is None) == plain


def test_the_depth_is_levels_that_hold_something() -> None:
    assert not strictjson.too_deep([], 0)
    assert strictjson.too_deep([1], 0)
    assert not strictjson.too_deep([[[]]], 2)
    assert strictjson.too_deep([[[1]]], 2)
    assert not strictjson.too_deep(7, 0)
    deep: list[object] = []
    for _ in range(10_000):  # far past Python's recursion limit: the walk does not recurse
        deep = [deep, 1]
    assert strictjson.too_deep(deep, 9_999)
    assert not strictjson.too_deep(deep, 10_000)
    with pytest.raises(strictjson.JSONError, match="nested deeper than 3 levels"):
        strictjson.loads("[[[[1]]]]", max_depth=3)


def test_needs_care_flags_every_number_the_fast_parsers_would_take() -> None:
    overflows = "1" + "0" * 250 + "e99"  # 1e349: a two-digit exponent, past a float
    for text in ('{"a": NaN}', "[Infinity]", '{"a": 1e400}', "[1E+308]", "9" * 309, overflows):
        assert strictjson.needs_care(text)
        assert strictjson.needs_care(text.encode())
    for text in ('{"a": 1.5, "b": "text"}', '{"a": 1e-05}', "[1e99]"):
        assert not strictjson.needs_care(text)


@pytest.mark.parametrize("digits", [199, 200, 209, 210, 250, 308, 309, 400])
@pytest.mark.parametrize("exponent", ["", "e0", "e99", "E+99", ".5e99", "e-99"])
def test_every_number_too_large_for_a_float_is_refused_whatever_its_shape(
    digits: int, exponent: str
) -> None:
    """A number the fast parser reads as infinity is refused however it is written: with a
    long exponent, or many digits and a short one (which the look at the text must not
    take for a harmless number)."""
    number = f"{'9' * digits}{exponent}"
    text = f'{{"a": [{number}]}}'
    if exponent and math.isinf(float(number)):  # without one it is an integer: any size
        assert strictjson.may_overflow(text)
        with pytest.raises(strictjson.JSONError, match="too large for a 64-bit float"):
            strictjson.loads(text)
    else:
        assert strictjson.loads(text) == {"a": [float(number) if exponent else int(number)]}


def test_not_finite_names_the_first_nan_in_document_order() -> None:
    value = {"a": [1.0, {"b": math.inf}], "c": math.nan}
    assert strictjson.not_finite(value) == ("a[1].b", math.inf)
    assert strictjson.not_finite({"a": [1, "x"]}) is None
    assert strictjson.not_finite((1.0, math.nan)) is not None


def test_a_record_that_cannot_be_sealed_says_where_the_nan_is() -> None:
    record = {"kind": "run-result", "trajectory": [{"latency_ms": 1.0}, {"latency_ms": math.nan}]}
    with pytest.raises(errors.RecordError) as raised:
        encoding.canonical(record)
    assert str(raised.value) == (
        "not representable as JSON: trajectory[1].latency_ms is nan (JSON has no NaN or Infinity)"
    )
