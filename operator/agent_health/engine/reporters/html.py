"""The HTML report: one self-contained ``DIR/index.html`` that is also a run inspector.

The page is the JSON report (any version) plus a small script and stylesheet, all inline:
it opens from ``file://``, from ``agent-health show-report`` or as a CI artifact, and makes
no network request. Its Content-Security-Policy says so to the browser: only the page's
own script and style (pinned by hash) may run, nothing may be fetched.

Why no front-end framework: the inspector is a list, a few filters and one detail view,
about 500 lines of plain JavaScript. A framework would add a build step and a vendored
bundle larger than the code it replaces, for no feature the page needs.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic_core

from agent_health.engine import reports

INDEX = "index.html"
_SURROGATE = re.compile("[\ud800-\udfff]")
DEFAULT_DIR = Path("agent-health-report")


@cache
def _asset(name: str) -> str:
    return (
        resources.files("agent_health.engine.reporters")
        .joinpath("html_assets", name)
        .read_text(encoding="utf-8")
    )


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _embedded(report_json: str) -> str:
    """The page's data: the legend and the report, safe inside a ``<script>`` element.

    ``<`` only ever occurs inside JSON strings, where ``\\u003c`` means the same character,
    so no ``</script>`` or ``<!--`` in a test's output can end the element early. A lone
    surrogate (an agent's JSON may hold ``"\\ud800"``) has no UTF-8 to be written in: it is
    written as that escape, which the page's JSON reads back as the same text.
    """
    legend = json.dumps(reports.LEGEND, ensure_ascii=False, separators=(",", ":"))
    return script_safe('{"legend":' + legend + ',"report":' + report_json + "}")


def script_safe(data: str) -> str:
    """JSON text made safe inside a ``<script>`` element (see :func:`_embedded`)."""
    data = data.replace("<", "\\u003c")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", data)


def _report_json(report: reports.RunReport) -> str:
    """The report as compact JSON, without the derived-metric signals.

    Those repeat each test's ``metrics`` (about a third of a typical report's bytes); the
    page shows ``metrics`` and lists the body's own signals.
    """
    # The entries as they are held (the metric signals are added only when a report is
    # written), in JSON's types; the rest as pydantic dumps it, in field order.
    rest = report.model_dump(mode="json", exclude={"tests"})
    try:
        tests = pydantic_core.to_jsonable_python(report.tests)
    except ValueError:  # a lone surrogate in a key (an agent's JSON): pydantic refuses it
        tests = reports.plain(report.tests)
    data = {
        name: tests if name == "tests" else rest[name] for name in reports.RunReport.model_fields
    }
    try:
        return _compact(data)
    except ValueError:  # a NaN or an infinity: pydantic's JSON writes those as null
        return _compact(json.loads(report.model_dump_json()))


def _compact(data: dict[str, Any]) -> str:
    data["tests"] = [
        {**t, "signals": [s for s in t.get("signals") or () if s.get("kind") != "metric"]}
        for t in data["tests"]
    ]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def page_data(report: reports.RunReport) -> str:
    """What the page's data element holds for ``report`` (the benchmark's baseline uses it)."""
    return _embedded(_report_json(report))


def _script() -> str:
    """The page's one script: the chat view of a conversation (``chat.js``), then the
    inspector that uses it (``report.js``)."""
    return _asset("chat.js") + "\n" + _asset("report.js")


def render_json(report_json: str, *, title: str = "agent-health report") -> str:
    """The page for a report given as JSON text."""
    return self_contained(
        _asset("index.html"),
        script=_script(),
        style=_asset("report.css"),
        title=title,
        data=_embedded(report_json),
    )


def self_contained(template: str, *, script: str, style: str, title: str, data: str) -> str:
    """A page from ``template`` that runs its own ``script`` and ``style`` alone (pinned by
    hash in its Content-Security-Policy) and may fetch nothing, carrying ``data`` (JSON text
    made :func:`script_safe`). The template holds the placeholders ``__CSP__``,
    ``__VERSION__``, ``__TITLE__``, ``__STYLE__``, ``__SCRIPT__`` and ``__DATA__``, once each;
    the history page (``agent_health.history.page``) is built the same way."""
    csp = (
        "default-src 'none'; "
        f"script-src {_sha256(script)}; style-src {_sha256(style)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    page = template
    # Placeholders are replaced in an order where no replacement can contain a later one:
    # the data goes in last, so nothing in a test's output is ever read as a placeholder.
    for key, value in (
        ("__CSP__", html.escape(csp)),
        ("__VERSION__", html.escape(reports.agent_health_version())),
        ("__TITLE__", html.escape(title)),
        ("__STYLE__", style),
        ("__SCRIPT__", script),
    ):
        page = page.replace(key, value, 1)
    return page.replace("__DATA__", data, 1)


def title(report: reports.RunReport) -> str:
    s = report.summary
    return f"agent-health report — {s.passed} passed, {s.failed} failed, {s.errored} errored"


def render(report: reports.RunReport) -> str:
    """The page for a report."""
    return render_json(_report_json(report), title=title(report))


def write(directory: Path, report: reports.RunReport) -> Path:
    """Write ``DIR/index.html`` (atomically: a reader never sees half a page); its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / INDEX
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(report), encoding="utf-8")
    tmp.replace(path)
    return path
