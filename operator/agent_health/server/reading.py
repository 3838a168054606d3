"""The read API: runs (filtered by agent, label, branch, how they ended), one run with its
results and evidence, one test across runs, flaky tests, regressions, and any two runs
compared with ``compare``'s statistics. Every answer is a typed value of the history's
(:mod:`agent_health.history.answers`) or of ``compare``'s; every query runs in a reader thread.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
from aiohttp import web

from agent_health import history
from agent_health.engine import comparing
from agent_health.server import routes, state

table = routes.Table()
Ending = Literal["green", "failed", "errored", "incomplete"]


class RunsQuery(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    agent: str | None = pydantic.Field(default=None, description="an agent's name or URL")
    label: str | None = pydantic.Field(default=None, description="runs counted over tests with it")
    branch: str | None = pydantic.Field(default=None, description="the git (or CI) branch")
    status: Ending | None = pydantic.Field(
        default=None,
        description="green (passed whole), failed, errored (other errors only), incomplete",
    )
    since: datetime.datetime | None = pydantic.Field(default=None, description="ISO 8601")
    limit: int = pydantic.Field(default=50, ge=1, le=1000)
    offset: int = pydantic.Field(default=0, ge=0)


class ResultsQuery(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    status: Literal["passed", "failed", "errored", "skipped", "flaky"] | None = None
    offset: int = pydantic.Field(default=0, ge=0)
    limit: int = pydantic.Field(default=2000, ge=1, le=10_000)


class TestQuery(pydantic.BaseModel):
    __test__ = False
    model_config = pydantic.ConfigDict(extra="forbid")

    id: str = pydantic.Field(
        min_length=1, description="a test's id, or a regular expression of ids and titles"
    )
    agent: str | None = None
    limit: int = pydantic.Field(default=50, ge=1, le=1000, description="its newest runs")


class FlakyQuery(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    runs: int = pydantic.Field(default=50, ge=2, le=1000, description="the newest runs looked at")
    agent: str | None = None
    label: str | None = None


class CompareQuery(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    base: str = pydantic.Field(min_length=1, description="the baseline run's uid (or part)")
    new: str = pydantic.Field(min_length=1, description="the run compared with it")
    alpha: float = pydantic.Field(default=0.05, gt=0, lt=1)


class Evidence(pydantic.BaseModel):
    """What stands behind a run's results, when it is at hand on this server."""

    report: bool = pydantic.Field(description="its JSON report can be read here")
    report_path: str | None
    ledger_url: str | None
    ledger_verified: bool | None = pydantic.Field(
        description="as recorded: a local run's ledger sealed whole by the run that wrote it, "
        "an operator run's every cell's HMAC chain verified as it was graded; None: no ledger, "
        "or not said"
    )
    ledger_at_hand: bool = pydantic.Field(
        default=False,
        description="its ledger and the key beside it are on this server's disk: "
        "POST /api/runs/RUN/ledger/verify checks it now",
    )


class BadRecord(pydantic.BaseModel):
    """The first thing in a ledger that does not verify."""

    cell: str | None = pydantic.Field(description="its cell (None: the run file as a whole)")
    line: int | None = pydantic.Field(description="the line in the cell's records")
    seq: int | None = pydantic.Field(description="the records before it that verified")
    reason: str = pydantic.Field(
        description="edited, removed, reordered, unsealed, truncated, bad-json, ...; seal: the "
        "run file's seal; unreadable: a line of the run file that is no cell's record"
    )
    message: str


class LedgerCheck(pydantic.BaseModel):
    """A run's ledger verified now, as ``agent-health ledger verify`` verifies it: every cell's
    HMAC chain, and a local run's seal over them."""

    url: str
    ok: bool = pydantic.Field(description="every cell verifies, and the seal when there is one")
    cells: int
    records: int = pydantic.Field(description="the records that verified, in every cell")
    sealed: bool = pydantic.Field(description="a local run's file whose seal holds")
    refused: dict[str, str] = pydantic.Field(
        description="cells the seal names as not recorded (their records could not be sealed)"
    )
    first_bad: BadRecord | None = pydantic.Field(description="where it first fails to verify")


class RunPage(pydantic.BaseModel):
    """One run: the history's row and what stands behind it."""

    run: history.Run
    evidence: Evidence


class Compared(pydantic.BaseModel):
    """Two runs compared as ``agent-health compare`` compares their reports."""

    base: history.Run
    new: history.Run
    from_reports: bool = pydantic.Field(
        description="both sides are the runs' own JSON reports (conversations' turns "
        "compared too); else the history's rows"
    )
    comparison: comparing.Comparison


def _missing(err: history.HistoryError) -> web.HTTPException:
    found = isinstance(err, history.NotFoundError)
    status = web.HTTPNotFound if found else web.HTTPServiceUnavailable
    return status(text=routes.problem(str(err)), content_type="application/json")


T = TypeVar("T")


async def _asked(served: state.State, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A history query in a reader thread (:meth:`.state.State.read`), its errors answered
    as HTTP: a run or test it does not hold is 404, a history it cannot read 503."""
    try:
        return await served.read(call, *args, **kwargs)
    except history.HistoryError as err:
        raise _missing(err) from err


@table.route(
    "GET",
    "/api/runs",
    summary="the newest runs, newest first",
    tag="runs",
    query=RunsQuery,
    answer=list[history.Run],
)
async def list_runs(served: state.State, request: web.Request, q: RunsQuery, _: None) -> Any:
    return await _asked(
        served,
        served.history.runs,
        agent=q.agent,
        label=q.label,
        since=q.since,
        limit=q.limit,
        branch=q.branch,
        ending=q.status,
        offset=q.offset,
    )


@table.route(
    "GET",
    "/api/runs/{uid}",
    summary="one run and what stands behind it",
    tag="runs",
    answer=RunPage,
)
async def one_run(served: state.State, request: web.Request, _q: None, _b: None) -> Any:
    run = await _asked(served, served.history.run, request.match_info["uid"])
    at_hand = run.report_path is not None and await served.read(_readable, run.report_path)
    key = await served.read(ledger_key, run.ledger_url)
    return RunPage(
        run=run,
        evidence=Evidence(
            report=bool(at_hand),
            report_path=run.report_path,
            ledger_url=run.ledger_url,
            ledger_verified=run.ledger_verified,
            ledger_at_hand=key is not None,
        ),
    )


@table.route(
    "POST",
    "/api/runs/{uid}/ledger/verify",
    summary="verify a run's ledger now (its "
    "cells' HMAC chains and its seal), when it is on this server's disk with its key",
    tag="runs",
    answer=LedgerCheck,
)
async def verify_ledger(served: state.State, request: web.Request, _q: None, _b: None) -> Any:
    run = await _asked(served, served.history.run, request.match_info["uid"])
    if run.ledger_url is None:
        raise web.HTTPNotFound(
            text=routes.problem(f"run {run.uid} recorded no ledger"),
            content_type="application/json",
        )
    key = await served.read(ledger_key, run.ledger_url)
    if key is None:
        raise web.HTTPConflict(
            text=routes.problem(
                f"the ledger {run.ledger_url} is not at hand here (the server verifies a ledger "
                "on its own disk, with the key its run wrote beside it); verify it where it is: "
                f"agent-health ledger verify {run.ledger_url} --key-file KEY"
            ),
            content_type="application/json",
        )
    # Reading and hashing every record is seconds of CPU for a big run: in a reader thread
    # (its own event loop there), one verification at a time.
    async with served.verifying:
        return await served.read(verified, run.ledger_url, key)


def ledger_key(url: str | None) -> Path | None:
    """The key beside a local ledger on this machine (``DIR.key`` beside its directory, or
    beside the directory of a ``run.jsonl``); ``None`` when the ledger is not here."""
    from agent_health import ledger

    if not url:
        return None
    scheme, sep, rest = url.partition("://")
    if sep and scheme != "file":
        return None
    path = Path(rest if sep else url)
    if not path.exists():
        return None
    for candidate in (path, path.parent):
        beside = ledger.key_beside(str(candidate))
        if candidate.name and beside.is_file():
            return beside
    return None


def verified(url: str, key_file: Path) -> LedgerCheck:
    """``url`` verified with the key in ``key_file`` (blocking: call it in a thread)."""
    import asyncio

    from agent_health import ledger

    try:
        key = ledger.load_key(key_file)
        report = asyncio.run(ledger.verify_url(url, key))
    except ledger.LedgerError as err:
        raise web.HTTPConflict(
            text=routes.problem(f"the ledger {url} cannot be verified here: {err}"),
            content_type="application/json",
        ) from err
    first = None
    bad = report.first_bad
    if report.unreadable:
        first = BadRecord(
            cell=None, line=None, seq=None, reason="unreadable", message=report.unreadable[0]
        )
    elif bad is not None and bad.result.problem is not None:
        problem = bad.result.problem
        first = BadRecord(
            cell=bad.cell,
            line=problem.line,
            seq=problem.seq,
            reason=problem.reason,
            message=problem.message,
        )
    elif report.problems:
        first = BadRecord(cell=None, line=None, seq=None, reason="seal", message=report.problems[0])
    return LedgerCheck(
        url=report.url,
        ok=report.ok,
        cells=len(report.cells),
        records=sum(c.result.records for c in report.cells),
        sealed=report.sealed,
        refused=dict(report.refused),
        first_bad=first,
    )


@table.route(
    "GET",
    "/api/runs/{uid}/results",
    summary="a page of one run's results",
    tag="runs",
    query=ResultsQuery,
    answer=history.Results,
)
async def run_results(served: state.State, request: web.Request, q: ResultsQuery, _: None) -> Any:
    # The page's JSON, written in the reader thread straight from the rows: neither
    # 2,000 models nor their serialization on the event loop (bench/serve.py).
    data = await _asked(
        served,
        served.history.results_json,
        request.match_info["uid"],
        status=q.status,
        offset=q.offset,
        limit=q.limit,
    )
    return web.Response(body=data, content_type="application/json", charset="utf-8")


@table.route(
    "GET",
    "/api/tests",
    summary="tests across runs (each with its latest break)",
    tag="tests",
    query=TestQuery,
    answer=list[history.TestHistory],
)
async def one_test(served: state.State, request: web.Request, q: TestQuery, _b: None) -> Any:
    return await _asked(served, served.history.timeline, q.id, agent=q.agent, limit=q.limit)


@table.route(
    "GET",
    "/api/flaky",
    summary="tests whose outcome flips while nothing changed",
    tag="tests",
    query=FlakyQuery,
    answer=list[history.Flaky],
)
async def flaky(served: state.State, request: web.Request, q: FlakyQuery, _: None) -> Any:
    return await _asked(served, served.history.flaky, runs=q.runs, agent=q.agent, label=q.label)


@table.route(
    "GET",
    "/api/regressions",
    summary="tests that passed in an agent's previous run and not in the next",
    tag="tests",
    query=FlakyQuery,
    answer=list[history.Regression],
)
async def regressions(served: state.State, request: web.Request, q: FlakyQuery, _: None) -> Any:
    return await _asked(
        served, served.history.regressions, runs=q.runs, agent=q.agent, label=q.label
    )


@table.route(
    "GET",
    "/api/compare",
    summary="two runs compared (newly failing, significant changes, per-turn differences)",
    tag="runs",
    query=CompareQuery,
    answer=Compared,
)
async def compare(served: state.State, request: web.Request, q: CompareQuery, _: None) -> Any:
    try:
        return await _asked(served, _compared, served.history, q.base, q.new, q.alpha)
    except comparing.CompareError as err:
        raise web.HTTPBadRequest(
            text=routes.problem(str(err)), content_type="application/json"
        ) from err


def _compared(opened: history.History, base_uid: str, new_uid: str, alpha: float) -> Compared:
    """Both runs' own reports when both are at hand (the turns of conversations compared
    too), else both rebuilt from the history; either way ``compare`` compares them."""
    base_run, base = opened.baseline(base_uid)
    new_run, new = opened.baseline(new_uid)
    own = [_own_report(run) for run in (base_run, new_run)]
    from_reports = all(r is not None for r in own)
    if from_reports:
        base, new = own[0] or base, own[1] or new
    result = comparing.compare_reports(
        base,
        new,
        base_file=f"run {base_run.uid}",
        new_file=f"run {new_run.uid}",
        alpha=alpha,
        allow_replayed=True,
    )
    return Compared(base=base_run, new=new_run, from_reports=from_reports, comparison=result)


def _own_report(run: history.Run) -> dict[str, Any] | None:
    if run.report_path is None or not _readable(run.report_path):
        return None
    try:
        found = comparing.load_report(Path(run.report_path))
    except comparing.CompareError:
        return None
    if ((found.get("provenance") or {}).get("run_id") or run.uid) != run.uid:
        return None  # the file was overwritten by a later run since
    return found


def _readable(path: str) -> bool:
    return Path(path).is_file()


def report_json(run: history.Run, rebuilt: dict[str, Any]) -> str:
    """The report a run's inspector shows: its own JSON report when at hand and still this
    run's, else the one rebuilt from the history."""
    own = _own_report(run)
    return json.dumps(own if own is not None else rebuilt, ensure_ascii=False, allow_nan=False)
