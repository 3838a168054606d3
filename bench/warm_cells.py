"""Cold against warm cell start, on the test node, with an agent that takes seconds to start.

The end-to-end test's whole cluster (``tests/support/node/``: the chart's operator as its pod, the
kubelet, a registry, Agent Sandbox's controllers and warm-pool extensions as stand-ins) runs
the example RunSpec (judging skipped) with its target told to wait ``--ready`` seconds
before it listens (``$TRIAGE_AGENT_WARMUP_SECONDS``: a model load). Two RunSpecs, one
EvaluationRun of ``--cells`` cells at ``--parallelism`` each:

* **cold** — ``isolation.mode: agentSandbox`` without a pool: every cell's sandbox starts
  when its cell does, and its target's start is the cell's to wait out;
* **warm** — the same with ``isolation.warmPool`` (``--replicas`` sandboxes): a first run of
  one cell brings the pool up, the script waits until every pooled sandbox is ready, then the
  measured run takes them (the pool replenishes behind it).

A cell's **start** is the time from its object (the Sandbox, or the SandboxClaim) appearing in
the API to the controller's first call of the target (its first exchange in the cell's
ledger, sealed by the gateway): what a test waits before it talks to the agent. Printed:
median and p95 of each, how the warm run's cells were launched (``warm``: a pooled sandbox,
``cold``: the pool was empty), and the target (warm p95 under 1 s).

    .venv/bin/python bench/warm_cells.py                  # 12 cells, parallelism 3, 5 s
    .venv/bin/python bench/warm_cells.py --cells 20 --parallelism 4 --replicas 8

Needs root, ``ip`` and ``nsenter`` (the node's network namespaces), as ``cells.py`` does. The
times are this machine's under its load at the time (the load average is printed with them).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from agent_health.ledger import records  # noqa: E402
from support import e2e_support as e2e  # noqa: E402  (the test suite's cluster, on purpose)

QUICKSTART = ROOT / "examples" / "01-quickstart"
TARGET = 1.0  # warm start p95, seconds
EXT = "extensions.agents.x-k8s.io/v1beta1"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def runspec_of(name: str, ready: float, isolation: dict[str, Any]) -> dict[str, Any]:
    runspec, _ = e2e.example()
    runspec = copy.deepcopy(runspec)
    runspec["metadata"]["name"] = name
    spec = runspec["spec"]
    spec["suite"] = {"configMap": {"name": "triage-suite"}}
    spec.pop("judge")  # skipped anyway: no judge at all
    spec["ledger"] = {"url": f"configmap://default/{name}-ledger-{{run}}"}
    spec["isolation"] = isolation
    spec["target"]["env"].append({"name": "TRIAGE_AGENT_WARMUP_SECONDS", "value": str(ready)})
    return runspec


def run_of(name: str, runspec: str, cells: int, parallelism: int) -> dict[str, Any]:
    _, run = e2e.example()
    body = copy.deepcopy(run)
    body["metadata"]["name"] = name
    body["spec"] = {
        "runSpecRef": {"name": runspec},
        "repeats": cells,
        "parallelism": parallelism,
        "selection": {"grep": "payment"},
        "skipJudge": True,
    }
    return body


async def _measure(
    k8s: e2e.Cluster, runspec: str, run: dict[str, Any], kind: str
) -> tuple[list[float], dict[str, Any], list[list[float]]]:
    """Each cell's start (seconds), the run's final status, and for claims the parts of each
    start until its claim was bound and until its pod had the cell (the assignment on it).

    Times come from the API server's own watch streams, in this process (the emulator's
    store), so measuring polls nothing and adds no load of its own."""
    name = run["metadata"]["name"]
    api_version = EXT if kind == "SandboxClaim" else "agents.x-k8s.io/v1beta1"
    store = k8s.emulator.store
    seen: dict[str, float] = {}
    bound: dict[str, float] = {}
    sandbox_of: dict[str, str] = {}
    handed_at: dict[str, float] = {}  # pod → when its assignment appeared

    async def cells() -> None:
        async for event in store.watch(
            k8s.kind(api_version, kind), "default", lambda _l: True, since=None,
            initial_bookmark=False, timeout=None,
        ):  # fmt: skip
            body, now = event["object"], time.time()
            if (body["metadata"].get("labels") or {}).get("agenthealth.dev/run") != name:
                continue
            cell = body["metadata"]["name"]
            seen.setdefault(cell, now)
            sandbox = ((body.get("status") or {}).get("sandbox") or {}).get("name")
            if sandbox and cell not in bound:
                bound[cell], sandbox_of[cell] = now, sandbox

    async def pods() -> None:
        async for event in store.watch(
            k8s.kind("v1", "Pod"), "default", lambda _l: True, since=None, initial_bookmark=False,
            timeout=None,
        ):  # fmt: skip
            body = event["object"]
            annotations = body["metadata"].get("annotations") or {}
            if "agenthealth.dev/assignment" in annotations:
                handed_at.setdefault(body["metadata"]["name"], time.time())

    watching = [asyncio.ensure_future(cells()), asyncio.ensure_future(pods())]
    try:
        await k8s.apply(run)
        await e2e.until(
            lambda: (k8s.run(name).get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            f"run {name} to end",
            600,
        )
    finally:
        for task in watching:
            task.cancel()
    status = k8s.run(name).get("status") or {}
    key = k8s.ledger_key(name)
    starts: list[float] = []  # in the order the cells appeared
    opened: list[float] = []  # until the gateway opened the cell (its cell-meta)
    for cell, appeared in sorted(seen.items(), key=lambda item: item[1]):
        ledger = await k8s.ledger(f"configmap://default/{runspec}-ledger-{name}", cell, key)
        first = next(
            (r for r in ledger if isinstance(r, records.Exchange) and r.principal == "controller"),
            None,
        )
        if first is not None:
            starts.append(first.started_at.timestamp() - appeared)
        if isinstance(ledger[0], records.CellMeta):
            opened.append(ledger[0].started_at.timestamp() - appeared)
    order = sorted(seen, key=seen.__getitem__)  # the cells in the order they appeared
    to_bound = [bound[c] - seen[c] for c in order if c in bound]
    to_handed = [
        handed_at[sandbox_of[c]] - seen[c]
        for c in order
        if c in sandbox_of and sandbox_of[c] in handed_at
    ]
    return starts, status, [to_bound, to_handed, opened]


async def _pool_ready(k8s: e2e.Cluster, replicas: int) -> None:
    def ready() -> bool:
        store = k8s.emulator.store
        found = store.list(k8s.kind(EXT, "SandboxWarmPool"), "default", lambda _l: True)
        return bool(found) and (found[0].get("status") or {}).get("readyReplicas") == replicas

    await e2e.until(ready, f"the warm pool's {replicas} sandboxes to be ready", 300)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as root:
        async with e2e.cluster(Path(root), args.runtime) as k8s:
            await k8s.secret(e2e.NAMESPACE, "judge-credentials", api_key=e2e.JUDGE_KEY)
            await k8s.secret("default", "triage-agent-llm", offered=True, api_key="unused")
            suite = {"test_triage.py": (QUICKSTART / "test_triage.py").read_text()}
            await k8s.config_map("default", "triage-suite", suite)
            await k8s.install("sandbox.enabled=true", "sandbox.warmPools=true")
            await e2e.until(k8s.operator_ready, "the operator to be ready")
            sandboxed = {"mode": "agentSandbox"}
            pooled = sandboxed | {"warmPool": {"replicas": args.replicas, "keepSeconds": 600}}
            await k8s.apply(runspec_of("cold", args.ready, sandboxed))
            await k8s.apply(runspec_of("warm", args.ready, pooled))
            figures["cold"] = await _measure(
                k8s, "cold", run_of("cold-1", "cold", args.cells, args.parallelism), "Sandbox"
            )
            # The pool is made with a run's start: a first run of one cell brings it up.
            await _measure(k8s, "warm", run_of("warm-0", "warm", 1, 1), "SandboxClaim")
            await _pool_ready(k8s, args.replicas)
            figures["warm"] = await _measure(
                k8s, "warm", run_of("warm-1", "warm", args.cells, args.parallelism), "SandboxClaim"
            )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=12, help="cells per run (default 12)")
    parser.add_argument("--parallelism", type=int, default=3, help="cells at once (default 3)")
    parser.add_argument("--replicas", type=int, help="the warm pool's size (default: --cells)")
    parser.add_argument("--ready", type=float, default=5.0,
                        help="seconds the target takes to listen (default 5)")  # fmt: skip
    parser.add_argument("--runtime", choices=["process", "container"], default="process")
    args = parser.parse_args()
    if args.cells < 2:
        parser.error("--cells must be at least 2 (a median and a p95 need cells)")
    args.replicas = args.replicas or args.cells
    reason = e2e.runtime_unavailable(args.runtime)
    if reason is not None:
        parser.error(f"runtime {args.runtime}: {reason}")
    if args.runtime == "container":
        e2e.build_images()
    figures = asyncio.run(bench(args))
    load = os.getloadavg()
    print(f"cold against warm cell start on the test node ({args.runtime} runtime): "
          f"{args.cells} cells at parallelism {args.parallelism}, a target ready after "
          f"{args.ready:g} s, a pool of {args.replicas}; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")  # fmt: skip
    print(f"{'cells':<6} {'start median':>13} {'start p95':>10}  launched")
    failed = False
    for side, (starts, status, _) in figures.items():
        counts = status.get("counts") or {}
        if counts.get("passed") != args.cells or len(starts) != args.cells:
            print(f"  {side}: {counts} ({len(starts)} cells measured)", file=sys.stderr)
            failed = True
        launched = (
            f"{counts.get('warmStarts', 0)} warm, {counts.get('coldStarts', 0)} cold"
            if side == "warm"
            else "-"
        )
        print(f"{side:<6} {statistics.median(starts):>12.2f}s {p95(starts):>9.2f}s  {launched}")
        print("       each, in order: " + " ".join(f"{s:.2f}" for s in starts))
    bound, handed, opened = figures["warm"][2]
    for what, times in (
        ("the claim was bound", bound),
        ("the pod had its cell", handed),
        ("the gateway opened the cell", opened),
    ):
        if times:
            print(f"  of which until {what}: median {statistics.median(times):.2f} s, "
                  f"p95 {p95(times):.2f} s")  # fmt: skip
            print("       each, in order: " + " ".join(f"{t:.2f}" for t in times))
    warm = p95(figures["warm"][0])
    verdict = "ok" if warm < TARGET else "MISS"
    print(f"warm start p95 {warm:.2f} s   target < {TARGET:g} s   {verdict}")
    cold = statistics.median(figures["cold"][0])
    print(f"warm / cold start median: {statistics.median(figures['warm'][0]) / cold:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
