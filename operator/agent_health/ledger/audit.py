"""Audit a whole ledger: verify every cell, as ``agent-health ledger verify PATH|URL`` does.

>>> import asyncio
>>> report = asyncio.run(verify_url("/tmp/no-such-ledger", b"k" * 32))
>>> report.ok, report.cells
(False, [])
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agent_health.ledger import backends, chain, errors, filestore, keys, runfile, store


class CellReport(BaseModel):
    """One cell's chain: how many records verified, and the first bad one if any."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    cell: str
    result: chain.VerifyResult

    def __str__(self) -> str:
        if self.result.ok:
            return f"{self.cell}: ok ({self.result.records} records)"
        return f"{self.cell}: {self.result.problem}"


class LedgerReport(BaseModel):
    """Every cell of a ledger, and what is wrong with the ledger as a whole (a local run's
    file: its seal, lines that belong to no cell). ``ok`` only when there is at least one
    cell, every cell verifies and there is no such problem; ``complete`` when, besides, no
    cell is missing its records (``refused``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    url: str
    cells: list[CellReport]
    problems: list[str] = []
    sealed: bool = False  # a run file whose seal holds
    refused: dict[str, str] = {}
    """Cells the run's seal names as not recorded (their records could not be sealed), and
    why: a test ran, but the ledger holds none of its records."""
    unreadable: list[str] = []
    """The run file's lines that are no cell's record (not JSON, after the seal): also in
    ``problems``, and the first thing to show, since the cells they belonged to then break."""

    @property
    def ok(self) -> bool:
        return (
            bool(self.cells or self.refused)
            and all(c.result.ok for c in self.cells)
            and not self.problems
        )

    @property
    def complete(self) -> bool:
        return self.ok and not self.refused

    @property
    def first_bad(self) -> CellReport | None:
        """The first cell (by name) whose chain does not verify."""
        return next((c for c in self.cells if not c.result.ok), None)


def verify_cell(cell: str, lines: list[str], key: bytes, *, complete: bool = True) -> CellReport:
    """One cell's chain, checked with the key that sealed it (:func:`.keys.sealing_key`)."""
    result = chain.verify(lines, keys.sealing_key(key, cell, lines), complete=complete)
    return CellReport(cell=cell, result=result)


async def verify_backend(
    backend: store.Backend, key: bytes, *, complete: bool = True
) -> LedgerReport:
    """Read and verify every cell of an open backend (and a directory's run file's seal)."""
    reports = []
    for cell in await backend.cells():
        lines = await backend.read(cell)
        reports.append(await asyncio.to_thread(verify_cell, cell, lines, key, complete=complete))
    return await whole(backend, key, reports, complete=complete)


async def whole(
    backend: store.Backend, key: bytes, reports: list[CellReport], *, complete: bool = True
) -> LedgerReport:
    """The ledger's report, given every cell's: a directory's run file's seal is checked
    against the cells' chains, and the cells it names as not recorded are counted."""
    run = await backend.run_file() if isinstance(backend, filestore.FileBackend) else None
    if run is None:
        return LedgerReport(url=backend.url, cells=reports)
    chains = {r.cell: (r.result.records, r.result.last_mac) for r in reports if r.cell in run.cells}
    problems = list(run.problems)
    seal = runfile.check_seal(key, run, chains)
    if seal is not None and not (run.seal is None and not complete):
        problems.append(seal)
    return LedgerReport(
        url=backend.url,
        cells=reports,
        problems=problems,
        unreadable=list(run.problems),
        sealed=seal is None,
        refused=runfile.refused_in(run) if seal is None else {},
    )


async def verify_url(
    url: str,
    key: bytes,
    *,
    options: store.Options | None = None,
    complete: bool = True,
) -> LedgerReport:
    """Verify the ledger at ``url``: a backend URL, a directory, one ``CELL.jsonl`` file, or
    a local run's ``run.jsonl``."""
    backend = await asyncio.to_thread(_open, url, options)
    try:
        return await verify_backend(backend, key, complete=complete)
    finally:
        await backend.close()


def _open(url: str, options: store.Options | None) -> store.Backend:
    path = (
        Path(url.removeprefix("file://")) if "://" not in url or url.startswith("file://") else None
    )
    if path is not None and path.suffix == filestore.SUFFIX:
        if not path.is_file():
            raise errors.BackendError(f"no ledger file {path}")
        if path.name == runfile.NAME:  # a local run's file: the cells of its directory
            return filestore.FileBackend(path.parent)
        return _SingleFile(path)
    return backends.from_url(url, options)


class _SingleFile(filestore.FileBackend):
    """A file backend that sees only one cell file, for ``ledger verify CELL.jsonl``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path.parent)
        self.url = f"file://{path}"
        self._cell = path.name[: -len(filestore.SUFFIX)]

    async def cells(self) -> list[str]:
        return [self._cell]
