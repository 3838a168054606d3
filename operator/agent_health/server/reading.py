"""The read API: runs (filtered by agent, label, branch, how they ended), one run with its
results and evidence, one test across runs, flaky tests, regressions, and any two runs
compared with ``compare``'s statistics. Every answer is a typed value of the history's
(:mod:`agent_health.history.facts`) or of ``compare``'s; every query runs in a reader thread.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Literal

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
        description="whether its ledger's HMAC chain verified when it was recorded; None: "
        "not checked"
    )


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


@table.route("GET", "/api/runs", summary="the newest runs, newest first", tag="runs",
             query=RunsQuery, answer=list[history.Run])  # fmt: skip
async def list_runs(served: state.State, request: web.Request, q: RunsQuery, _: None) -> Any:
    try:
        return await served.read(
            served.history.runs, agent=q.agent, label=q.label, since=q.since, limit=q.limit,
            branch=q.branch, ending=q.status, offset=q.offset,
        )  # fmt: skip
    except history.HistoryError as err:
        raise _missing(err) from err


@table.route("GET", "/api/runs/{uid}", summary="one run and what stands behind it", tag="runs",
             answer=RunPage)  # fmt: skip
async def one_run(served: state.State, request: web.Request, _q: None, _b: None) -> Any:
    try:
        run = await served.read(served.history.run, request.match_info["uid"])
    except history.HistoryError as err:
        raise _missing(err) from err
    at_hand = run.report_path is not None and await served.read(_readable, run.report_path)
    return RunPage(
        run=run,
        evidence=Evidence(
            report=bool(at_hand),
            report_path=run.report_path,
            ledger_url=run.ledger_url,
            ledger_verified=run.ledger_verified,
        ),
    )


@table.route("GET", "/api/runs/{uid}/results", summary="a page of one run's results",
             tag="runs", query=ResultsQuery, answer=history.Results)  # fmt: skip
async def run_results(served: state.State, request: web.Request, q: ResultsQuery, _: None) -> Any:
    try:
        # The page's JSON, written in the reader thread straight from the rows: neither
        # 2,000 models nor their serialization on the event loop (bench/serve.py).
        data = await served.read(
            served.history.results_json, request.match_info["uid"], status=q.status,
            offset=q.offset, limit=q.limit,
        )  # fmt: skip
    except history.HistoryError as err:
        raise _missing(err) from err
    return web.Response(body=data, content_type="application/json", charset="utf-8")


@table.route("GET", "/api/tests", summary="tests across runs (each with its latest break)",
             tag="tests", query=TestQuery, answer=list[history.TestHistory])  # fmt: skip
async def one_test(served: state.State, request: web.Request, q: TestQuery, _b: None) -> Any:
    try:
        return await served.read(served.history.timeline, q.id, agent=q.agent, limit=q.limit)
    except history.HistoryError as err:
        raise _missing(err) from err


@table.route("GET", "/api/flaky", summary="tests whose outcome flips while nothing changed",
             tag="tests", query=FlakyQuery, answer=list[history.Flaky])  # fmt: skip
async def flaky(served: state.State, request: web.Request, q: FlakyQuery, _: None) -> Any:
    try:
        return await served.read(served.history.flaky, runs=q.runs, agent=q.agent, label=q.label)
    except history.HistoryError as err:
        raise _missing(err) from err


@table.route("GET", "/api/regressions", summary="tests that passed in an agent's previous run "
             "and not in the next", tag="tests", query=FlakyQuery,
             answer=list[history.Regression])  # fmt: skip
async def regressions(served: state.State, request: web.Request, q: FlakyQuery, _: None) -> Any:
    try:
        return await served.read(
            served.history.regressions, runs=q.runs, agent=q.agent, label=q.label
        )
    except history.HistoryError as err:
        raise _missing(err) from err


@table.route("GET", "/api/compare", summary="two runs compared (newly failing, significant "
             "changes, per-turn differences)", tag="runs", query=CompareQuery,
             answer=Compared)  # fmt: skip
async def compare(served: state.State, request: web.Request, q: CompareQuery, _: None) -> Any:
    try:
        return await served.read(_compared, served.history, q.base, q.new, q.alpha)
    except history.HistoryError as err:
        raise _missing(err) from err
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
        base, new, base_file=f"run {base_run.uid}", new_file=f"run {new_run.uid}", alpha=alpha,
        allow_replayed=True,
    )  # fmt: skip
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
