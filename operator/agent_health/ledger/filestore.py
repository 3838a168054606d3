"""The local directory backend: ``file://DIR``, one ``CELL.jsonl`` per cell.

Each append is one ``write`` on a file opened with ``O_APPEND``, then ``fsync``, run in a
worker thread so the event loop never blocks; a per-cell lock keeps batches in call order.
This is how a cell's gateway writes. A local run writes every cell into one ``run.jsonl``
instead (:mod:`.runfile`); reading, this backend sees the cells of both layouts.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from agent_health.ledger import errors, runfile, store

SUFFIX = ".jsonl"
_RUN = runfile.NAME.removesuffix(SUFFIX)


class FileBackend:
    """Ledger lines in ``DIR/CELL.jsonl`` (the directory is created on first append)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.url = f"file://{self.directory}"
        self._locks: dict[str, asyncio.Lock] = {}
        self._run: tuple[tuple[int, int], runfile.Parsed] | None = None  # (mtime, size), parsed

    @classmethod
    def from_url(cls, url: str, options: store.Options) -> FileBackend:
        path = url.removeprefix("file://")
        if not path:
            raise errors.BackendConfigError(f"ledger URL {url!r} names no directory: file://DIR")
        return cls(Path(path).expanduser())

    def path(self, cell: str) -> Path:
        """The file that holds ``cell``."""
        if store.check_cell(cell) == _RUN:
            raise errors.BackendConfigError(
                f"the cell name {cell!r} is taken by the run file ({runfile.NAME}); choose another"
            )
        return self.directory / f"{cell}{SUFFIX}"

    async def run_file(self) -> runfile.Parsed | None:
        """The directory's run file, parsed (``None`` when there is none)."""
        path = self.directory / runfile.NAME

        def load() -> runfile.Parsed | None:
            try:
                stat = path.stat()
            except FileNotFoundError:
                return None
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._run is None or self._run[0] != stamp:
                self._run = stamp, runfile.parse(path, path.read_text(encoding="utf-8"))
            return self._run[1]

        try:
            return await asyncio.to_thread(load)
        except OSError as err:
            raise errors.BackendError(f"cannot read ledger {path}: {err.strerror or err}") from err

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        path = self.path(cell)
        data = store.text_of(_check_lines(lines)).encode("utf-8")
        if not data:
            return
        async with self._locks.setdefault(cell, asyncio.Lock()):
            await asyncio.to_thread(_append_durably, path, data)

    async def read(self, cell: str) -> list[str]:
        path = self.path(cell)
        run = await self.run_file()
        from_run = run.cells.get(cell, []) if run is not None else []
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return list(from_run)
        except OSError as err:
            raise errors.BackendError(f"cannot read ledger {path}: {err.strerror or err}") from err
        lines = text.split("\n")
        return [*(lines[:-1] if lines and lines[-1] == "" else lines), *from_run]

    async def cells(self) -> list[str]:
        def scan() -> list[str]:
            if not self.directory.is_dir():
                return []
            return [p.name[: -len(SUFFIX)] for p in self.directory.glob(f"*{SUFFIX}")]

        try:
            found = set(await asyncio.to_thread(scan)) - {_RUN}
            run = await self.run_file()
            return sorted(found | set(run.cells if run is not None else ()))
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
