"""A spool in front of a ledger store: a cell's records wait on local disk, then go in one write.

A cell's gateway seals its ``cell-meta``, every exchange and the controller's records as they
come; written straight through, each batch is one request to the store — with a ConfigMap
ledger, one Kubernetes API write (three or more per cell). :class:`SpooledBackend` appends
them instead to ``DIR/CELL.jsonl`` on a local disk and sends them to the store in one append
when :meth:`~SpooledBackend.flush` is called (the gateway calls it once the cell's
``cell-end`` is sealed, and when it stops), or early, when a cell's spool passes
``max_bytes`` (so the disk and what a lost pod takes with it stay bounded).

What survives what: ``DIR`` is meant to be a directory only the gateway mounts that outlives
its process but not its pod (an ``emptyDir``). A gateway the kubelet restarts finds its
spool and continues the chain after it (:meth:`~SpooledBackend.read` returns the stored lines
followed by the spooled ones), so a restart loses nothing it had sealed — and its
``restarted`` cell-meta goes on record as before. Lines are written without ``fsync``: the
page cache outlives the process, and a node that goes down takes the pod (and its cell,
errored with cause ``infra``) with it. A pod that is lost mid-cell leaves nothing of that
cell in the store where a write-through gateway left a partial chain; either way the cell is
errored and retried.

A crash between the store's write and the spool's truncation leaves lines in both; they are
told apart by their ``seq`` (a record's position in its cell): spooled lines the store
already holds are dropped when the cell is next read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from agent_health.ledger import errors, store, strictjson

DEFAULT_MAX_BYTES = 1024 * 1024
SUFFIX = ".jsonl"


class SpooledBackend:
    """``inner``'s appends held in ``directory`` until :meth:`flush` (see the module doc)."""

    def __init__(
        self, inner: store.Backend, directory: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if max_bytes <= 0:
            raise errors.BackendConfigError(f"spool max_bytes must be positive, not {max_bytes}")
        self.inner = inner
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.url = inner.url
        self.writes = 0
        """Appends sent to the store (each one batch of a cell's lines)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._reconciled: set[str] = set()

    def path(self, cell: str) -> Path:
        """The spool file of ``cell``."""
        return self.directory / f"{store.check_cell(cell)}{SUFFIX}"

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        """Add ``lines`` to the cell's spool; send the spool on once it passes ``max_bytes``."""
        if not lines:
            return
        for line in lines:
            _one_line(line)
        data = store.text_of(lines).encode("utf-8")
        async with self._lock(cell):
            await self._reconcile(cell)
            size = await asyncio.to_thread(_append, self.path(cell), data)
            if size > self.max_bytes:
                await self._push(cell)

    async def read(self, cell: str) -> list[str]:
        """The stored lines of ``cell``, then the spooled ones the store does not hold yet."""
        async with self._lock(cell):
            stored = await self.inner.read(cell)
            spooled = await self._spooled(cell)
            fresh = _after(spooled, len(stored))
            if len(fresh) != len(spooled):  # sent before a crash cut the truncation short
                await asyncio.to_thread(_rewrite, self.path(cell), fresh)
            self._reconciled.add(cell)
            return [*stored, *fresh]

    async def cells(self) -> list[str]:
        def scan() -> set[str]:
            if not self.directory.is_dir():
                return set()
            found = self.directory.glob(f"*{SUFFIX}")
            return {p.name[: -len(SUFFIX)] for p in found if p.stat().st_size > 0}

        try:
            spooled = await asyncio.to_thread(scan)
        except OSError as err:
            raise errors.BackendError(
                f"cannot list the ledger spool {self.directory}: {err.strerror or err}"
            ) from err
        return sorted(set(await self.inner.cells()) | spooled)

    async def flush(self) -> None:
        """Send every cell's spooled lines to the store (one append per cell), then make the
        store durable."""
        for cell in await self._pending():
            async with self._lock(cell):
                await self._reconcile(cell)
                await self._push(cell)
        await self.inner.flush()

    async def close(self) -> None:
        """Flush, then close the store (closed even when the flush fails)."""
        try:
            await self.flush()
        finally:
            await self.inner.close()

    # -- internals -------------------------------------------------------------------------

    def _lock(self, cell: str) -> asyncio.Lock:
        return self._locks.setdefault(cell, asyncio.Lock())

    async def _reconcile(self, cell: str) -> None:
        """Before this process first touches a cell's spool, drop what the store holds."""
        if cell in self._reconciled:
            return
        spooled = await self._spooled(cell)
        if spooled:
            stored = await self.inner.read(cell)
            fresh = _after(spooled, len(stored))
            if len(fresh) != len(spooled):
                await asyncio.to_thread(_rewrite, self.path(cell), fresh)
        self._reconciled.add(cell)

    async def _push(self, cell: str) -> None:
        lines = await self._spooled(cell)
        if not lines:
            return
        await self.inner.append(cell, lines)
        self.writes += 1
        # Only lines the store holds leave the spool: a failed append is tried again later.
        await asyncio.to_thread(_rewrite, self.path(cell), [])

    async def _spooled(self, cell: str) -> list[str]:
        path = self.path(cell)
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise errors.BackendError(
                f"cannot read the ledger spool {path}: {err.strerror or err}"
            ) from err
        return text.split("\n")[:-1] if text else []

    async def _pending(self) -> list[str]:
        def scan() -> list[str]:
            if not self.directory.is_dir():
                return []
            found = self.directory.glob(f"*{SUFFIX}")
            return sorted(p.name[: -len(SUFFIX)] for p in found if p.stat().st_size > 0)

        try:
            return await asyncio.to_thread(scan)
        except OSError as err:
            raise errors.BackendError(
                f"cannot list the ledger spool {self.directory}: {err.strerror or err}"
            ) from err


def check_directory(directory: str | Path) -> Path:
    """``directory``, created if needed, once it is known to be writable (a gateway checks
    its ``--spool`` at start, not at its first record)."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise errors.BackendConfigError(
            f"the ledger spool directory {path} is not writable ({err.strerror or err}); "
            "give the gateway a directory of its own that outlives its process (an emptyDir)"
        ) from err
    return path


def _one_line(line: str) -> str:
    if "\n" in line or "\r" in line:
        raise errors.BackendError("a ledger line must not contain a newline")
    return line


def _seq(line: str) -> int | None:
    try:
        payload = strictjson.loads(line)
    except ValueError:
        return None
    seq = payload.get("seq") if isinstance(payload, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _after(spooled: list[str], stored: int) -> list[str]:
    """The spooled lines from position ``stored`` of the cell on (the store holds the rest).

    A spool whose first line has no readable ``seq`` is kept whole: the chain's verification
    names what is wrong with it.
    """
    first = _seq(spooled[0]) if spooled else None
    if first is None or first >= stored:
        return spooled
    return spooled[stored - first :]


def _append(path: Path, data: bytes) -> int:
    """Append ``data`` with one ``O_APPEND`` write; the file's size after it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            return os.fstat(fd).st_size
        finally:
            os.close(fd)
    except OSError as err:
        raise errors.BackendError(
            f"cannot append to the ledger spool {path}: {err.strerror or err}"
        ) from err


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace the spool file by ``lines`` (atomically: a new file renamed over it)."""
    try:
        if not lines:
            path.unlink(missing_ok=True)
            return
        fresh = path.with_suffix(".tmp")
        fresh.write_text(store.text_of(lines), encoding="utf-8")
        os.replace(fresh, path)
    except OSError as err:
        raise errors.BackendError(
            f"cannot rewrite the ledger spool {path}: {err.strerror or err}"
        ) from err
