"""How big the HTML report gets and how fast it opens, at 2,000 tests x 3 repeats.

Builds ``--tests`` x ``--repeats`` results (default 2,000 x 3 = 6,000) shaped like real
runs: a prompt, a context item, an answer, an 8-step trajectory with tool calls, arguments
and results, four signals (one a judge with reasoning), derived metrics and, for failures,
insights. Then, in this one process:

* writes the JSON report and the HTML report and prints both sizes (ratio HTML / JSON: what
  the page adds to the data it carries);
* opens the HTML report in Debian's headless Chromium (``scripts/browser.py``) from
  ``file://`` and reads the time from navigation start to the inspector being usable (the
  page's own ``agent-health-ready`` mark), the median of ``--rounds`` loads; the baseline is
  a bare page carrying the same JSON that only parses it, loaded the same way (ratio report
  / bare page: what rendering costs on top of reading the data);
* times a search (typing a query until the list shows its matches, including the list's
  120 ms typing pause) and opening a test (click until the inspector shows it);
* reads the page's JavaScript heap after loading.

Targets: load <= 2 s, search <= 0.5 s, open <= 0.2 s. It reports, it does not gate: exit 0
whatever the figures, 1 when the page made a network request or hit a script error, 2 for
bad options.

Usage: .venv/bin/python bench/html_report.py [--tests 2000] [--repeats 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import browser  # noqa: E402
from agent_health.connectors.protocol import ContextItem, Step, TokenUsage  # noqa: E402
from agent_health.engine import reporters  # noqa: E402
from agent_health.engine.reporters import html  # noqa: E402
from agent_health.engine.reports.report import RunReport  # noqa: E402
from agent_health.sdk.results import RunResult, Signal, TestResult  # noqa: E402
from agent_health.traces import metrics  # noqa: E402

LOAD_TARGET_S, SEARCH_TARGET_S, OPEN_TARGET_S = 2.0, 0.5, 0.2
SERVICES = ("payment", "auth", "search", "inventory", "checkout", "billing", "email", "cart")
BARE_PAGE = """<!doctype html><meta charset="utf-8"><title>bare</title><body>
<script id="report-data" type="application/json">{data}</script>
<script>JSON.parse(document.getElementById("report-data").textContent);
document.body.dataset.ready = "1"; performance.mark("agent-health-ready");</script>"""


def _steps(service: str, failing: bool) -> tuple[Step, ...]:
    lines = [{"level": "error", "message": f"Connection refused to {service}-db:5432"}] * 4
    return (
        Step(type="thinking", content=f"The user asks about the {service} service."),
        Step(type="tool_call", tool_name="search_logs", tool_args={"service": service}),
        Step(
            type="tool_result",
            tool_name="search_logs",
            tool_output={"service": service, "lines": lines},
            status="error" if failing else "ok",
            latency_ms=12.0,
        ),
        Step(type="tool_call", tool_name="service_status", tool_args={"service": service}),
        Step(
            type="tool_result",
            tool_name="service_status",
            tool_output={"service": service, "status": "degraded", "replicas": 3},
            latency_ms=4.0,
        ),
        Step(type="thinking", content="The logs point at the database; checking its status."),
        Step(type="tool_call", tool_name="service_status", tool_args={"service": "db"}),
        Step(type="assistant", content=f"Root cause: the {service} service cannot reach its DB."),
    )


def make_results(tests: int, repeats: int) -> list[TestResult]:
    """``tests`` x ``repeats`` results; about one in five fails, some only on one repeat."""
    out = []
    for r in range(repeats):
        for i in range(tests):
            service = SERVICES[i % len(SERVICES)]
            failing = i % 5 == 0 or (i % 7 == 0 and r == repeats - 1)
            steps = _steps(service, failing)
            usage = TokenUsage(prompt=180 + i % 50, completion=60 + i % 20)
            run_id = f"{i:06d}{r:02d}" + "0" * 24
            prompt = f"Diagnose why the {service} service is failing (case {i})."
            run = RunResult(
                run_id=run_id,
                prompt=prompt,
                output=steps[-1].content or "",
                trajectory=steps,
                token_usage=usage,
                duration_ms=850.0 + i % 300,
            )
            verdict = "names the database" if not failing else "does not name the database"
            out.append(
                TestResult(
                    id=f"suite/test_{service}.py::case {i:04d} diagnoses {service}",
                    name=f"case {i:04d} diagnoses {service}",
                    title=f"case {i:04d} diagnoses {service}",
                    file=f"suite/test_{service}.py",
                    line=10 + i % 400,
                    labels=(f"category:{service}", f"difficulty:{('easy', 'hard')[i % 2]}"),
                    repeat=r,
                    status="failed" if failing else "passed",
                    score=0.4 if failing else 1.0,
                    run_id=run_id,
                    prompt=prompt,
                    context=(ContextItem(description="Error log", value=f"{service}: refused"),),
                    output=run.output,
                    trajectory=steps,
                    duration_ms=900.0 + i % 300,
                    signals=(
                        Signal(
                            kind="deterministic",
                            role="gate",
                            name="to_have_called_tool('search_logs')",
                            passed=True,
                            score=1.0,
                            evidence={"expected": "search_logs", "actual": ["search_logs"]},
                        ),
                        Signal(
                            kind="deterministic",
                            role="gate",
                            name="to_have_no_tool_errors()",
                            passed=not failing,
                            score=0.0 if failing else 1.0,
                            evidence={"expected": 0, "actual": int(failing)},
                        ),
                        Signal(
                            kind="judge",
                            role="gate",
                            name="identifies that the service cannot reach its database",
                            passed=not failing,
                            score=0.2 if failing else 0.95,
                            reasoning=f"The answer {verdict} and cites the refused connection "
                            "from the error log as the evidence for it.",
                            evidence={"model": "judge-model", "cached": False},
                        ),
                        Signal(
                            kind="judge",
                            role="observe",
                            name="is concise",
                            passed=True,
                            score=0.8,
                            reasoning="Two sentences, no filler.",
                        ),
                    ),
                    metrics=metrics.derive(run),
                    insights={
                        "summary": "the log tool failed and the agent did not say so",
                        "why": "it answered from the service status alone",
                        "recommendations": ["handle tool errors: retry or report them"],
                    }
                    if failing
                    else None,
                    token_usage=usage,
                )
            )
    return out


def _ready_ms(page: Any) -> float:
    mark: float = page.evaluate("performance.getEntriesByName('agent-health-ready')[0].startTime")
    return mark


def _heap_mib(page: Any) -> float:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    found = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return float(found.get("JSHeapUsedSize", 0.0)) / 2**20


def load(chromium: Any, url: str) -> float:
    """Open ``url`` in a fresh page; the ms from navigation start to its ready mark."""
    with browser.watched_page(chromium) as seen:
        seen.page.goto(url)
        seen.page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        if seen.outside(url) or seen.errors:
            raise SystemExit(f"{url} misbehaved: {seen.outside(url)} {seen.errors}")
        return _ready_ms(seen.page)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.tests < 1 or args.repeats < 1 or args.rounds < 1:
        parser.error("--tests, --repeats and --rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="agent-health-bench-") as tmp:
        return _run(args, Path(tmp))


def _run(args: argparse.Namespace, tmp: Path) -> int:
    results = make_results(args.tests, args.repeats)
    started = time.perf_counter()
    report = RunReport.build(results, duration_ms=1.0, repeats=args.repeats)
    build_s = time.perf_counter() - started
    json_path = tmp / "report.json"
    started = time.perf_counter()
    reporters.write("json", json_path, report)
    json_s = time.perf_counter() - started
    started = time.perf_counter()
    html_path = reporters.write("html", tmp / "html", report)
    html_s = time.perf_counter() - started
    bare = tmp / "bare.html"
    bare.write_text(BARE_PAGE.format(data=html.page_data(report)), encoding="utf-8")
    json_mib = json_path.stat().st_size / 2**20
    html_mib = html_path.stat().st_size / 2**20

    report_ms: list[float] = []
    bare_ms: list[float] = []
    url = html_path.as_uri()
    with browser.chromium() as chromium:
        for _ in range(args.rounds):  # interleaved, so other load on the machine hits both
            bare_ms.append(load(chromium, bare.as_uri()))
            report_ms.append(load(chromium, url))
        with browser.watched_page(chromium) as seen:
            page = seen.page
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
            heap = _heap_mib(page)
            started = time.perf_counter()
            page.fill("#search", "case 0007 ")
            page.wait_for_selector("#list-count >> text=/^1 of /", timeout=60_000)
            search_s = time.perf_counter() - started
            started = time.perf_counter()
            page.click("#test-list .test-row")
            page.wait_for_selector("#inspector h2", timeout=60_000)
            open_s = time.perf_counter() - started
            problems = seen.outside(url) + seen.errors

    load_s = statistics.median(report_ms) / 1000
    base_s = statistics.median(bare_ms) / 1000
    rows = [
        ("results", f"{len(results):,} ({args.tests:,} tests x {args.repeats} repeats)", ""),
        ("JSON report size", f"{json_mib:.1f} MiB", ""),
        ("HTML report size", f"{html_mib:.1f} MiB", ""),
        ("ratio size (HTML / JSON)", f"{html_mib / json_mib:.2f}", ""),
        ("build report (Python)", f"{build_s:.2f} s", ""),
        ("write JSON / write HTML", f"{json_s:.2f} s / {html_s:.2f} s", ""),
        ("load: bare page parsing the same JSON", f"{base_s:.2f} s", ""),
        ("load: HTML report, usable", f"{load_s:.2f} s", _verdict(load_s, LOAD_TARGET_S)),
        ("ratio load (report / bare page)", f"{load_s / base_s:.2f}", ""),
        ("search to list updated", f"{search_s:.2f} s", _verdict(search_s, SEARCH_TARGET_S)),
        ("open a test", f"{open_s:.2f} s", _verdict(open_s, OPEN_TARGET_S)),
        ("JS heap after load", f"{heap:.0f} MiB", ""),
    ]
    print(f"HTML report benchmark (load average {os.getloadavg()[0]:.2f}, {args.rounds} rounds)")
    width = max(len(r[0]) for r in rows)
    for name, value, verdict in rows:
        print(f"  {name:<{width}}  {value:<28} {verdict}".rstrip())
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "results": len(results),
                    "json_bytes": json_path.stat().st_size,
                    "html_bytes": html_path.stat().st_size,
                    "load_s": load_s,
                    "bare_load_s": base_s,
                    "loads_ms": report_ms,
                    "search_s": search_s,
                    "open_s": open_s,
                    "heap_mib": heap,
                },
                indent=2,
            )
        )
    if problems:
        print(f"the page misbehaved: {problems}", file=sys.stderr)
        return 1
    return 0


def _verdict(value: float, target: float) -> str:
    return f"target <= {target:g} s {'PASS' if value <= target else 'MISS'}"


if __name__ == "__main__":
    raise SystemExit(main())
