"""Per-cell ledger keys: each cell's chain is sealed with a key derived from the run's key.

A cell's gateway holds the key of its own cell and nothing more: a gateway that is taken over
can seal records for its own cell, never for another cell of the run, nor for another attempt
of its own (``CELL`` / ``CELL.aN`` are different cells here). The operator keeps the run key
and derives each cell's key again to verify it; ``agent-health ledger verify`` and ``grade``
do the same with the run key file (:func:`sealing_key`).

The derivation is HKDF-SHA256 (RFC 5869): the run key is the input keying material, the salt
names this scheme, the info is the ledger cell's name. It is written here with :mod:`hmac` and
:mod:`hashlib` (RFC 5869 section 2, checked against the RFC's test vectors in the tests)
rather than taken from ``cryptography``: the ledger package is a leaf that the gateway sidecar
and the CLI import, and a compiled dependency of several megabytes for two HMAC calls would
weigh on both.

The derived key is used as base64 text, as run keys are (it travels in a Secret and a file
whose trailing whitespace readers ignore).

>>> cell_key(b"k" * 44, "run-a-0123456789-r0") != cell_key(b"k" * 44, "run-a-0123456789-r0.a1")
True
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from agent_health.ledger import chain, strictjson

SALT = b"agent-health/ledger-cell-key/v1"
"""Names the scheme, so the same run key used elsewhere never yields these keys."""
KEY_BYTES = 32
_HASH = hashlib.sha256


def hkdf(ikm: bytes, *, salt: bytes, info: bytes, length: int = KEY_BYTES) -> bytes:
    """HKDF-SHA256 of RFC 5869: extract a pseudorandom key, expand it to ``length`` bytes."""
    digest = _HASH().digest_size
    if length > 255 * digest:
        raise ValueError(f"HKDF-SHA256 gives at most {255 * digest} bytes, not {length}")
    prk = hmac.new(salt or bytes(digest), ikm, _HASH).digest()
    out, block = b"", b""
    for counter in range(1, -(-length // digest) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), _HASH).digest()
        out += block
    return out[:length]


def cell_key(run_key: bytes, ledger_cell: str) -> bytes:
    """The key that seals ``ledger_cell``'s chain (an attempt's cell: ``CELL`` or ``CELL.aN``),
    as base64 text."""
    derived = hkdf(run_key, salt=SALT, info=ledger_cell.encode("utf-8"))
    return base64.b64encode(derived)


def sealing_key(key: bytes, cell: str, lines: Sequence[str]) -> bytes:
    """The key that sealed the stored cell ``cell``, given the run's ``key``: the cell's
    derived key when it sealed the first record (a cluster cell), else ``key`` itself (a
    local run's cells are sealed with the run key, which its engine holds anyway).

    For ``ledger verify`` and ``grade`` with a run key file; the operator never falls back.
    """
    derived = cell_key(key, cell)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return key
    try:
        payload = strictjson.loads(first)
    except ValueError:
        return key
    if isinstance(payload, dict) and hmac.compare_digest(
        str(payload.get("mac", "")), chain.link(derived, chain.GENESIS, payload)
    ):
        return derived
    return key


WRAP_SALT = b"agent-health/warm-cell-ledger-key/v1"
"""Names the wrapping of :func:`wrap_cell_key`, so its pads are never another scheme's keys."""


def _pad(sandbox_key: bytes, ledger_cell: str, length: int) -> bytes:
    return hkdf(sandbox_key, salt=WRAP_SALT, info=ledger_cell.encode("utf-8"), length=length)


def wrap_cell_key(sandbox_key: bytes, ledger_cell: str, key: bytes) -> str:
    """``key`` (a :func:`cell_key`) hidden for the one gateway holding ``sandbox_key``, as
    base64 text fit for an annotation.

    A pooled cell's pod exists before the operator knows which cell it will run, so its
    gateway cannot mount its cell's key; it holds instead a random key of its own sandbox
    (a Secret the sandbox controller generated for it alone). The operator, which reads that
    Secret once the sandbox is claimed, sends the cell key XORed with a pad derived from the
    sandbox key and the ledger cell (HKDF-SHA256) — a one-time pad: each sandbox serves one
    cell, so each pad is used once. Whoever reads the annotation without the sandbox's Secret
    learns nothing of the key, and the key stays the one :func:`cell_key` derives from the run
    key, so ``ledger verify`` and ``grade`` with the run key verify pooled cells too.
    """
    pad = _pad(sandbox_key, ledger_cell, len(key))
    return base64.b64encode(bytes(a ^ b for a, b in zip(key, pad, strict=True))).decode()


def unwrap_cell_key(sandbox_key: bytes, ledger_cell: str, wrapped: str) -> bytes:
    """The cell key :func:`wrap_cell_key` hid for ``sandbox_key``; :class:`ValueError` when
    ``wrapped`` is not base64 text."""
    try:
        sealed = base64.b64decode(wrapped.encode("ascii"), validate=True)
    except (UnicodeEncodeError, ValueError) as err:
        raise ValueError(f"the wrapped ledger key is not base64: {err}") from err
    pad = _pad(sandbox_key, ledger_cell, len(sealed))
    return bytes(a ^ b for a, b in zip(sealed, pad, strict=True))
