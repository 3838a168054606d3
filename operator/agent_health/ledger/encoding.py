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


def canonical(payload: dict[str, Any]) -> bytes:
    """Stable bytes of JSON data: sorted keys, no whitespace, ASCII only, no NaN.

    The same data always gives the same bytes, whether it came from a model or was read
    back from a line, which is what lets a reader recompute a writer's MAC.
    """
    try:
        text = _CANONICAL.encode(payload)
    except ValueError as err:  # NaN or Infinity: say where, the encoder does not
        found = strictjson.not_finite(payload)
        what = f"{found[0]} is {found[1]!r}" if found else str(err)
        raise errors.RecordError(
            f"not representable as JSON: {what} (JSON has no NaN or Infinity)"
        ) from err
    except RecursionError as err:
        raise errors.RecordError("not representable as JSON: nested too deep") from err
    return text.encode("ascii")
