"""The Grafana dashboard and the Prometheus rules, checked by a real Prometheus.

The operator's metrics (:class:`agent_health.cluster.metrics.OperatorMetrics`, filled with
sample observations) are served over HTTP on 127.0.0.1; Debian's Prometheus scrapes them
every second, loads the chart's rules file, and answers every panel's query through its
HTTP API. promtool checks the rules file and runs its unit tests.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from agent_health.cluster import metrics
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results
from aiohttp import web
from support import ship_support
from support.ship_support import CHART

DASHBOARD = json.loads((CHART / "dashboards" / "agent-health.json").read_text())
RULES = CHART / "rules" / "agent-health.rules.yaml"
# Grafana's variables as a user who picked "All" sees them.
VARIABLES = {"$namespace": ".*", "$runspec": ".*", "$model": ".*", "$__rate_interval": "1m"}
SCRAPE_BOUND = 120  # polls of 0.25 s: a failing setup stops instead of hanging


def _targets() -> list[tuple[str, str]]:
    return [
        (f"{panel['title']} [{target['refId']}]", target["expr"])
        for panel in DASHBOARD["panels"]
        for target in panel.get("targets", [])
    ]


def _concrete(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"an unknown dashboard variable is left in {expr}"
    return expr


def _metric_names(text: str) -> set[str]:
    return set(re.findall(r"(?<![:\w])agent_health_[a-z_]+\b(?!:)", text))


def test_promtool_checks_the_rules() -> None:
    done = ship_support.run([ship_support.promtool(), "check", "rules", RULES])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_promtool_rule_unit_tests_pass() -> None:
    tests = RULES.with_name("agent-health.rules.test.yaml")
    done = ship_support.run([ship_support.promtool(), "test", "rules", tests], cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_does_reject_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    rules = yaml.safe_load(RULES.read_text())
    rules["groups"][0]["rules"][0]["expr"] = "sum by (namespace (rate(x[5m]))"
    broken.write_text(yaml.safe_dump(rules))
    done = ship_support.run([ship_support.promtool(), "check", "rules", broken])
    assert done.returncode != 0


def test_the_dashboard_uses_only_metrics_the_operator_exports() -> None:
    exported = {family.name for family in metrics.OperatorMetrics().registry.collect()}
    exposed = {
        name for family in exported for name in (family, f"{family}_total", f"{family}_bucket")
    }
    used = _metric_names(json.dumps(DASHBOARD))
    assert used <= exposed, f"unknown metrics in the dashboard: {used - exposed}"
    shown = {re.sub(r"_(total|bucket)$", "", name) for name in used}
    assert shown == exported, f"metrics with no panel: {exported - shown}"
    rules = _metric_names(RULES.read_text())
    assert rules <= exposed, f"unknown metrics in the rules: {rules - exposed}"


def test_every_panel_has_a_datasource_variable_and_a_unique_id() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
    names = [v["name"] for v in DASHBOARD["templating"]["list"]]
    assert names == ["datasource", "namespace", "runspec", "model"]


# -- a real Prometheus ------------------------------------------------------------------


def _cell(name: str, status: results.Status, seconds: float) -> grading.CellGrade:
    cause: results.Cause | None = "agent" if status == "errored" else None
    result = results.TestResult(
        id="t", name="t", title="t", file="t.py", line=1, status=status, run_id=name, cause=cause
    )
    usage = {
        "target": ledger_usage.TokenUsage(input_tokens=300, output_tokens=50, total_tokens=350),
        "peer:logs": ledger_usage.TokenUsage(input_tokens=10, output_tokens=2, total_tokens=12),
        "judge": ledger_usage.TokenUsage(input_tokens=80, output_tokens=8, total_tokens=88),
    }
    return grading.CellGrade(
        cell=name, test_id="t", repeat=0, status=status, duration_ms=seconds * 1000,
        usage=usage, result=result,
    )  # fmt: skip


def _status(phase: evaluationrun.Phase, passed: int, failed: int) -> evaluationrun.Status:
    counts = evaluationrun.Counts(
        total=passed + failed + 3, pending=1, running=1, passed=passed, failed=failed, errored=1
    )
    return evaluationrun.Status(
        phase=phase, counts=counts, pass_rate=passed / (passed + failed), score=0.7
    )


def observe(m: metrics.OperatorMetrics, batch: int) -> None:
    """One round of what a running operator sees: runs, graded and preempted cells, judge
    calls, errors."""
    for i in range(4):
        status: results.Status = ("passed", "passed", "failed", "errored")[i]
        m.observe_grade("evals", "triage", "nightly-1", _cell(f"b{batch}c{i}", status, 20 + 30 * i))
    m.observe_run("evals", "triage", "nightly-1", _status("Running", 3 * batch, batch))
    m.observe_run("evals", "triage", "nightly-0", _status("Succeeded", 9, 1))
    m.cell_preempted("evals", "triage")
    m.cell_launched("evals", "triage", "warm")
    m.cell_launched("evals", "triage", "cold")
    m.observe_judge("gpt-4o-mini", "ok", 0.8)
    m.observe_judge("gpt-4o-mini", "cached", 0.01)
    m.observe_judge("gpt-4o-mini", "errored", 3.0)
    m.reconcile_error("evaluationrun")
    m.set_queue_depth("grading", 2 + batch)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(SCRAPE_BOUND):
        if await check():
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"Prometheus never {what}")


class Prometheus:
    """A Prometheus server scraping the operator's metrics, and its query API."""

    def __init__(self, client: httpx.AsyncClient, served: metrics.OperatorMetrics) -> None:
        self.client = client
        self.metrics = served

    async def query(self, expr: str) -> dict[str, Any]:
        answer = await self.client.get("/api/v1/query", params={"query": expr})
        body: dict[str, Any] = answer.json()
        assert answer.status_code == 200, f"{expr}: {body.get('error')}"
        assert body["status"] == "success", body
        data: dict[str, Any] = body["data"]
        return data

    async def series(self, expr: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.query(expr))["result"]
        return found

    async def scraped(self, expr: str, value: float) -> bool:
        found = await self.series(expr)
        return bool(found) and float(found[0]["value"][1]) == value


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    """Installed (or found) outside the event loop: an apt-get install blocks for a while."""
    return ship_support.prometheus()


@pytest.fixture
async def prometheus(tmp_path: Path, prometheus_binary: Path) -> AsyncIterator[Prometheus]:
    served = metrics.OperatorMetrics()
    app = web.Application()
    app.router.add_get("/metrics", served.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    target = f"127.0.0.1:{runner.addresses[0][1]}"
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "agent-health", "static_configs": [{"targets": [target]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    server = await asyncio.create_subprocess_exec(
        str(prometheus_binary),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await _until(lambda: _ready(client, server), "became ready")
            yield Prometheus(client, served)
    finally:
        server.terminate()
        await server.wait()
        log.close()
        await runner.cleanup()


async def _ready(client: httpx.AsyncClient, server: asyncio.subprocess.Process) -> bool:
    assert server.returncode is None, "prometheus exited; see prometheus.log in the test's tmp_path"
    try:
        return (await client.get("/-/ready")).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
async def test_every_dashboard_query_returns_series_from_a_real_prometheus(
    prometheus: Prometheus,
) -> None:
    # Two rounds of observations, each seen by a scrape, so every rate() has an increase.
    for batch in (1, 2):
        observe(prometheus.metrics, batch)
        await _until(
            lambda b=batch: prometheus.scraped('agent_health_queue_depth{queue="grading"}', 2 + b),
            f"scraped batch {batch}",
        )
    await _until(
        lambda: prometheus.scraped('count_over_time(up{job="agent-health"}[1m]) >= bool 4', 1),
        "scraped four times",
    )
    empty = []
    for title, expr in _targets():
        found = await prometheus.series(_concrete(expr))
        if not found:
            empty.append(f"{title}: {expr}")
    assert not empty, "panels with no data:\n" + "\n".join(empty)

    pass_rate = await prometheus.series(_concrete(_targets()[0][1]))
    assert [(s["metric"]["runspec"], float(s["value"][1])) for s in pass_rate] == [("triage", 0.9)]
    states = await prometheus.series('sum by (state) (agent_health_cells{namespace=~".*"})')
    assert {s["metric"]["state"]: float(s["value"][1]) for s in states}["passed"] == 9 + 6


@pytest.mark.slow
async def test_the_dashboard_variables_and_rules_work_on_a_real_prometheus(
    prometheus: Prometheus,
) -> None:
    observe(prometheus.metrics, 1)
    await _until(
        lambda: prometheus.scraped("count(agent_health_cells_graded_total)", 3),
        "scraped the graded cells",
    )
    for variable in DASHBOARD["templating"]["list"][1:]:
        label, selector = re.fullmatch(
            r"label_values\((.+), (\w+)\)", variable["definition"]
        ).group(2, 1)
        answer = await prometheus.client.get(
            f"/api/v1/label/{label}/values", params={"match[]": _concrete(selector)}
        )
        assert answer.json()["data"], f"variable {variable['name']} lists nothing"
    expected = {"namespace": ["evals"], "runspec": ["triage"], "model": ["gpt-4o-mini"]}
    for label, values in expected.items():
        answer = await prometheus.client.get(f"/api/v1/label/{label}/values")
        assert answer.json()["data"] == values

    async def rules_ran() -> bool:
        groups = (await prometheus.client.get("/api/v1/rules")).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return len(rules) == 7 and all(
            r.get("lastEvaluation", "0001").startswith("2") for r in rules
        )

    await _until(rules_ran, "evaluated the rules")
    groups = (await prometheus.client.get("/api/v1/rules")).json()["data"]["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"
    await _until(
        lambda: _has(prometheus, "namespace_runspec_status:agent_health_cells_graded:rate5m"),
        "recorded the cells-graded rate",
    )


async def _has(prometheus: Prometheus, expr: str) -> bool:
    return bool(await prometheus.series(expr))
