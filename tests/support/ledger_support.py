"""Reading and editing a local run's ledger in tests, whatever its layout.

A local run writes every cell into ``DIR/run.jsonl`` (one ``{"cell", "record"}`` line per
record, then the seal); a cell's gateway writes ``DIR/CELL.jsonl``. These helpers give the
record lines of each cell from either, and rewrite one cell's lines in place, as an attacker
with write access to the directory would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agent_health.ledger import records, runfile


def cells(ledger: Path) -> dict[str, list[str]]:
    """Each cell's record lines, in order: from ``run.jsonl`` and from ``CELL.jsonl`` files."""
    found: dict[str, list[str]] = {}
    run = ledger / runfile.NAME
    if run.exists():
        parsed = runfile.parse(run, run.read_text())
        assert not parsed.problems, parsed.problems
        found.update(parsed.cells)
    for path in sorted(ledger.glob("*.jsonl")):
        if path.name != runfile.NAME:
            found[path.name.removesuffix(".jsonl")] = path.read_text().splitlines()
    return found


def parsed(ledger: Path) -> dict[str, list[records.Record]]:
    """Each cell's records."""
    return {cell: records.parse_lines(lines) for cell, lines in cells(ledger).items()}


def cell_where(ledger: Path, text: str) -> str:
    """The cell whose first record (its cell-meta) contains ``text``."""
    return next(cell for cell, lines in cells(ledger).items() if text in lines[0])


def rewrite(ledger: Path, cell: str, edit: Callable[[list[str]], list[str]]) -> None:
    """Replace ``cell``'s record lines by ``edit(lines)`` where they are stored."""
    run = ledger / runfile.NAME
    if not run.exists():
        path = ledger / f"{cell}.jsonl"
        path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
        return
    mine = iter(edit(cells(ledger)[cell]))
    out: list[str] = []
    for line in run.read_text().splitlines():
        payload = json.loads(line)
        if payload.get("cell") != cell:
            out.append(line)
            continue
        replacement = next(mine, None)
        if replacement is not None:
            out.append(runfile.frame(cell, replacement))
    out[-1:-1] = [runfile.frame(cell, rest) for rest in mine]  # lines added go before the seal
    run.write_text("\n".join(out) + "\n")
