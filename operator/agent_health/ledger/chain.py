"""The HMAC chain that makes a cell's ledger tamper-evident, and the writer that builds it.

Each record's ``mac`` is ``HMAC-SHA256(key, previous_mac || canonical(record without mac))``
in hex; the first record links to :data:`GENESIS`. ``seq`` is inside the MAC, so removing,
reordering or editing any record, or its MAC, breaks the chain at that record; a forged
record needs the key, which only the gateway reads. A cell ends with a ``cell-end`` record,
so cutting records off the end is caught too (``verify(..., complete=True)``).

>>> from agent_health.ledger import records
>>> key = b"k" * 32
>>> sealer = Sealer(key)
>>> lines = [records.dump_line(sealer.seal(records.CellMeta(test_id="t", repeat=0, run_id="r")))]
>>> verify(lines, key, complete=False).ok
True
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.ledger import encoding, errors, objects

if TYPE_CHECKING:
    from typing import TypeAlias

    from agent_health.ledger import records
    from agent_health.ledger.chaincheck import Problem as Problem
    from agent_health.ledger.chaincheck import VerifyResult as VerifyResult
    from agent_health.ledger.store import Backend

    Item: TypeAlias = records.Record | dict[str, Any] | objects.Written
    """What a :class:`Writer` seals: a record model, a record already in its JSON form (a
    builder of :mod:`.objects`), or one already written as its line but for ``seq`` and
    ``mac`` (``objects.mcp_text``: what the gateway makes of each MCP call, at a fraction
    of the model's cost)."""

GENESIS = "0" * 64
MIN_KEY_BYTES = 32
KEY_ENV = "AGENT_HEALTH_LEDGER_KEY"


def __getattr__(name: str) -> Any:
    # The verifier's models are shown here, with verify(); made when first read or when a
    # chain is first checked (:mod:`.chaincheck`), never by a run that only seals (issue #40).
    if name in ("Problem", "VerifyResult"):
        from agent_health.ledger import chaincheck

        return getattr(chaincheck, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def key_beside(url: str) -> Path:
    """Where a local run keeps the key of the file ledger ``url``: ``DIR.key`` beside ``DIR``.

    >>> key_beside("file://.agent-health/ledger/20260101T000000Z-ab12")
    PosixPath('.agent-health/ledger/20260101T000000Z-ab12.key')
    """
    _, sep, rest = url.partition("://")
    directory = Path(rest if sep else url).expanduser()
    return directory.parent / f"{directory.name or 'ledger'}.key"


def find_key(url: str, path: str | Path | None = None, env: str = KEY_ENV) -> tuple[bytes, str]:
    """The key to check ``url`` with, and where it came from.

    ``path`` when given; else, for a local (``file://`` or plain path) ledger, the ``DIR.key``
    its run wrote beside it (for one cell file ``DIR/CELL.jsonl``, beside ``DIR``); else the
    environment variable ``env``. A key beside the ledger wins over the variable: it was
    written for this ledger, the variable may be meant for another.
    """
    if path is not None:
        return load_key(path, env), f"key file {path}"
    scheme, sep, rest = url.partition("://")
    if not sep or scheme == "file":
        local = Path(rest if sep else url).expanduser()
        for candidate in (local, local.parent):
            beside = key_beside(str(candidate))
            if candidate.name and beside.is_file():
                return load_key(beside, env), f"key file {beside}"
    return load_key(None, env), f"${env}"


def load_key(path: str | Path | None = None, env: str = KEY_ENV) -> bytes:
    """The ledger key: the contents of ``path`` if given, else the environment variable ``env``.

    Trailing whitespace (a newline from ``echo``) is ignored. At least 32 bytes are needed.
    """
    if path is not None:
        try:
            key = Path(path).read_bytes().rstrip()
        except OSError as err:
            raise errors.LedgerKeyError(
                f"cannot read the ledger key file {path}: {err.strerror or err}"
            ) from err
        source = f"key file {path}"
    else:
        value = os.environ.get(env, "")
        if not value:
            raise errors.LedgerKeyError(
                f"no ledger key: pass the key file the ledger was written with (--key-file; "
                f"a local run writes DIR.key beside its ledger DIR) or set {env}"
            )
        key = value.strip().encode("utf-8")
        source = f"${env}"
    if len(key) < MIN_KEY_BYTES:
        raise errors.LedgerKeyError(
            f"the ledger key in {source} is {len(key)} bytes; at least {MIN_KEY_BYTES} "
            "are needed (head -c 32 /dev/urandom | base64)"
        )
    return key


class Mac:
    """HMAC-SHA256 under one key, keyed once: each MAC continues a copy of the keyed state.

    ``hmac.digest(key, ...)`` keys afresh on every call (and, on OpenSSL 3, looks the
    algorithm up again): about 7 us a record here, against 2 us for a copy.
    """

    def __init__(self, key: bytes) -> None:
        keyed = hmac.new(key, digestmod="sha256")
        # The keyed state itself when the standard library holds one (OpenSSL's HMAC, whose
        # copy, update and hexdigest are C): the ``hmac.HMAC`` wrapper around it adds a
        # frame of Python to each of them, most of a record's MAC here. Without it (no
        # OpenSSL HMAC) the wrapper, which has the same three methods.
        self._keyed: Any = getattr(keyed, "_hmac", None) or keyed

    def hex(self, *parts: bytes | memoryview) -> str:
        """The MAC of the concatenated ``parts``, in hex."""
        state = self._keyed.copy()
        for part in parts:
            state.update(part)
        hexed: str = state.hexdigest()
        return hexed


def link(key: bytes | Mac, previous_mac: str, payload: dict[str, Any]) -> str:
    """The MAC of one record's JSON data (``mac`` excluded) following ``previous_mac``."""
    body = {k: v for k, v in payload.items() if k != "mac"}
    mac = key if isinstance(key, Mac) else Mac(key)
    return mac.hex(previous_mac.encode("ascii"), encoding.canonical(body))


class Sealer:
    """Assigns ``seq`` and ``mac`` to records in order (no I/O; see :class:`Writer`)."""

    def __init__(
        self,
        key: bytes,
        *,
        next_seq: int = 0,
        previous_mac: str = GENESIS,
        ended: bool = False,
        _mac: Mac | None = None,
        _placeholder: bytes | None = None,
    ) -> None:
        self._key = key
        self._mac = _mac or Mac(key)
        self._placeholder = _placeholder or secrets.token_hex(32).encode("ascii")  # see line()
        self._placeholder_text = self._placeholder.decode("ascii")
        self._placeholder_field = b'"mac":"' + self._placeholder + b'"'
        self.next_seq = next_seq
        self.previous_mac = previous_mac
        self.ended = ended

    def fork(self) -> Sealer:
        """A copy that continues from here; the original is unaffected by its seals (a
        writer that seals many cells forks each from one sealer: the key is set up once)."""
        return Sealer(
            self._key,
            next_seq=self.next_seq,
            previous_mac=self.previous_mac,
            ended=self.ended,
            _mac=self._mac,
            _placeholder=self._placeholder,
        )

    def seal(self, record: records.Record) -> records.Record:
        """Return ``record`` with the next ``seq`` and its chained ``mac``."""
        return self.seal_line(record)[0]

    def seal_line(self, record: records.Record) -> tuple[records.Record, str]:
        """Seal ``record`` and also return its ledger line, serializing it only once."""
        line = self.line(record)
        sealed = record.model_copy(update={"seq": self.next_seq - 1, "mac": self.previous_mac})
        return sealed, line

    def line(self, record: records.Record) -> str:
        """Seal ``record`` into the chain and return only its ledger line (no sealed copy of
        the model: what a writer that keeps no records needs, at less cost)."""
        # Loaded here: a writer that seals JSON objects (line_of) never needs the models.
        from agent_health.ledger import records

        return self.line_of(records.to_object(record, with_mac=False))

    def line_of(self, payload: dict[str, Any]) -> str:
        """:meth:`line` of a record already in its JSON form (``records.to_object``, or a
        builder of :mod:`.objects`); ``payload`` gets its ``seq`` and ``mac``."""
        return self.line_bytes_of(payload).decode("ascii")

    def line_bytes_of(self, payload: dict[str, Any]) -> bytes:
        """:meth:`line_of` as the line's bytes (ASCII, as canonical JSON is): what a writer of
        bytes (the run file's) writes, without decoding the line and encoding it again."""
        kind = payload.get("kind")
        if self.ended:
            raise errors.ChainError("the cell has ended (cell-end written); nothing may follow")
        if self.next_seq == 0 and kind != "cell-meta":
            raise errors.ChainError(f"the first record of a cell must be cell-meta, not {kind}")
        payload["seq"] = self.next_seq
        # Canonical JSON sorts the keys, and "mac" falls between the others. The record is
        # serialized once with a random placeholder as its mac; the MAC is taken over those
        # bytes without the placeholder's field, and written in its place: the same bytes as
        # canonical(payload) hashed and canonical(payload with mac) written, at one encoding.
        placeholder = self._placeholder_field
        payload["mac"] = self._placeholder_text
        # Split at the placeholder in one call (bytes.partition takes its argument as is,
        # where each bytes.find parses its arguments the old way): what follows it must not
        # hold it again.
        before, found, after = encoding.canonical(payload).partition(placeholder)
        if not found or after.find(placeholder) >= 0:  # never by chance: the data holds it
            return self._line_in_parts(kind, payload)
        # "seq" always follows the mac: the body drops the field and its comma (read through
        # a view, not copied); the line is the two sides around the MAC.
        mac_hex = self._mac.hex(self.previous_mac.encode("ascii"), before, memoryview(after)[1:])
        line = b"".join((before, b'"mac":"', mac_hex.encode("ascii"), b'"', after))
        return self._advance(kind, mac_hex, line)

    def line_written(self, written: objects.Written) -> str:
        """:meth:`line_of` of a record already written as its line (``objects.mcp_text``):
        its ``seq`` and ``mac`` filled in, the text joined twice and encoded once."""
        kind = written.kind
        if self.ended:
            raise errors.ChainError("the cell has ended (cell-end written); nothing may follow")
        if self.next_seq == 0:
            raise errors.ChainError(f"the first record of a cell must be cell-meta, not {kind}")
        head, middle, tail = written.head, written.middle, written.tail
        seq = f'"seq":{self.next_seq},'
        body = f"{head}{middle}{seq}{tail}".encode("ascii")
        mac_hex = self._mac.hex(self.previous_mac.encode("ascii"), body)
        self.next_seq += 1
        self.previous_mac = mac_hex
        self.ended = kind == "cell-end"
        return f'{head}"mac":"{mac_hex}",{middle}{seq}{tail}'

    def _line_in_parts(self, kind: Any, payload: dict[str, Any]) -> bytes:
        """:meth:`line` the long way, encoded without the mac and with it."""
        del payload["mac"]
        body = encoding.canonical(payload)
        mac_hex = self._mac.hex(self.previous_mac.encode("ascii"), body)
        payload["mac"] = mac_hex
        return self._advance(kind, mac_hex, encoding.canonical(payload))

    def _advance(self, kind: Any, mac_hex: str, line: bytes) -> bytes:
        self.next_seq += 1
        self.previous_mac = mac_hex
        self.ended = kind == "cell-end"
        return line


class Writer:
    """Appends records to one cell of a backend, sealing each into the chain.

    Appends are serialized: concurrent ``append`` calls get consecutive ``seq`` numbers and
    reach the backend in that order. Use :meth:`open` to continue a cell that already has
    records (a restarted gateway), which verifies the stored chain first.
    """

    def __init__(
        self, backend: Backend, cell: str, key: bytes, sealer: Sealer | None = None
    ) -> None:
        self.backend = backend
        self.cell = cell
        self._sealer = sealer or Sealer(key)
        self._lock = asyncio.Lock()
        self._macs: list[str] = []  # of the last batch appended

    @classmethod
    async def open(cls, backend: Backend, cell: str, key: bytes) -> Writer:
        """A writer that continues the chain already stored for ``cell`` (or starts it)."""
        result = verify(await backend.read(cell), key, complete=False)
        if not result.ok:
            raise errors.ChainError(
                f"cell {cell}: the stored chain does not verify ({result.problem}); "
                "refusing to append to it"
            )
        sealer = Sealer(
            key, next_seq=result.records, previous_mac=result.last_mac, ended=result.ended
        )
        return cls(backend, cell, key, sealer)

    @property
    def next_seq(self) -> int:
        return self._sealer.next_seq

    async def append(self, *items: records.Record) -> list[records.Record]:
        """Seal ``items`` in order, append them as one batch, and return the sealed records."""
        async with self._lock:
            first = self._sealer.next_seq
            await self._append(items)
            return [
                item.model_copy(update={"seq": first + n, "mac": mac})
                for n, (item, mac) in enumerate(zip(items, self._macs, strict=True))
            ]

    async def write(self, *items: Item) -> None:
        """Seal and append ``items`` as one batch, without making sealed copies of them (the
        gateway's exchanges: nobody reads them back)."""
        async with self._lock:
            await self._append(items)

    async def _append(self, items: Sequence[Item]) -> None:
        trial = self._sealer.fork()
        lines, macs = [], []
        for item in items:
            if isinstance(item, objects.Written):
                lines.append(trial.line_written(item))
            elif isinstance(item, dict):
                lines.append(trial.line_of(dict(item)))
            else:
                lines.append(trial.line(item))
            macs.append(trial.previous_mac)
        await self.backend.append(self.cell, lines)
        # Only a stored batch advances the chain, so a failed write can be retried.
        self._sealer = trial
        self._macs = macs


def verify(lines: Iterable[str], key: bytes, *, complete: bool = True) -> VerifyResult:
    """Check a cell's lines against the chain and report the FIRST bad record.

    ``complete=True`` also requires the chain to end with a ``cell-end`` record (a finished
    cell); use ``complete=False`` for a cell that may still be running.
    """
    from agent_health.ledger import chaincheck

    mac = Mac(key)
    return chaincheck.walk(
        lines, lambda previous, payload: link(mac, previous, payload), complete, GENESIS
    )


def check_form(lines: Iterable[str], *, complete: bool = True) -> VerifyResult:
    """Everything :func:`verify` checks but the MACs, for a reader without the key: each
    line a valid record with a mac, seqs in order, cell-meta first, nothing after cell-end.
    A record without a mac, a removed or moved record is caught; an edited one is not —
    ``ok`` here is no proof (``--replay`` says the recording is unverified)."""
    from agent_health.ledger import chaincheck

    return chaincheck.walk(lines, None, complete, GENESIS)
