"""The history as one page: ``agent-health history --html DIR`` writes ``DIR/index.html``.

What a person looks at to see how an agent is doing run after run: the pass rate of each
run as a point with its 95% interval (a line per agent, ▲/▼ where the paired test found a
significant change), its cost, tokens and test latency over the same runs, every test's
outcome run by run as a grid (newest on the right; a cell opens that run's report at that
test when the report is at hand), the flaky tests and the recent regressions. Trends are
drawn, not tabled.

The page is built as the run report is (:func:`agent_health.engine.reporters.html.
self_contained`): one file, its own script and style pinned by hash in its
Content-Security-Policy, no network. It opens from ``file://`` and as a CI artifact.

A run's report is "at hand" when the ``report_path`` the history keeps for it is a file on
this machine: a JSON report is rendered once into ``DIR/runs/`` as the run report's page (and
again only when the JSON is newer), an HTML report is linked where it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from agent_health.history import answers, facts

if TYPE_CHECKING:
    from agent_health.history.database import History

INDEX = "index.html"
RUNS_FOLDER = "runs"
RUNS = 100
"""Runs the page draws unless told (``--limit``)."""
FLAKY_RUNS = 50
"""The window ``flaky`` looks over, as the command's default."""
REGRESSION_RUNS = 20
"""Runs whose regressions the page lists."""
FLAKY_SHOWN = 50


@dataclass(frozen=True)
class Written:
    """What :func:`write_page` wrote."""

    path: Path
    runs: int
    tests: int
    reports: int
    """runs whose report is at hand (linked from the page)"""
    unreadable: tuple[str, ...] = ()
    """one line per report that was there but could not be read (those runs are not linked)"""


@cache
def _asset(name: str) -> str:
    return (
        resources.files("agent_health.history")
        .joinpath("page_assets", name)
        .read_text(encoding="utf-8")
    )


def write_page(
    directory: Path,
    opened: History,
    *,
    runs: int = RUNS,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
) -> Written:
    """Write the page for the newest ``runs`` runs (of ``agent``, tests carrying ``label``,
    since ``since``) into ``directory`` (made if missing), atomically."""
    grid = opened.grid(runs=runs, agent=agent, label=label, since=since)
    flaky = opened.flaky(runs=FLAKY_RUNS, agent=agent, label=label, since=since, limit=FLAKY_SHOWN)
    regressions = opened.regressions(
        runs=min(runs, REGRESSION_RUNS), agent=agent, label=label, since=since
    )
    directory.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    unreadable: list[str] = []
    for column in grid.columns:
        try:
            link = _report_link(directory, column.run)
        except _Unreadable as err:
            unreadable.append(str(err))
            continue
        if link is not None:
            links[column.run.uid] = link
    scope = {
        "where": opened.location.shown,
        "agent": agent,
        "label": label,
        "since": since.isoformat() if since is not None else None,
        "runs": runs,
        "flaky_runs": FLAKY_RUNS,
    }
    data = page_data(grid, flaky, regressions, links, scope)
    path = directory / INDEX
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(data, title=_title(grid)), encoding="utf-8")
    tmp.replace(path)
    return Written(
        path=path,
        runs=len(grid.columns),
        tests=len(grid.rows),
        reports=len(links),
        unreadable=tuple(unreadable),
    )


def render(data: str, *, title: str = "agent-health history") -> str:
    """The page for ``data`` (:func:`page_data`'s JSON text)."""
    from agent_health.engine import reporters

    return reporters.self_contained(
        _asset("index.html"),
        script=_asset("page.js"),
        style=_asset("page.css"),
        title=title,
        data=reporters.script_safe(data),
    )


def _title(grid: answers.Grid) -> str:
    return f"agent-health history — {len(grid.columns)} runs, {len(grid.rows)} tests"


def page_data(
    grid: answers.Grid,
    flaky: list[answers.Flaky],
    regressions: list[answers.Regression],
    links: dict[str, str],
    scope: dict[str, Any],
) -> str:
    """What the page's data element holds, as JSON text: each run as the page plots it, each
    test as ``[id, title, file, line, labels, cells]`` (2,000 tests stay a few hundred KB)."""
    columns = [_column(c, links.get(c.run.uid)) for c in grid.columns]
    rows = [[r.id, r.title, r.file, r.line, r.labels, r.cells] for r in grid.rows]
    data = {
        "scope": scope,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "columns": columns,
        "rows": rows,
        "flaky": [
            {
                **f.model_dump(mode="json", include={"id", "title", "flips", "runs", "decided"}),
                "failures": f.failures,
                "failure_rate": f.failure_rate,
                "low": f.failure_rate_interval.low,
                "high": f.failure_rate_interval.high,
                "agent": f.agent.label if f.agent is not None else None,
                "last": f.last_status,
            }
            for f in flaky
        ],
        "regressions": [
            {
                **r.model_dump(
                    mode="json",
                    include={"id", "title", "run", "previous", "agent", "status", "cause"},
                ),
                "short": facts.short(r.run),
                "started_at": r.started_at.isoformat(),
                "message": r.messages[0] if r.messages else None,
                "changed": r.changed,
                "report": links.get(r.run),
            }
            for r in regressions
        ],
    }
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _column(column: answers.Column, report: str | None) -> dict[str, Any]:
    run = column.run
    interval = run.pass_rate_interval
    latency = column.latency
    return {
        "uid": run.uid,
        "short": facts.short(run.uid),
        "agent": run.agent.label if run.agent is not None else None,
        "started_at": run.started_at.isoformat(),
        "pass_rate": run.pass_rate,
        "low": interval.low if interval is not None else None,
        "high": interval.high if interval is not None else None,
        "total": run.total,
        "passed": run.passed,
        "failed": run.failed,
        "errored": run.errored,
        "skipped": run.skipped,
        "flaky": run.flaky,
        "cost_usd": run.cost_usd,
        "tokens": run.tokens,
        "duration_ms": run.duration_ms,
        "latency": latency.model_dump(mode="json") if latency is not None else None,
        "mark": run.trend.mark if run.trend is not None else None,
        "p_value": run.trend.p_value if run.trend is not None else None,
        "method": run.trend.method if run.trend is not None else None,
        "commit": run.git_commit,
        "branch": run.git_branch,
        "incomplete": run.incomplete,
        "report": report,
    }


class _Unreadable(Exception):
    """A run's report is there and cannot be read."""


def _report_link(directory: Path, run: answers.Run) -> str | None:
    """The page's link to ``run``'s report, relative to ``directory``; ``None`` when the
    report is not at hand."""
    if not run.report_path:
        return None
    source = Path(run.report_path)
    if not source.is_file():
        return None
    if source.suffix in (".html", ".htm"):
        return _href(directory, source)
    target = directory / RUNS_FOLDER / f"{_slug(run.uid)}.html"
    try:
        if not target.is_file() or target.stat().st_mtime < source.stat().st_mtime:
            _render_run(source, target)
    except OSError as err:
        raise _Unreadable(f"{source}: {err.strerror or err}") from err
    return f"{RUNS_FOLDER}/{quote(target.name)}"


def _render_run(source: Path, target: Path) -> None:
    """The run report's page for the JSON report ``source``, written to ``target``."""
    from agent_health.engine import reporters, reports

    try:
        report = reporters.read_json_report(source)
    except reports.ReportFileError as err:
        raise _Unreadable(str(err)) from err
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(reporters.render_html(report), encoding="utf-8")
    tmp.replace(target)


def _slug(uid: str) -> str:
    """A file name for a run: its uid's safe characters, and a hash so two never clash."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", uid).strip("._")[:80]
    return f"{safe}-{hashlib.sha256(uid.encode()).hexdigest()[:8]}"


def _href(directory: Path, target: Path) -> str:
    """A link from a page in ``directory`` to ``target``: relative when both are on one
    drive (it survives moving the two together), else a ``file://`` URL."""
    try:
        relative = os.path.relpath(target.resolve(), directory.resolve())
    except ValueError:
        return target.resolve().as_uri()
    return quote(Path(relative).as_posix())
