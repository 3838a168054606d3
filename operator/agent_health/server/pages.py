"""The pages: one shell for every view (runs, a run, a test across runs, flaky tests, trends,
compare), its script and stylesheet, and a run's inspector — the HTML report's own page,
made from the run's JSON report when it is at hand, else from the history.

The shell holds no data and no credential: its script reads the JSON API of the same
origin (``connect-src 'self'``), and the Content-Security-Policy allows only this server's
own script and style. Why no front-end framework: as for the HTML report, a few lists, a
detail view and SVG plots are a few hundred lines of plain JavaScript, with no build step.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

from aiohttp import web

from agent_health import history
from agent_health.engine import reporters, reports
from agent_health.server import reading, routes, state

table = routes.Table()
VIEWS = ("/", "/runs/{uid}", "/tests", "/flaky", "/trends", "/compare", "/live/{uid}")
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
SHELL_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


@cache
def asset(name: str) -> str:
    return (
        resources.files("agent_health.server").joinpath("assets", name).read_text(encoding="utf-8")
    )


def etag(name: str) -> str:
    return '"' + hashlib.sha256(asset(name).encode()).hexdigest()[:20] + '"'


async def shell(request: web.Request) -> web.Response:
    version = reports.agent_health_version()
    page = (
        asset("index.html")
        .replace("__VERSION__", version)
        .replace("__ASSET__", etag("app.js").strip('"'))
    )
    return web.Response(
        text=page, content_type="text/html", headers={"Content-Security-Policy": SHELL_CSP}
    )


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    media = ASSETS.get(name)
    if media is None:
        raise web.HTTPNotFound()
    tag = etag(name)
    if request.headers.get("If-None-Match") == tag:
        return web.Response(status=304, headers={"ETag": tag})
    return web.Response(
        text=asset(name), content_type=media, headers={"ETag": tag, "Cache-Control": "no-cache"}
    )


@table.route(
    "GET",
    "/runs/{uid}/inspector",
    summary="a run's inspector (the HTML report's page)",
    tag="pages",
    media="text/html",
)
async def inspector(served: state.State, request: web.Request, _q: None, _b: None) -> web.Response:
    try:
        run, rebuilt = await served.read(served.history.baseline, request.match_info["uid"])
    except history.HistoryError as err:
        raise reading._missing(err) from err
    data = await served.read(reading.report_json, run, rebuilt)
    page = reporters.render_html_json(data, title=f"agent-health run {run.uid}")
    # The report page carries its own CSP (its inline script and style pinned by hash); it
    # may be framed by this server's run page only.
    return web.Response(
        text=page,
        content_type="text/html",
        headers={"Content-Security-Policy": "frame-ancestors 'self'"},
    )
