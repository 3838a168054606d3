"""agent-health serve's JSON API over a real history, on a real loopback port: every answer
checked against the OpenAPI document the server serves, the guards (Host, tokens and roles,
a proxy's header, CSRF), and the live events over Server-Sent Events."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_health import server
from support.history_support import report
from support.server_support import check_answer, recorded_history, serving

READ, OPERATE = "r" * 24, "o" * 24


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    return recorded_history(tmp_path)


def test_every_read_answer_is_what_the_openapi_document_says(history_url: str) -> None:
    with serving(history_url) as running, running.client() as client:
        document = client.get("/api/openapi.json").json()
        assert document["openapi"] == "3.1.0"
        asked = {
            ("GET", "/api/runs", "/api/runs"),
            ("GET", "/api/runs?status=failed&branch=main&limit=5", "/api/runs"),
            ("GET", "/api/runs/run-1", "/api/runs/{uid}"),
            ("GET", "/api/runs/run-2/results", "/api/runs/{uid}/results"),
            ("GET", "/api/tests?id=t.py::b", "/api/tests"),
            ("GET", "/api/flaky", "/api/flaky"),
            ("GET", "/api/regressions", "/api/regressions"),
            ("GET", "/api/compare?base=run-0&new=run-2", "/api/compare"),
            ("GET", "/api/me", "/api/me"),
            ("GET", "/api/live", "/api/live"),
        }
        for method, url, path in asked:
            answer = client.request(method, url)
            assert answer.status_code == 200, (url, answer.text)
            check_answer(document, method, path, 200, answer.json())
        # Every route the document names is served (none is only documented).
        for path, operations in document["paths"].items():
            assert operations, path


def test_runs_filters_a_run_its_results_and_two_runs_compared(history_url: str) -> None:
    with serving(history_url) as running, running.client() as client:
        runs = client.get("/api/runs").json()
        assert [r["uid"] for r in runs] == ["run-2", "run-1", "run-0"]
        assert [r["uid"] for r in client.get("/api/runs?status=green").json()] == ["run-0"]
        assert client.get("/api/runs?branch=dev").json() == []
        page = client.get("/api/runs/run-1").json()
        assert page["evidence"]["report"] is True
        assert page["evidence"]["ledger_verified"] is True
        failing = client.get("/api/runs/run-2/results?status=failed").json()
        assert [r["id"] for r in failing["results"]] == ["t.py::b"]
        compared = client.get("/api/compare?base=run-0&new=run-2").json()
        assert compared["from_reports"] is True  # both JSON reports are at hand
        newly = {c["id"] for c in compared["comparison"]["newly_failing"]}
        assert newly == {"t.py::b", "t.py::c"}
        (test,) = client.get("/api/tests", params={"id": "t.py::b"}).json()
        assert test["broke"]["last_pass"]["run"] == "run-0"
        inspector = client.get("/runs/run-1/inspector")
        assert inspector.status_code == 200
        assert "report-data" in inspector.text


def test_bad_parameters_and_unknown_runs_are_one_line(history_url: str) -> None:
    with serving(history_url) as running, running.client() as client:
        bad = client.get("/api/runs?limit=0")
        assert bad.status_code == 400
        assert bad.json() == {"error": "query: limit: Input should be greater than or equal to 1"}
        assert client.get("/api/runs?status=sideways").status_code == 400
        missing = client.get("/api/runs/nope")
        assert missing.status_code == 404
        assert "no run 'nope'" in missing.json()["error"]
        unknown = client.get("/api/runs?colour=red")
        assert unknown.status_code == 400
        assert "colour" in unknown.json()["error"]


def test_a_host_that_does_not_name_the_server_is_misdirected(history_url: str) -> None:
    with serving(history_url) as running, running.client() as client:
        for path in ("/", "/api/runs", "/assets/app.js", "/api/openapi.json"):
            answer = client.get(path, headers={"Host": f"evil.example:{running.port}"})
            assert answer.status_code == 421, path
        assert client.get("/", headers={"Host": f"localhost:{running.port}"}).status_code == 200


def _tokens(tmp_path: Path) -> server.Access:
    guards = server.Access(host="127.0.0.1")
    guards.add_token(READ, "read")
    guards.add_token(OPERATE, "operate")
    return guards


BATCH = {
    "run": "live-1",
    "events": [
        {"kind": "begun", "agent": "triage", "total": 2, "started_at": "2025-01-01T00:00:00Z"},
        {"kind": "started", "id": "t.py::a", "name": "a"},
    ],
}
CHANGE = {"X-Agent-Health": "1", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("who", "reads", "changes"),
    [
        ({}, 401, 401),
        ({"Authorization": f"Bearer {READ}"}, 200, 403),
        ({"Authorization": f"Bearer {OPERATE}"}, 200, 200),
        ({"Authorization": "Bearer not-a-token-of-ours-at-all"}, 401, 401),
    ],
)
def test_each_role_with_and_without_a_token(
    tmp_path: Path, history_url: str, who: dict[str, str], reads: int, changes: int
) -> None:
    with serving(history_url, _tokens(tmp_path)) as running, running.client(**who) as client:
        assert client.get("/api/runs").status_code == reads
        assert client.get("/api/openapi.json").status_code == reads
        posted = client.post("/api/live/events", content=json.dumps(BATCH), headers=CHANGE)
        assert posted.status_code == changes, posted.text
        me = client.get("/api/me").json()
        assert me["role"] == {200: "read" if changes != 200 else "operate"}.get(reads)
        # The shell has no data and no credential: served to anyone who names the server.
        shell = client.get("/")
        assert shell.status_code == 200
        assert READ not in shell.text
        assert OPERATE not in shell.text


def test_a_change_needs_the_csrf_header_a_json_body_and_our_origin(
    tmp_path: Path, history_url: str
) -> None:
    auth = {"Authorization": f"Bearer {OPERATE}"}
    with serving(history_url, _tokens(tmp_path)) as running, running.client(**auth) as client:
        body = json.dumps(BATCH)
        plain = {"Content-Type": "application/json"}
        assert client.post("/api/live/events", content=body, headers=plain).status_code == 403
        form = {"X-Agent-Health": "1", "Content-Type": "text/plain"}
        assert client.post("/api/live/events", content=body, headers=form).status_code == 403
        other = {**CHANGE, "Origin": "https://evil.example"}
        refused = client.post("/api/live/events", content=body, headers=other)
        assert refused.status_code == 403
        assert "CSRF" in refused.json()["error"]
        cross = {**CHANGE, "Sec-Fetch-Site": "cross-site"}
        assert client.post("/api/live/events", content=body, headers=cross).status_code == 403
        own = {**CHANGE, "Origin": running.url, "Sec-Fetch-Site": "same-origin"}
        assert client.post("/api/live/events", content=body, headers=own).status_code == 200


def test_on_loopback_without_tokens_the_local_user_operates_but_csrf_still_holds(
    history_url: str,
) -> None:
    with serving(history_url) as running, running.client() as client:
        assert client.get("/api/me").json()["role"] == "operate"
        body = json.dumps(BATCH)
        assert client.post("/api/live/events", content=body, headers=CHANGE).status_code == 200
        forged = {"Content-Type": "application/json"}  # what another site's form could send
        assert client.post("/api/live/events", content=body, headers=forged).status_code == 403


def test_a_page_logs_in_with_a_token_and_gets_an_httponly_cookie(
    tmp_path: Path, history_url: str
) -> None:
    with serving(history_url, _tokens(tmp_path)) as running, running.client() as client:
        wrong = client.post("/api/session", json={"token": "nope"}, headers={"X-Agent-Health": "1"})
        assert wrong.status_code == 401
        no_csrf = client.post("/api/session", json={"token": READ})
        assert no_csrf.status_code == 403
        answer = client.post("/api/session", json={"token": READ}, headers={"X-Agent-Health": "1"})
        assert answer.status_code == 200
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert READ not in cookie  # the cookie is a session id, never the token
        assert client.get("/api/runs").status_code == 200  # the cookie alone
        assert client.get("/api/me").json()["role"] == "read"
        out = client.request("DELETE", "/api/session", json={}, headers={"X-Agent-Health": "1"})
        assert out.status_code == 200
        assert client.get("/api/runs").status_code == 401


def test_behind_a_proxy_its_header_names_the_user_and_operators_operate(history_url: str) -> None:
    guards = server.Access(
        host="0.0.0.0", trust_header="X-Forwarded-Email", operators=frozenset({"ops@x.dev"})
    )
    with serving(history_url, guards, host="0.0.0.0") as running:
        base = f"http://127.0.0.1:{running.port}"
        with httpx.Client(base_url=base) as client:
            assert client.get("/api/runs").status_code == 401
            reader = {"X-Forwarded-Email": "dev@x.dev"}
            assert client.get("/api/runs", headers=reader).status_code == 200
            body = json.dumps(BATCH)
            changed = client.post("/api/live/events", content=body, headers={**reader, **CHANGE})
            assert changed.status_code == 403
            ops = {"X-Forwarded-Email": "ops@x.dev", **CHANGE}
            assert client.post("/api/live/events", content=body, headers=ops).status_code == 200


def test_a_public_address_without_a_credential_refuses_to_start(history_url: str) -> None:
    refused = pytest.raises(server.SettingsError, match=r"--host 0\.0\.0\.0 is reachable")
    with refused, serving(history_url, server.Access(host="0.0.0.0"), host="0.0.0.0"):
        pytest.fail("it started")


def _events(url: str, after: str | None, wanted: int) -> list[dict[str, Any]]:
    """Read ``wanted`` SSE messages (id, event, data) from ``url``."""
    found: list[dict[str, Any]] = []
    headers = {"Last-Event-ID": after} if after is not None else {}
    with httpx.stream("GET", url, headers=headers, timeout=30) as answer:
        message: dict[str, Any] = {}
        for line in answer.iter_lines():
            if not line:
                if "event" in message:
                    found.append(message)
                    if len(found) == wanted:
                        return found
                message = {}
            elif not line.startswith(":") and ":" in line:
                key, _, value = line.partition(":")
                message[key] = value.strip()
    return found


def test_live_events_carry_ids_and_a_reconnect_with_last_event_id_misses_nothing(
    history_url: str,
) -> None:
    with serving(history_url) as running, running.client() as client:
        start = client.get("/api/live").json()["last_event"]
        results = [
            {"kind": "finished", "result": {"id": f"t.py::{n}", "name": str(n), "status": s}}
            for n, s in enumerate(["passed", "failed", "passed"])
        ]
        batch = {"run": "live-2", "events": [*BATCH["events"], *results]}
        assert client.post("/api/live/events", json=batch, headers=CHANGE).status_code == 200
        stream = f"{running.url}/api/events?run=live-2&after={start}"
        first = _events(stream, None, 2)
        assert [m["event"] for m in first] == ["run", "started"]
        ids = [int(m["id"]) for m in first]
        assert ids == sorted(ids)
        assert ids[0] > start
        # A browser that saw the first two reconnects: it gets exactly the rest.
        rest = _events(stream, first[-1]["id"], 3)
        assert [json.loads(m["data"])["result"]["id"] for m in rest] == [
            "t.py::0", "t.py::1", "t.py::2",
        ]  # fmt: skip
        detail = client.get("/api/live/live-2").json()
        assert detail["run"]["counts"]["passed"] == 2
        assert detail["run"]["pass_rate"] == pytest.approx(2 / 3, abs=1e-6)
        # A follower that waits gets what is posted after it connected.
        got: list[dict[str, Any]] = []
        reader = threading.Thread(
            target=lambda: got.extend(_events(stream, str(detail["last_event"]), 1))
        )
        reader.start()
        end = {"run": "live-2", "events": [{"kind": "ended"}]}
        client.post("/api/live/events", json=end, headers=CHANGE)
        reader.join(30)
        assert [m["event"] for m in got] == ["ended"]
        # An id from before this server's events were kept (or another server's): reset.
        (reset,) = _events(f"{running.url}/api/events?run=live-2", "1", 1)
        assert reset["event"] == "reset"


QUICK = """
from agent_health import test


@test("one")
async def one(expect):
    expect(1).to_equal(1)
"""


def test_a_local_run_started_through_the_api_with_tokens_reports_live_and_ends(
    tmp_path: Path, history_url: str
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text(QUICK)
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    guards = _tokens(tmp_path)
    with serving(history_url, guards, root=tmp_path) as running:
        reader = running.client(Authorization=f"Bearer {READ}")
        operator = running.client(Authorization=f"Bearer {OPERATE}")
        asked = {"paths": ["suite"]}
        assert reader.post("/api/workers", json=asked, headers=CHANGE).status_code == 403
        outside = operator.post("/api/workers", json={"paths": ["../.."]}, headers=CHANGE)
        assert outside.status_code == 400
        assert "outside the server's root" in outside.json()["error"]
        started = operator.post("/api/workers", json=asked, headers=CHANGE)
        assert started.status_code == 201, started.text
        uid = started.json()["run"]
        for _ in range(1200):  # the worker is a process of its own: wait for its end
            workers = operator.get("/api/workers").json()
            if workers[0]["state"] == "ended":
                break
            time.sleep(0.05)
        assert workers[0]["exit_code"] == 0
        detail = operator.get(f"/api/live/{uid}").json()
        # It posted its results with a token of its own (this server needs one), and that
        # token opens nothing once it ended.
        assert detail["run"]["counts"]["passed"] == 1
        assert detail["run"]["ended"] is True
        assert len(guards.tokens) == 2
        reader.close()
        operator.close()


ASKS = """
from agent_health import test


@test("asks the agent")
async def asks(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_match(r".")


@test("asks again")
async def again(agent, expect):
    await agent.run("Diagnose why the checkout service is failing.")
"""


async def test_a_runs_ledger_at_hand_is_verified_on_demand_and_tampering_named(
    tmp_path: Path, triage_url: str
) -> None:
    import asyncio

    from agent_health import cli, history

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_asks.py").write_text(ASKS)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    argv = ["run", str(suite), "--agent", f"rest+{triage_url}", "--history", url]
    assert await asyncio.to_thread(cli.main, argv) == 0
    with history.open_history(url) as opened:
        (run,) = opened.runs()
        elsewhere = {"t.py::a": "passed"}
        cluster_run = report(elsewhere, run_id="in-the-cluster")
        cluster_run["provenance"]["ledger"] = "configmap://evals/triage-ledger-nightly"
        opened.record(cluster_run)
        opened.record(report(elsewhere, run_id="no-ledger", at=1))
    assert run.ledger_url is not None
    ledger_dir = Path(run.ledger_url.removeprefix("file://"))

    def check() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        with serving(url) as running, running.client(**CHANGE) as client:
            document = client.get("/api/openapi.json").json()
            page = client.get(f"/api/runs/{run.uid}").json()
            path = "/api/runs/{uid}/ledger/verify"
            found = client.post(f"/api/runs/{run.uid}/ledger/verify", content="{}")
            assert found.status_code == 200, found.text
            check_answer(document, "POST", path, 200, found.json())
            gone = client.post("/api/runs/no-ledger/ledger/verify", content="{}")
            away = client.post("/api/runs/in-the-cluster/ledger/verify", content="{}")
            there = client.get("/api/runs/in-the-cluster").json()
            assert (gone.status_code, away.status_code) == (404, 409)
            assert (
                "agent-health ledger verify configmap://evals/triage-ledger-nightly"
                in (away.json()["error"])
            )
            assert there["evidence"]["ledger_at_hand"] is False
            return page, found.json(), gone.json()

    page, sound, _ = await asyncio.to_thread(check)
    assert page["evidence"]["ledger_verified"] is True  # as recorded: sealed by its run
    assert page["evidence"]["ledger_at_hand"] is True
    assert sound["ok"] is True
    assert (sound["cells"], sound["sealed"], sound["first_bad"]) == (2, True, None)
    assert sound["records"] >= 8
    # One record of the run file edited (an exchange's status): the check names it.
    run_file = ledger_dir / "run.jsonl"
    lines = run_file.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"kind":"exchange"' in line)
    lines[index] = lines[index].replace('"status":200', '"status":201', 1)
    run_file.write_text("\n".join(lines) + "\n")

    def check_again() -> dict[str, Any]:
        with serving(url) as running, running.client(**CHANGE) as client:
            found = client.post(f"/api/runs/{run.uid}/ledger/verify", content="{}")
            assert found.status_code == 200, found.text
            return dict(found.json())

    tampered = await asyncio.to_thread(check_again)
    assert tampered["ok"] is False
    bad = tampered["first_bad"]
    assert bad["cell"] in run_file.read_text()
    assert (bad["reason"], bad["line"]) == ("edited", 2)
    assert bad["message"].startswith("mac mismatch")
