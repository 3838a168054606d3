"""Canonical JSON: the one encoding every ledger line and MAC is computed over.

Its own module so that a writer that seals records it built as JSON
(:mod:`.objects`, :class:`.chain.Sealer`) and the run file's seal need not load the record
models of :mod:`.records`, which re-exports :func:`canonical`.
"""

from __future__ import annotations

import json
from typing import Any

from agent_health.ledger import errors, strictjson

# One encoder for every canonical line: json.dumps() with these options builds a new encoder
# per call, which cost as much as encoding a record. It holds only its options. A record is
# JSON data, never a cycle (one would nest without end: RecursionError, below), so the
# encoder keeps no table of the containers it is inside (check_circular), a tenth of its cost.
_CANONICAL = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=True,
    allow_nan=False,
    check_circular=False,
)


# The C encoder _CANONICAL.encode makes afresh on each call (with two frames of Python
# around it), made once: text() is called for a few small values of each record it writes,
# where making it cost as much as the encoding. It holds only the same options.
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_C_ENCODER = (
    _MAKE_ENCODER(
        None,  # markers: no table of open containers (check_circular=False)
        _CANONICAL.default,
        json.encoder.encode_basestring_ascii,  # ensure_ascii=True
        None,  # indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
    if _MAKE_ENCODER is not None
    else None
)


def canonical(payload: dict[str, Any]) -> bytes:
    """Stable bytes of JSON data: sorted keys, no whitespace, ASCII only, no NaN.

    The same data always gives the same bytes, whether it came from a model or was read
    back from a line, which is what lets a reader recompute a writer's MAC.
    """
    try:
        if _C_ENCODER is None:
            return _CANONICAL.encode(payload).encode("ascii")
        # The one C encoder, not _CANONICAL.encode: that makes a new one per call, with two
        # frames of Python around it (a fifth of encoding a ledger record). Same bytes.
        return "".join(_C_ENCODER(payload, 0)).encode("ascii")
    except (ValueError, RecursionError) as err:
        raise _refused(payload, err) from err


def text(value: Any) -> str:
    """:func:`canonical` of any JSON value, as text: what a writer that lays out a record's
    members itself (``objects.mcp_text``) writes each member's value with."""
    try:
        if _C_ENCODER is None:
            return _CANONICAL.encode(value)
        return "".join(_C_ENCODER(value, 0))
    except (ValueError, RecursionError) as err:
        raise _refused(value, err) from err


def _refused(value: Any, err: ValueError | RecursionError) -> errors.RecordError:
    if isinstance(err, RecursionError):
        return errors.RecordError("not representable as JSON: nested too deep")
    found = strictjson.not_finite(value)  # NaN or Infinity: say where, the encoder does not
    what = f"{found[0]} is {found[1]!r}" if found else str(err)
    return errors.RecordError(f"not representable as JSON: {what} (JSON has no NaN or Infinity)")
