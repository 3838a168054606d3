"""The history page without a browser: what ``history --html DIR`` writes and says, which
runs' reports it links and how, its data, and the usage errors of the command.
(``test_history_page_browser.py`` uses the page in Chromium.)"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli, history
from support.history_support import named, report


def _data(page: Path) -> Any:
    text = page.read_text()
    found = re.search(r'<script id="history-data" type="application/json">(.*?)</script>', text)
    assert found is not None
    return json.loads(found.group(1))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.db'}"


def test_a_runs_json_report_at_hand_becomes_its_page_and_others_are_not_linked(
    tmp_path: Path, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "r1.json"
    data = report({"t.py::a": "passed", "t.py::b": "failed"}, run_id="r1")
    saved.write_text(json.dumps(data))
    html_report = tmp_path / "html" / "index.html"
    html_report.parent.mkdir()
    html_report.write_text("<!doctype html><title>r3</title>")
    broken = tmp_path / "r4.json"
    broken.write_text("{not json")
    with history.open_history(db) as opened:
        opened.record(data, history.RunContext(report_path=str(saved)))
        gone = str(tmp_path / "gone.json")
        opened.record(report(named(2), run_id="r2", at=1), history.RunContext(report_path=gone))
        opened.record(
            report(named(2), run_id="r3", at=2), history.RunContext(report_path=str(html_report))
        )
        opened.record(
            report(named(2), run_id="r4", at=3), history.RunContext(report_path=str(broken))
        )
    page = tmp_path / "page"
    assert cli.main(["history", "--html", str(page), "--history", db]) == 0
    out, err = capsys.readouterr()
    assert f"history page: {page / 'index.html'} (4 runs × 4 tests; 2 with their report" in out
    assert f"open it: {(page / 'index.html').resolve().as_uri()}" in out
    assert "warning: a run's report is not linked:" in err
    assert "r4.json" in err
    links = {c["uid"]: c["report"] for c in _data(page / "index.html")["columns"]}
    assert links["r2"] is None  # not there
    assert links["r4"] is None  # not readable
    assert links["r3"] == "../html/index.html"  # an HTML report is linked where it is
    rendered = page / links["r1"]
    assert links["r1"].startswith("runs/r1-")
    assert "<h1>agent-health report</h1>" in rendered.read_text()  # the run report's page
    assert '"t.py::b"' in rendered.read_text()
    # drawn again: an up-to-date page of a run is kept, a newer JSON report renders it again
    before = rendered.stat().st_mtime_ns
    assert cli.main(["history", "--html", str(page), "--history", db]) == 0
    assert rendered.stat().st_mtime_ns == before
    os.utime(saved, ns=(before + 10**9, before + 10**9))
    assert cli.main(["history", "--html", str(page), "--history", db]) == 0
    assert rendered.stat().st_mtime_ns != before


def test_the_page_carries_its_data_under_its_csp_and_nothing_else(tmp_path: Path, db: str) -> None:
    hostile = {"t.py::</script><script>alert(1)</script>": "failed", "t.py::ok": "passed"}
    with history.open_history(db) as opened:
        opened.record(report(named(2), run_id="r1"))
        opened.record(report(hostile, run_id="r2", at=1))
        written = history.write_page(tmp_path / "page", opened, runs=1)
    text = written.path.read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)
    assert csp is not None
    assert "default-src &#x27;none&#x27;" in csp.group(1)
    assert "script-src &#x27;sha256-" in csp.group(1)
    assert text.count("<script") == 2  # the data element and the page's own script
    data = _data(written.path)
    assert [c["uid"] for c in data["columns"]] == ["r2"]
    rows = data["rows"]
    assert [r[0] for r in rows] == sorted(hostile)
    assert data["scope"]["runs"] == 1


def test_history_html_usage_errors_are_one_line(
    tmp_path: Path, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with history.open_history(db) as opened:
        opened.record(report(named(1), run_id="r1"))
    a_file = tmp_path / "file"
    a_file.write_text("")
    for argv, said in (
        (["history", "t.py", "--html", str(tmp_path / "p")], "--html draws every test"),
        (["history", "--json", "--html", str(tmp_path / "p")], "pass one"),
        (["history", "--html", str(a_file)], "a file is there; name a folder"),
        (["history", "--html", str(tmp_path / "p"), "--limit", "0"], "--limit must be"),
    ):
        assert cli.main([*argv, "--history", db]) == 2
        err = capsys.readouterr().err
        assert said in err
        assert len(err.strip().splitlines()) == 1, err
    assert (
        cli.main(["history", "--html", str(tmp_path / "one"), "--limit", "1", "--history", db]) == 0
    )
    assert "(1 run × 1 test)" in capsys.readouterr().out
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert cli.main(["history", "--html", str(tmp_path / "p"), "--history", missing]) == 2
    assert "no history at" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_team_history_on_postgresql_is_drawn_without_its_password(
    postgres_server: Any, tmp_path: Path
) -> None:
    from support import postgres_support

    url = postgres_server.url(postgres_server.new_database(), password=True)
    with history.open_history(url) as opened:
        opened.record(report({"t.py::a": "passed", "t.py::b": "failed"}, run_id="r1"))
        opened.record(report({"t.py::a": "failed", "t.py::b": "failed"}, run_id="r2", at=1))
        written = history.write_page(tmp_path / "page", opened)
    text = written.path.read_text()
    assert postgres_support.PASSWORD not in text
    data = _data(written.path)
    assert data["scope"]["where"].startswith(f"postgresql://{postgres_support.USER}@127.0.0.1:")
    assert [r[5] for r in data["rows"]] == ["PF", "FF"]
    assert [r["id"] for r in data["regressions"]] == ["t.py::a"]
