"""``show-report`` answers only this machine's browsers and serves only the report's folder.

A real ``agent-health show-report`` process and real HTTP requests: a Host header of another
name (what a DNS-rebinding page sends) gets 421, and a symlink out of the folder gets 404.
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_health.cli import serve


@pytest.fixture
def report_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "index.html").write_text("<!doctype html><title>report</title>")
    (folder / "assets").mkdir()
    (folder / "assets" / "app.js").write_text("console.log(1)")
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the report")
    (folder / "leak.txt").symlink_to(secret)
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "up").symlink_to(tmp_path)
    inner = folder / "inner"
    inner.mkdir()
    (inner / "index.html").symlink_to(secret)  # a folder's index, served for the folder
    (folder / "same.html").symlink_to(folder / "index.html")  # inside: fine
    return folder


@pytest.fixture
def served(report_dir: Path) -> Iterator[int]:
    server = subprocess.Popen(
        [sys.executable, "-m", "agent_health.cli", "show-report", str(report_dir), "--port", "0",
         "--no-open"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"at http://127\.0\.0\.1:(\d+)/ ", line)
        assert match, line + (server.stderr.read() if server.stderr else "")
        yield int(match.group(1))
    finally:
        server.terminate()
        server.wait(timeout=30)


def get(port: int, path: str = "/", host: str | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("GET", path, skip_host=True)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_only_a_loopback_host_with_the_servers_port_is_answered(served: int) -> None:
    port = served
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LocalHost:{port}"):
        status, body = get(port, host=host)
        assert (status, b"report" in body) == (200, True), host
    for host in (
        f"evil.example:{port}",  # a rebinding page's own name
        f"127.0.0.1.evil.example:{port}",
        f"localhost.:{port}",
        "127.0.0.1:1",  # another port
        "127.0.0.1",  # no port: only port 80 may be left out
        f"[::1]x:{port}",
        f"127.0.0.1:{port}x",
    ):
        status, body = get(port, host=host)
        assert status == 421, host
        assert b"show-report answers only Host" in body
        assert b"report</title>" not in body
    status, _ = get(port, host=None)  # no Host at all
    assert status == 421


def test_no_file_outside_the_folder_is_served_through_a_symlink(served: int) -> None:
    port = served
    host = f"127.0.0.1:{port}"
    assert get(port, "/assets/app.js", host)[0] == 200
    assert get(port, "/same.html", host)[0] == 200
    for path in ("/leak.txt", "/passwd", "/up/secret.txt", "/up/", "/inner/", "/../secret.txt"):
        status, body = get(port, path, host)
        assert status == 404, path
        assert b"outside the report" not in body
        assert b"root:" not in body


def test_host_check_rules() -> None:
    names = frozenset(serve.LOOPBACK_NAMES)
    assert serve.host_allowed(["localhost:8080"], names, 8080)
    assert serve.host_allowed(["localhost"], names, 80)
    assert not serve.host_allowed(["localhost:8080", "evil:8080"], names, 8080)
    assert not serve.host_allowed([], names, 8080)
    assert serve.named("0.0.0.0") is None
    assert serve.named("::1") == "[::1]"
    assert serve.named("10.1.2.3") == "10.1.2.3"
    assert serve.inside(os.sep + "r", os.sep + "r")
    assert not serve.inside(os.sep + "report-other", os.sep + "report")
