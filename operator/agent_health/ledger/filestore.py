"""The local directory backend: ``file://DIR``, one ``CELL.jsonl`` per cell.

Each append is one ``write`` on a file opened with ``O_APPEND``, then ``fsync``, run in a
worker thread so the event loop never blocks; a per-cell lock keeps batches in call order.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from agent_health.ledger import errors, store

SUFFIX = ".jsonl"


class FileBackend:
    """Ledger lines in ``DIR/CELL.jsonl`` (the directory is created on first append)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.url = f"file://{self.directory}"
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_url(cls, url: str, options: store.Options) -> FileBackend:
        path = url.removeprefix("file://")
        if not path:
            raise errors.BackendConfigError(f"ledger URL {url!r} names no directory: file://DIR")
        return cls(Path(path).expanduser())

    def path(self, cell: str) -> Path:
        """The file that holds ``cell``."""
        return self.directory / f"{store.check_cell(cell)}{SUFFIX}"

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        path = self.path(cell)
        data = "".join(f"{line}\n" for line in _check_lines(lines)).encode("utf-8")
        if not data:
            return
        async with self._locks.setdefault(cell, asyncio.Lock()):
            await asyncio.to_thread(_append_durably, path, data)

    async def read(self, cell: str) -> list[str]:
        path = self.path(cell)
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as err:
            raise errors.BackendError(f"cannot read ledger {path}: {err.strerror or err}") from err
        lines = text.split("\n")
        return lines[:-1] if lines and lines[-1] == "" else lines

    async def cells(self) -> list[str]:
        def scan() -> list[str]:
            if not self.directory.is_dir():
                return []
            return sorted(p.name[: -len(SUFFIX)] for p in self.directory.glob(f"*{SUFFIX}"))

        try:
            return await asyncio.to_thread(scan)
        except OSError as err:
            raise errors.BackendError(
                f"cannot list ledger directory {self.directory}: {err.strerror or err}"
            ) from err

    async def flush(self) -> None:
        """Nothing is buffered: every append is fsync'ed before it returns."""

    async def close(self) -> None:
        """No handles are kept open between appends."""


def _check_lines(lines: Sequence[str]) -> Sequence[str]:
    for line in lines:
        if "\n" in line or "\r" in line:
            raise errors.BackendError("a ledger line must not contain a newline")
    return lines


def _append_durably(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise errors.BackendError(f"cannot append to ledger {path}: {err.strerror or err}") from err
