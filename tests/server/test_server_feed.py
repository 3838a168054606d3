"""A local run streams to agent-health serve (``run --serve URL``): each result as it
finishes, under the run id its report and history row carry; a server that is gone is one
warning and the run's exit code and reports are what they would have been; bad URLs and
unsafe ``serve`` flags are one line, exit 2."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import httpx
import pytest
from agent_health import cli
from support.helpers import run_cli_sync
from support.server_support import serving

SUITE = textwrap.dedent(
    """
    from agent_health import test


    def declare(n):
        @test(f"case {n}")
        async def case(expect):
            expect(n % 3).not_to_equal(2)


    for n in range(6):
        declare(n)
    """
)


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_cases.py").write_text(SUITE)
    (folder / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    monkeypatch.delenv("AGENT_HEALTH_SERVE", raising=False)
    monkeypatch.delenv("AGENT_HEALTH_HISTORY", raising=False)
    return folder


def test_each_result_reaches_the_server_under_the_runs_own_id(suite: Path, tmp_path: Path) -> None:
    history_url = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    with serving(f"sqlite:///{tmp_path / 'empty.db'}") as running:
        done = run_cli_sync(suite, "--serve", running.url, "--no-ledger", "-j", "2")
        assert done.code == 1  # two of six fail
        uid = done.report["provenance"]["run_id"]
        with running.client() as client:
            detail = client.get(f"/api/live/{uid}").json()
    run = detail["run"]
    assert (run["total"], run["ended"], run["source"]) == (6, True, "local")
    assert run["counts"] == {"passed": 4, "failed": 2, "errored": 0, "skipped": 0, "flaky": 0}
    assert sorted(r["id"] for r in detail["results"]) == sorted(
        t["id"] for t in done.report["tests"]
    )
    assert run["in_flight"] == []
    from agent_health import history

    with history.open_history(history_url, create=False) as opened:
        assert opened.run(uid).uid == uid  # the same id links the live run to its history


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_is_gone_is_one_warning_and_changes_nothing(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = f"http://127.0.0.1:{_closed_port()}"
    done = run_cli_sync(suite, "--serve", gone, "--no-ledger")
    assert done.code == 1
    assert done.report["summary"]["total"] == 6
    err = capsys.readouterr().err
    assert err.count("live feed") == 1, err
    assert f"the live feed to {gone} stopped" in err


def test_a_url_a_run_cannot_stream_to_is_a_usage_error(
    suite: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["run", str(suite), "--serve", "ftp://host/x"]) == 2
    assert "--serve 'ftp://host/x': give the server's http(s) URL" in capsys.readouterr().err
    monkeypatch.setenv("AGENT_HEALTH_SERVE", "http://me:secret@127.0.0.1:1")
    assert cli.main(["run", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "no credential in the URL" in err
    assert "secret" not in err


def test_serve_on_a_public_address_without_a_credential_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert cli.main(["serve", "--history", url, "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "--host 0.0.0.0 is reachable from other machines" in err
    short = tmp_path / "short"
    short.write_text("abc\n")
    assert cli.main(["serve", "--history", url, "--read-token-file", str(short)]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    assert cli.main(["serve", "--history", url, "--operator", "me"]) == 2
    assert "--operator names users of --trust-header" in capsys.readouterr().err


def test_serve_answers_its_pages(tmp_path: Path) -> None:
    with serving(f"sqlite:///{tmp_path / 'h.db'}") as running:
        page = httpx.get(running.url + "/")
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert httpx.get(running.url + "/assets/app.js").status_code == 200
        assert httpx.get(running.url + "/assets/nope.js").status_code == 404
