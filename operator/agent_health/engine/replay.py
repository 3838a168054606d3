"""Replaying a recorded run: ``agent-health run --replay REPORT_OR_DIR``.

Every run that records a ledger (the default; a cluster's cells always do) keeps, per
(test, repeat), what ``agent.run()`` returned: the ``run-result`` record
(:func:`.runrecord.run_record`). A replay runs the *current* test bodies and answers
``agent.run()`` from those records instead of calling the agent, so assertions, judges,
metrics and insights can be changed and run again without the agent (and, through the judge
cache, without paying for unchanged judge calls).

Where the recording comes from (:func:`locate`): a ledger (its directory, ``file://``,
``configmap://`` or ``s3://`` URL), or a JSON report, which names its ledger
(``provenance.ledger``, or the recording a replay report itself replayed) and each test's
cell. A report from ``agent-health grade`` names the ledger it graded, so cluster runs
replay the same way.

What is matched (:class:`Replayer`): the test id and repeat (and, in a recorded agent
matrix, the agent) pick the record; the prompt and
context the body sends must be the recorded ones. A body that asks something else errors
with "prompt differs from the recording" and cause ``test``: the test changed, so the
recording says nothing about how the agent would answer the new prompt — it must count
neither for nor against the agent (``agent`` would), and nothing outside the test is at
fault (``infra`` would say so); rerun against the agent to record the new prompt. A test
with no record errors the same way. A record cut to the recording's caps is errored with
cause ``infra`` (the storage, not the test, lacks the answer). A recorded failure of
``agent.run()`` (an HTTP 500, a timeout) is raised again with its recorded cause.

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
from typing import Any

from agent_health.connectors import errors as connector_errors
from agent_health.connectors.protocol import AgentReply, AgentRequest, Step, TokenUsage
from agent_health.engine import savedreport
from agent_health.ledger import audit, backends, chain, filestore, records, store
from agent_health.ledger import errors as ledger_errors
from agent_health.sdk import context as ctx_mod
from agent_health.sdk import errors

DIFFERS = "prompt differs from the recording"

Key = tuple[str | None, str, int]
"""A recorded run: (agent in a matrix or ``None``, test id, repeat)."""


class ReplayError(errors.AgentHealthError):
    """A recording that cannot be found or read (a usage error before the run starts), or
    one that cannot answer this test's ``agent.run()`` (the test errors)."""

    def __init__(self, message: str, *, cause: str = "test") -> None:
        super().__init__(message)
        self.error_cause = cause


class RecordedFailure(connector_errors.ConnectorError):
    """``agent.run()`` failed when it was recorded; the replay fails the same way."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.error_cause = cause


@dataclass(frozen=True)
class Recorded:
    """One (test, repeat) of the recording."""

    test_id: str
    repeat: int
    cell: str
    run_id: str
    run: records.RunResultRecord | None
    """``None``: the recorded body never called ``agent.run()``."""
    agent: str | None = None
    """The agent of a recorded agent matrix (``--agent a --agent b``); ``None`` otherwise."""

    @property
    def key(self) -> Key:
        return (self.agent, self.test_id, self.repeat)


@dataclass
class Recording:
    """Every recorded (test, repeat) of a run, and where they came from."""

    source: str
    ledger: str
    runs: dict[Key, Recorded] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Cells whose records could not be read, and why."""
    order: list[str] = field(default_factory=list)
    """A matrix's agents in the order the recorded run's report lists them."""
    verified: bool = False
    """Every cell's HMAC chain (and a run file's seal) verified with the ledger's key."""
    checked_with: str = ""
    """The key it was verified with (``key file DIR.key``), or why it was not."""

    @property
    def note(self) -> str:
        """What a replay says of its recording before it runs."""
        if self.verified:
            return f"replaying {self.ledger}: the recording verified with the {self.checked_with}"
        return (
            f"replaying an UNVERIFIED recording: {self.checked_with}; its records could "
            "have been edited since they were recorded (the report marks it unverified)"
        )

    @property
    def repeats(self) -> int:
        """The repeats the recorded run made (at least 1)."""
        return max((repeat for _, _, repeat in self.runs), default=0) + 1

    @property
    def agents(self) -> list[str]:
        """The agents of a recorded agent matrix, in the order the run named them (empty
        when it ran one agent): a replay runs the same matrix."""
        named = [a for a in self.order if any(k[0] == a for k in self.runs)]
        rest = sorted({k[0] for k in self.runs if k[0] is not None} - set(named))
        return [*named, *rest]

    def run_id(self, test_id: str, repeat: int, agent: str | None = None) -> str | None:
        """The recorded run id: the replay reuses it, so traces of the run are found again."""
        found = self.runs.get((agent, test_id, repeat))
        return found.run_id if found is not None else None


@dataclass(frozen=True)
class Located:
    """A recording's ledger, and the cell of each (test, repeat) when a report names them."""

    ledger: str
    cells: Mapping[Key, str] = field(default_factory=dict)
    agents: tuple[str, ...] = ()
    """A matrix report's agents, in its order."""


def locate(source: str) -> Located:
    """Where the recording named by ``--replay`` is; raises :class:`ReplayError` saying what
    to pass instead when it names none."""
    if "://" in source:
        return Located(source)
    path = Path(source).expanduser()
    if path.is_dir():
        if (path / "index.html").is_file() and not any(path.glob("*.jsonl")):
            raise ReplayError(
                f"{source} is an HTML report; replay the run's JSON report (--reporter json) "
                "or its ledger directory (.agent-health/ledger/...)"
            )
        return Located(f"file://{path}")
    if path.is_file() and path.suffix == ".jsonl":
        return Located(f"file://{path.parent}")
    if path.is_file():
        return _from_report(path)
    raise ReplayError(
        f"{source}: no such report or ledger; pass a JSON report (--reporter json:PATH), a "
        "ledger directory or a ledger URL"
    )


def _from_report(path: Path) -> Located:
    try:
        data = savedreport.read(path)
    except savedreport.ReportFileError as err:
        raise ReplayError(f"--replay {err}") from err
    made = data.get("provenance") or {}
    url = made.get("replay") or made.get("ledger")
    if not url:
        raise ReplayError(
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
) -> Recording:
    """Read the recording ``--replay SOURCE`` names (every cell, or a report's cells);
    ``options`` reach its ledger (a ``configmap://`` one needs the cluster's login).

    With the ledger's key at hand (``key_file``, a local run's ``DIR.key``, or
    ``$AGENT_HEALTH_LEDGER_KEY``) every cell's chain and a run file's seal are verified, and
    a recording that does not verify is refused (:class:`ReplayError`, naming the cell and
    the record). Without one, each cell's form is checked (every record sealed, in order)
    and the recording is marked unverified."""
    where = locate(source)
    key, checked_with = _key(source, where.ledger, key_file)
    try:
        backend = backends.from_url(where.ledger, options)
    except ledger_errors.LedgerError as err:
        raise ReplayError(f"--replay {source}: cannot open {where.ledger}: {err}") from err
    recording = Recording(source=source, ledger=where.ledger, order=list(where.agents))
    recording.checked_with = checked_with
    try:
        named = {cell: key for key, cell in where.cells.items()}
        wanted = set(named)
        verified: list[audit.CellReport] = []
        run = await backend.run_file() if isinstance(backend, filestore.FileBackend) else None
        if run is not None and run.problems:  # lines of no cell: the cells they were break
            raise ReplayError(_refusal(source, where.ledger, key, checked_with, run.problems[0]))
        for cell in sorted(await backend.cells()):
            if wanted and cell not in wanted and key is None:
                continue  # read every cell only to check the run's seal
            lines = await backend.read(cell)
            problem = await asyncio.to_thread(_check, cell, lines, key, verified)
            if problem is not None:
                raise ReplayError(_refusal(source, where.ledger, key, checked_with, problem))
            if wanted and cell not in wanted:
                continue
            try:
                found = _read_cell(cell, lines, named.get(cell))
            except (ledger_errors.LedgerError, ValueError) as err:
                recording.unreadable[cell] = str(err)
                continue
            if found is not None:
                _keep(recording.runs, found, where.cells)
        if key is not None:
            whole = await audit.whole(backend, key, verified)
            if whole.problems:
                raise ReplayError(
                    _refusal(source, where.ledger, key, checked_with, whole.problems[0])
                )
            for cell, why in whole.refused.items():
                recording.unreadable[cell] = f"its records could not be sealed when it ran: {why}"
    except ledger_errors.LedgerError as err:
        raise ReplayError(f"--replay {source}: cannot read {where.ledger}: {err}") from err
    finally:
        await backend.close()
    if not recording.runs and not recording.unreadable:
        raise ReplayError(f"--replay {source}: its ledger {where.ledger} holds no recorded cells")
    recording.verified = key is not None
    return recording


def _key(source: str, ledger: str, key_file: str | None) -> tuple[bytes | None, str]:
    """The key to verify the recording with and where it came from; ``None`` and why when
    there is none to be found (a key that is given but cannot be read is an error)."""
    try:
        return chain.find_key(ledger, key_file)
    except ledger_errors.LedgerKeyError as err:
        if key_file is not None or os.environ.get(chain.KEY_ENV):
            raise ReplayError(f"--replay {source}: {err}") from err
    return None, (
        f"no ledger key for {ledger} (a local run writes DIR.key beside its ledger DIR; "
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


def _read_cell(cell: str, lines: list[str], named: Key | None = None) -> Recorded | None:
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
        return Recorded(named[1], named[2], cell, meta.run_id, run, named[0])
    return Recorded(meta.test_id, meta.repeat, cell, meta.run_id, run, meta.agent)


def _keep(runs: dict[Key, Recorded], found: Recorded, named: Mapping[Key, str]) -> None:
    """Keep the cell a report names for its (agent, test, repeat); else the one that
    recorded an answer, the last attempt (``CELL.aN``) first."""
    key = found.key
    if named.get(key) == found.cell:
        runs[key] = found
        return
    held = runs.get(key)
    if held is None or (named.get(key) != held.cell and _rank(found) >= _rank(held)):
        runs[key] = found


def _rank(found: Recorded) -> tuple[bool, str]:
    return found.run is not None, found.cell


class Replayer:
    """The agent caller of a replay: answers ``agent.run()`` from the recording."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.answered = 0

    async def __call__(self, request: AgentRequest) -> AgentReply:
        ctx = ctx_mod.current("agent.run()")
        key = (ctx.info.agent, ctx.info.id, ctx.info.repeat)
        found = self.recording.runs.get(key)
        repeat = f" repeat {ctx.info.repeat + 1}" if ctx.info.repeat else ""
        agent = f" against agent {ctx.info.agent!r}" if ctx.info.agent else ""
        test = f"test {ctx.info.title!r}{repeat}{agent}"
        if found is None:
            raise ReplayError(
                f"no recording of {test} in {self.recording.source} "
                f"({self._why_missing(key)}); run it against the agent to record it"
            )
        run = found.run
        if run is None:
            raise ReplayError(
                f"the recorded run of {test} never called agent.run() (cell "
                f"{found.cell}); run it against the agent to record it"
            )
        if run.truncated:
            raise ReplayError(
                f"the recording of {test} was cut to its caps "
                f"({', '.join(run.truncated[:3])}): it is not the whole answer; run it "
                "against the agent",
                cause="infra",
            )
        if (run.prompt or "") != request.prompt:
            raise ReplayError(
                f"{DIFFERS} ({test}): recorded {_snip(run.prompt or '')!r}, the body now sends "
                f"{_snip(request.prompt)!r}; run it against the agent to record the new prompt"
            )
        sent = [{"description": c.description, "value": c.value} for c in request.context]
        if [{"description": c.get("description", ""), "value": c.get("value", "")}
                for c in run.context] != sent:  # fmt: skip
            raise ReplayError(
                f"context differs from the recording ({test}; the prompt is the same); run it "
                "against the agent to record the new context"
            )
        if run.error is not None:
            raise RecordedFailure(f"{run.error} (replayed)", cause=run.cause or "agent")
        ctx.replayed_duration_ms = run.duration_ms
        self.answered += 1
        return _reply(run)

    def _why_missing(self, key: Key) -> str:
        if self.recording.unreadable:
            cell, reason = next(iter(self.recording.unreadable.items()))
            return (
                f"{len(self.recording.unreadable)} recorded cells could not be read, e.g. "
                f"{cell}: {reason}"
            )
        if any(test_id == key[1] for _, test_id, _ in self.recording.runs):
            return f"it recorded {self.recording.repeats} repeats of it"
        return "the recorded run did not run this test"


def _reply(run: records.RunResultRecord) -> AgentReply:
    """The recorded answer as the connector would have returned it: what the agent left out
    (its trajectory, its token usage) is left out again."""
    fields: dict[str, Any] = dict(run.raw or {})
    unreported = set(run.unreported or ())
    if "trajectory" not in unreported:
        fields["trajectory"] = tuple(Step.model_validate(s) for s in run.trajectory)
    if "token_usage" not in unreported:
        fields["token_usage"] = TokenUsage.from_counts(run.token_usage) or TokenUsage()
    return AgentReply(output=run.output, **fields)


def _snip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
