"""Making exchanges, and reading and editing a local run's ledger in tests, whatever its layout.

:func:`exchange` is one ``exchange`` record with the fields no test is about filled in.

A local run writes every cell into ``DIR/run.jsonl`` (one ``{"cell", "record"}`` line per
record, then the seal); a cell's gateway writes ``DIR/CELL.jsonl``. These helpers give the
record lines of each cell from either, and rewrite one cell's lines in place, as an attacker
with write access to the directory would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_health.ledger import observation, records, runfile

T0 = datetime(2025, 1, 1, tzinfo=UTC)
"""When every exchange :func:`exchange` makes started and ended, unless told."""


def exchange(**fields: Any) -> records.Exchange:
    """One exchange the gateway recorded: the controller's ``POST /run`` to the target,
    answered 200, at :data:`T0`, empty bodies — each field overridden by ``fields``."""
    made: dict[str, Any] = {
        "principal": "controller",
        "evidence": "none",
        "upstream": "target",
        "method": "POST",
        "path": "/run",
        "status": 200,
        "started_at": T0,
        "ended_at": T0,
        "request_bytes": 0,
        "request_sha256": "0" * 64,
    }
    return records.Exchange(**{**made, **fields})


def seen(**fields: Any) -> observation.Observation:
    """What the gateway saw of one exchange: the controller's ``POST /run`` to the target,
    answered 200, at :data:`T0` (epoch seconds), empty bodies — each field overridden by
    ``fields``."""
    at = T0.timestamp()
    made: dict[str, Any] = {
        "principal": "controller",
        "evidence": "none",
        "upstream": "target",
        "run_id": None,
        "method": "POST",
        "path": "/run",
        "status": 200,
        "started_at": at,
        "ended_at": at,
        "request_bytes": 0,
        "response_bytes": 0,
        "request_sha256": "0" * 64,
        "response_sha256": "0" * 64,
    }
    return observation.Observation(**{**made, **fields})


_OBSERVED = frozenset(observation.Observation._fields) & frozenset(records.Exchange.model_fields)


def seen_of(record: records.Exchange) -> observation.Observation:
    """What was seen of the exchange ``record`` (its times as epoch seconds)."""
    fields = {name: getattr(record, name) for name in _OBSERVED}
    fields.update(started_at=record.started_at.timestamp(), ended_at=record.ended_at.timestamp())
    return observation.Observation(**fields)


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
