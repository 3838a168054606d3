"""The HTML report as a file: self-contained, pinned by its CSP, its data safe inside it.

What a person sees in it is tested in a real browser (``test_engine_html_browser.py``);
here the page's text is checked: what it may load, and that nothing in a test's output can
end the data early or become markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.cli import common
from agent_health.engine import reporters
from agent_health.engine.reporters import html
from agent_health.engine.reports.report import LEGEND, RunReport
from agent_health.sdk.results import TestResult

HOSTILE = '</script><script>window.pwned = 1</script><!-- <img src="http://127.0.0.1:9/x">'


def _result(**kw: Any) -> TestResult:
    base: dict[str, Any] = {
        "id": "t.py::one",
        "name": "one",
        "title": "one",
        "file": "t.py",
        "line": 3,
        "status": "passed",
        "run_id": "r1",
        "output": "fine",
    }
    return TestResult(**{**base, **kw})


class _Page(HTMLParser):
    """Every element with its attributes, and the text of each script and style."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.blocks: dict[str, list[str]] = {"script": [], "style": []}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in self.blocks:
            self._open = tag
            self.blocks[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.blocks[self._open][-1] += data


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


def _refuse(name: str) -> Any:
    raise AssertionError(f"{name} in the page's JSON")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_loads_nothing_from_anywhere() -> None:
    page = html.render(RunReport.build([_result()], duration_ms=1.0))
    parsed = _parse(page)
    for tag, attrs in parsed.tags:
        assert "src" not in attrs, (tag, attrs)  # every script and style is inline
        assert not (tag == "link" and attrs.get("href")), attrs
    assert not re.search(r"https?://", page.replace("http://127.0.0.1", "")), "a URL in the page"
    [csp] = [
        a["content"] for t, a in parsed.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp is not None
    assert "default-src 'none'" in csp  # no fetch, XHR, image, font or frame from anywhere


def test_the_csp_allows_exactly_the_pages_own_script_and_style() -> None:
    page = html.render(RunReport.build([_result()], duration_ms=1.0))
    parsed = _parse(page)
    [csp] = [
        a["content"] for t, a in parsed.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert csp is not None
    [code] = [
        text
        for text, (_, attrs) in zip(
            parsed.blocks["script"],
            [t for t in parsed.tags if t[0] == "script"],
            strict=True,
        )
        if attrs.get("type") != "application/json"
    ]
    [style] = parsed.blocks["style"]
    assert f"script-src {_hash(code)};" in csp
    assert f"style-src {_hash(style)};" in csp
    assert "unsafe-inline" not in csp


def test_output_cannot_end_the_data_or_become_markup() -> None:
    report = RunReport.build(
        [_result(output=HOSTILE, prompt=HOSTILE, error=HOSTILE, status="errored", cause="agent")],
        duration_ms=1.0,
    )
    page = html.render(report)
    parsed = _parse(page)
    scripts = [t for t in parsed.tags if t[0] == "script"]
    assert len(scripts) == 2  # the data and the page's own code: nothing was injected
    data = json.loads(parsed.blocks["script"][0])
    assert data["legend"] == LEGEND
    assert data["report"]["tests"][0]["output"] == HOSTILE  # the same text, unharmed
    assert data["report"] == json.loads(report.model_dump_json())


def test_the_page_carries_metrics_once_and_no_nan() -> None:
    report = RunReport.build(
        [_result(metrics={"total_tokens": 12, "tool_calls": 2}, score=float("nan"))],
        duration_ms=1.0,
    )
    saved = json.loads(report.model_dump_json())
    assert [s["name"] for s in saved["tests"][0]["signals"]] == ["total_tokens", "tool_calls"]
    text = _parse(html.render(report)).blocks["script"][0]
    data = json.loads(text, parse_constant=_refuse)  # browsers' JSON.parse refuses NaN
    entry = data["report"]["tests"][0]
    assert entry["signals"] == []  # the derived-metric signals repeat `metrics`; not twice
    assert entry["metrics"] == {"total_tokens": 12, "tool_calls": 2}
    assert entry["score"] is None
    assert {**entry, "signals": saved["tests"][0]["signals"]} == saved["tests"][0]


def test_write_makes_dir_index_html_atomically(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "report"
    written = reporters.write("html", target, RunReport.build([_result()], duration_ms=1.0))
    assert written == target / "index.html"
    assert written.read_text().startswith("<!doctype html>")
    assert sorted(p.name for p in target.iterdir()) == ["index.html"]


def test_reporter_kinds_and_defaults() -> None:
    assert reporters.parse("html") == ("html", Path("agent-health-report"))
    assert reporters.parse("html:out/r") == ("html", Path("out/r"))
    with pytest.raises(Exception, match="choose from list, json, junit, html"):
        reporters.parse("htm")


def test_the_html_module_loads_only_when_asked_for(tmp_path: Path) -> None:
    import subprocess
    import sys

    probe = (
        "import sys; from agent_health.cli import app; "
        "import agent_health.engine.reporters as r; "
        "assert 'agent_health.engine.reporters.html' not in sys.modules, 'loaded early'; "
        "r.write('html', __import__('pathlib').Path(sys.argv[1]), "
        "__import__('agent_health.engine.reports.report', fromlist=['x']).RunReport.build([], "
        "duration_ms=0.0)); "
        "assert 'agent_health.engine.reporters.html' in sys.modules"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "r")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_a_run_writes_the_page_and_says_how_to_open_it(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(
        **{
            "test_one.py": """
            from agent_health import test

            @test("adds up")
            async def adds_up(expect):
                expect(1 + 1).to_equal(2)
            """
        }
    )
    out = tmp_path / "html"
    code = cli.main(["run", str(suite), "--no-ledger", "--reporter", f"html:{out}"])
    assert code == 0
    text = capsys.readouterr().out
    assert f"html report: {out / 'index.html'}" in text
    # the command as this process was invoked (here pytest's argv[0]; see common.invocation)
    assert f"open it with: {common.invocation()} show-report {out}" in text
    page = (out / "index.html").read_text()
    data = json.loads(_parse(page).blocks["script"][0])
    assert [t["name"] for t in data["report"]["tests"]] == ["adds up"]
    assert data["report"]["version"] == 2
