"""A chain's check (:func:`agent_health.ledger.chain.verify`, ``check_form``): each line
read back, its seq and MAC held to the chain, and the first record that breaks it
(:class:`Problem`) in the result (:class:`VerifyResult`).

Loaded by the first check: a run that only seals its cells never makes these models
(issue #40; ``tests/cli/test_cli_imports.py``).
"""

import hmac
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agent_health.ledger import errors, strictjson

GENESIS = "0" * 64
"""What the first record links to (:data:`agent_health.ledger.GENESIS`, which is this)."""

_EDITED = "mac mismatch: the record or its mac was changed, or another key wrote it"
_CUT = "record: records were cut off the end, or the cell is still running"

Reason = Literal[
    "bad-json",  # not a JSON object: a write was cut short, or the line was edited
    "bad-record",  # JSON, but not a valid record (unknown version or kind, bad field)
    "unsealed",  # no mac: not written by a Writer
    "removed",  # a seq is missing
    "reordered",  # seqs out of order (or duplicated)
    "edited",  # mac mismatch: the record or its mac changed, or another key wrote it
    "bad-start",  # the first record is not cell-meta
    "after-end",  # a record follows cell-end
    "truncated",  # complete=True and no cell-end: records were cut off the end
]


class Problem(BaseModel):
    """The first record that breaks a chain."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    line: int
    seq: int
    reason: Reason
    message: str

    def __str__(self) -> str:
        return f"line {self.line} (seq {self.seq}): {self.reason}: {self.message}"


class VerifyResult(BaseModel):
    """The outcome of :func:`verify`: ``ok``, or the first ``problem``."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    ok: bool
    records: int
    ended: bool = False
    last_mac: str
    """The last good record's mac (the chain's genesis when there is none)."""
    problem: Problem | None = None


def walk(
    lines: Iterable[str],
    mac_of: Callable[[str, dict[str, Any]], str] | None,
    complete: bool,
    genesis: str,
) -> VerifyResult:
    """The check of ``lines``: ``mac_of(previous_mac, record)`` is each record's MAC as the
    chain links it (``None``: the MACs are not checked), the first linked to ``genesis``."""
    from agent_health.ledger import records  # the models: only a reader needs them

    entries = [(n, text) for n, text in enumerate(lines, start=1) if text.strip()]
    previous, count, ended = genesis, 0, False

    def fail(line: int, reason: Reason, message: str) -> VerifyResult:
        problem = Problem(line=line, seq=count, reason=reason, message=message)
        return VerifyResult(
            ok=False, records=count, ended=ended, last_mac=previous, problem=problem
        )

    for index, (number, text) in enumerate(entries):
        try:
            payload = strictjson.loads(text)
        except ValueError as err:
            return fail(number, "bad-json", f"not JSON ({err}); a write was cut short or edited")
        if not isinstance(payload, dict):
            return fail(number, "bad-json", "not a JSON object")
        mac, seq = payload.get("mac"), payload.get("seq")
        if not isinstance(mac, str) or not mac:
            return fail(number, "unsealed", "the record has no mac; it was not written by a Writer")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return fail(number, "bad-record", f"seq is {seq!r}, not an integer")
        if seq != count:
            return fail(number, *_seq_break(seq, count, entries[index + 1 :]))
        if mac_of is not None:
            try:
                expected_mac = mac_of(previous, payload)
            except errors.RecordError as err:
                return fail(number, "bad-record", str(err))
            if not hmac.compare_digest(expected_mac, mac):
                return fail(number, "edited", _EDITED)
        try:
            record = records.parse_object(payload, number)
        except errors.RecordError as err:
            return fail(number, "bad-record", str(err))
        if ended:
            return fail(number, "after-end", f"a {record.kind} record follows the cell-end record")
        if index == 0 and record.kind != "cell-meta":
            return fail(number, "bad-start", f"the first record is {record.kind}, not cell-meta")
        ended = record.kind == "cell-end"
        previous, count = mac, count + 1
    if complete and not ended:
        last = entries[-1][0] if entries else 0
        what = f"after seq {count - 1}" if count else "before any record"
        return fail(last + 1, "truncated", f"the chain ends {what} without a cell-end {_CUT}")
    return VerifyResult(ok=True, records=count, ended=ended, last_mac=previous)


def _seq_break(seq: int, expected: int, rest: list[tuple[int, str]]) -> tuple[Reason, str]:
    """Tell a removed record from a reordered one by looking for the missing seq later."""
    later = {_seq_of(text) for _, text in rest}
    if seq > expected and expected not in later:
        missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
        return "removed", f"found seq {seq} where seq {expected} belongs: {missing} removed"
    if seq < expected:
        return "reordered", f"seq {seq} appears again after seq {expected - 1}: duplicated or moved"
    return "reordered", f"found seq {seq} where seq {expected} belongs: records were reordered"


def _seq_of(text: str) -> int | None:
    try:
        payload = strictjson.loads(text)
    except ValueError:
        return None
    seq = payload.get("seq") if isinstance(payload, dict) else None
    return seq if isinstance(seq, int) else None
