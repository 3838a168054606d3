"""The recording ``agent-health run --replay SOURCE`` answers from: where it is, read and
checked before anything runs (:mod:`.replay` answers ``agent.run()`` from it).

Where it comes from (:func:`locate`): a ledger (its directory, ``file://``,
``configmap://`` or ``s3://`` URL), or a JSON report, which names its ledger
(``provenance.ledger``, or the recording a replay report itself replayed) and each test's
cell. A report from ``agent-health grade`` names the ledger it graded, so cluster runs
replay the same way.

What is trusted (:func:`load`): with the ledger's key at hand — a local run's ``DIR.key``
beside its ledger, ``--key-file``, or ``$AGENT_HEALTH_LEDGER_KEY`` (a cluster run's key) —
every cell's HMAC chain is verified, and a local run file's seal, before anything runs; a
recording that does not verify (an edited ``output``, a record without a mac, a cell cut
short or added, an unsealed run file) is refused, naming the cell and the record. Without a
key each cell's form is still checked (every record sealed, in order), the replay says the
recording is unverified, and the report marks it so (``provenance.replay_verified``
false): the records could have been edited, and only the key can tell.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent_health import ledger
from agent_health.engine import reports
from agent_health.engine.recording import replay
from agent_health.ledger import audit, backends, chain, filestore, records, store


@dataclass(frozen=True)
class Located:
    """A recording's ledger, and the cell of each (test, repeat) when a report names them."""

    ledger: str
    cells: Mapping[replay.Key, str] = field(default_factory=dict)
    agents: tuple[str, ...] = ()
    """A matrix report's agents, in its order."""


def locate(source: str) -> Located:
    """Where the recording named by ``--replay`` is; raises :class:`.replay.ReplayError`
    saying what to pass instead when it names none."""
    if "://" in source:
        return Located(source)
    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "index.html").is_file() and not any(path.glob("*.jsonl")):
            raise replay.ReplayError(
                f"{source} is an HTML report; replay the run's JSON report (--reporter json) "
                "or its ledger directory (.agent-health/ledger/...)"
            )
        return Located(f"file://{path}")
    if path.is_file() and path.suffix == ".jsonl":
        return Located(f"file://{path.parent}")
    if path.is_file():
        return _from_report(path)
    raise replay.ReplayError(
        f"{source}: no such report or ledger; pass a JSON report (--reporter json:PATH), a "
        "ledger directory or a ledger URL"
    )


def _from_report(path: Path) -> Located:
    try:
        data = reports.read_report(path)
    except reports.ReportFileError as err:
        raise replay.ReplayError(f"--replay {err}") from err
    made = data.get("provenance") or {}
    url = made.get("replay") or made.get("ledger")
    if not url:
        raise replay.ReplayError(
            f"{path}: this run kept no recording (it ran with --no-ledger, or its report "
            "predates provenance); run it again with the ledger on (the default) to replay it"
        )
    tests = data["tests"]  # each with an id, a whole repeat and unique (savedreport)
    cells = {
        (t.get("agent"), str(t["id"]), int(t.get("repeat") or 0)): str(t["ledger_cell"])
        for t in tests
        if t.get("ledger_cell")
    }
    agents = tuple(dict.fromkeys(str(t["agent"]) for t in tests if t.get("agent")))
    return Located(_beside(str(url), path), cells, agents)


def _beside(url: str, report: Path) -> str:
    """A relative ``file://`` ledger is relative to where its run started; when that is not
    here, try the report's own folder (a report is usually written where the run started)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme != "file":
        return url
    relative = Path(rest if sep else url)
    if relative.is_absolute() or relative.exists():
        return url
    beside = report.resolve().parent / relative
    return f"file://{beside}" if beside.exists() else url


async def load(
    source: str, options: store.Options | None = None, *, key_file: str | None = None
) -> replay.Recording:
    """Read the recording ``--replay SOURCE`` names (every cell, or a report's cells);
    ``options`` reach its ledger (a ``configmap://`` one needs the cluster's login).

    With the ledger's key at hand (``key_file``, a local run's ``DIR.key``, or
    ``$AGENT_HEALTH_LEDGER_KEY``) every cell's chain and a run file's seal are verified, and
    a recording that does not verify is refused (:class:`.replay.ReplayError`, naming the
    cell and the record). Without one, each cell's form is checked (every record sealed, in
    order) and the recording is marked unverified."""
    where = locate(source)
    key, checked_with = _key(source, where.ledger, key_file)
    try:
        backend = backends.from_url(where.ledger, options)
    except ledger.LedgerError as err:
        raise replay.ReplayError(f"--replay {source}: cannot open {where.ledger}: {err}") from err
    recording = replay.Recording(source=source, ledger=where.ledger, order=list(where.agents))
    recording.checked_with = checked_with
    try:
        named = {cell: key for key, cell in where.cells.items()}
        wanted = set(named)
        verified: list[audit.CellReport] = []
        run = await backend.run_file() if isinstance(backend, filestore.FileBackend) else None
        if run is not None and run.problems:  # lines of no cell: the cells they were break
            raise replay.ReplayError(
                _refusal(source, where.ledger, key, checked_with, run.problems[0])
            )
        for cell in sorted(await backend.cells()):
            if wanted and cell not in wanted and key is None:
                continue  # read every cell only to check the run's seal
            lines = await backend.read(cell)
            problem = await asyncio.to_thread(_check, cell, lines, key, verified)
            if problem is not None:
                raise replay.ReplayError(_refusal(source, where.ledger, key, checked_with, problem))
            if wanted and cell not in wanted:
                continue
            try:
                found = _read_cell(cell, lines, named.get(cell))
            except (ledger.LedgerError, ValueError) as err:
                recording.unreadable[cell] = str(err)
                continue
            if found is not None:
                _keep(recording.runs, found, where.cells)
        if key is not None:
            whole = await audit.whole(backend, key, verified)
            if whole.problems:
                raise replay.ReplayError(
                    _refusal(source, where.ledger, key, checked_with, whole.problems[0])
                )
            for cell, why in whole.refused.items():
                recording.unreadable[cell] = f"its records could not be sealed when it ran: {why}"
    except ledger.LedgerError as err:
        raise replay.ReplayError(f"--replay {source}: cannot read {where.ledger}: {err}") from err
    finally:
        await backend.close()
    if not recording.runs and not recording.unreadable:
        raise replay.ReplayError(
            f"--replay {source}: its ledger {where.ledger} holds no recorded cells"
        )
    recording.verified = key is not None
    return recording


def _key(source: str, where: str, key_file: str | None) -> tuple[bytes | None, str]:
    """The key to verify the recording with and where it came from; ``None`` and why when
    there is none to be found (a key that is given but cannot be read is an error)."""
    try:
        return chain.find_key(where, key_file)
    except ledger.LedgerKeyError as err:
        if key_file is not None or os.environ.get(chain.KEY_ENV):
            raise replay.ReplayError(f"--replay {source}: {err}") from err
    return None, (
        f"no ledger key for {where} (a local run writes DIR.key beside its ledger DIR; "
        f"pass --key-file or set ${chain.KEY_ENV})"
    )


def _check(
    cell: str, lines: list[str], key: bytes | None, verified: list[audit.CellReport]
) -> str | None:
    """What is wrong with ``cell``'s chain (its MACs with ``key``; else its form), if
    anything; a verified cell's report is added to ``verified``."""
    if key is None:
        form = chain.check_form(lines)
        return None if form.ok else f"cell {cell}: {form.problem}"
    report = audit.verify_cell(cell, lines, key)
    verified.append(report)
    return None if report.result.ok else f"cell {report}"


def _refusal(source: str, ledger: str, key: bytes | None, checked_with: str, problem: str) -> str:
    what = "is broken" if key is None else f"does not verify with the {checked_with}"
    return (
        f"--replay {source}: the recording {what}: {problem}; refusing to replay a recording "
        f"changed after it was recorded (check it with: agent-health ledger verify {ledger})"
    )


def _read_cell(
    cell: str, lines: list[str], named: replay.Key | None = None
) -> replay.Recorded | None:
    """The cell's record; ``named``: the (agent, test, repeat) the report says the cell ran
    (a cluster cell's own records do not name its agent: the operator knows it)."""
    meta: records.CellMeta | None = None
    run: records.RunResultRecord | None = None
    for record in records.parse_lines(lines):
        if isinstance(record, records.CellMeta) and meta is None:
            meta = record
        elif isinstance(record, records.RunResultRecord):
            run = record
    if meta is None:
        return None
    if named is not None:
        return replay.Recorded(named[1], named[2], cell, meta.run_id, run, named[0])
    return replay.Recorded(meta.test_id, meta.repeat, cell, meta.run_id, run, meta.agent)


def _keep(
    runs: dict[replay.Key, replay.Recorded], found: replay.Recorded, named: Mapping[replay.Key, str]
) -> None:
    """Keep the cell a report names for its (agent, test, repeat); else the one that
    recorded an answer, the last attempt (``CELL.aN``) first."""
    key = found.key
    if named.get(key) == found.cell:
        runs[key] = found
        return
    held = runs.get(key)
    if held is None or (named.get(key) != held.cell and _rank(found) >= _rank(held)):
        runs[key] = found


def _rank(found: replay.Recorded) -> tuple[bool, str]:
    return found.run is not None, found.cell
