"""Cell start and throughput on the test node, real containers beside processes.

For each runtime of the end-to-end test's node (``tests/support/node/``: ``process`` runs each
container as a process on this host's files; ``container`` runs it as a real container,
podman and runc, from the images ``make images`` built, pulled by digest from a real
registry), this script builds the whole cluster the end-to-end test builds — the chart's
operator as its pod, the registry, the kubelet — and runs the example's RunSpec (judging
skipped) with one EvaluationRun of ``--cells`` cells at each ``--parallelism``. Printed per
runtime and parallelism:

* **cold cell start**: from the moment the cell's pod exists in the API to the moment its
  controller container runs (every sidecar before it pulled, started and probed ready),
  median and p95 over the cells; the first cells of the container runtime pull the cell
  images onto a node that has none, the rest find them there, as on a fresh node;
* **cells per minute**: cells over the time from the run's first pod to its last cell
  graded;

and the container runtime's figures over the process runtime's. Needs root, ``ip``,
``nsenter``, and for the container runtime ``scripts/get-containers.sh``'s tools.

    .venv/bin/python bench/cells.py                         # 20 cells, parallelism 1 and 4
    .venv/bin/python bench/cells.py --cells 40 --parallelism 4 --runtime container

The times are this machine's under its load at the time (say the load average with them).
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

from support import e2e_support as e2e  # noqa: E402  (the test suite's cluster, on purpose)

QUICKSTART = ROOT / "examples" / "01-quickstart"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def one_runtime(runtime: str, cells: int, parallelisms: list[int]) -> dict[int, Any]:
    """Per parallelism: (start times in seconds, cells per minute)."""
    if runtime == "container":
        await asyncio.to_thread(e2e.build_images)
    found: dict[int, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cells-") as root:
        async with e2e.cluster(Path(root), runtime) as k8s:
            await k8s.secret(e2e.NAMESPACE, "judge-credentials", api_key=e2e.JUDGE_KEY)
            await k8s.secret("default", "triage-agent-llm", offered=True, api_key="unused")
            suite = {"test_triage.py": (QUICKSTART / "test_triage.py").read_text()}
            await k8s.config_map("default", "triage-suite", suite)
            await k8s.install("sandbox.enabled=true")
            await e2e.until(k8s.operator_ready, "the operator to be ready")
            runspec, run = e2e.example()
            runspec = copy.deepcopy(runspec)
            runspec["spec"]["suite"] = {"configMap": {"name": "triage-suite"}}
            runspec["spec"].pop("judge")  # skipped anyway: no judge at all
            runspec["spec"]["ledger"] = {"url": "configmap://default/bench-ledger-{run}"}
            await k8s.apply(runspec)
            for parallelism in parallelisms:
                name = f"bench-p{parallelism}"
                body = copy.deepcopy(run)
                body["metadata"]["name"] = name
                body["spec"] |= {"repeats": cells, "parallelism": parallelism,
                                 "selection": {"grep": "payment"}, "skipJudge": True}  # fmt: skip
                found[parallelism] = await _measure(k8s, body, cells)
    return found


async def _measure(k8s: e2e.Cluster, run: dict[str, Any], cells: int) -> tuple[list[float], float]:
    name = run["metadata"]["name"]
    await k8s.apply(run)
    seen: dict[str, float] = {}
    running: dict[str, float] = {}
    first: float | None = None
    while True:
        now = time.monotonic()
        for pod in k8s.pods("default", **{"agenthealth.dev/run": name}):
            if pod["metadata"].get("labels", {}).get("agenthealth.dev/component") != "cell":
                continue
            pod_name = pod["metadata"]["name"]
            seen.setdefault(pod_name, now)
            first = first if first is not None else now
            if pod_name not in running:
                try:
                    node_pod = k8s.node.pod("default", pod_name)
                except KeyError:
                    continue
                controller = node_pod.containers.get("controller")
                if controller is not None and "running" in controller.state:
                    running[pod_name] = now
                elif controller is not None and "terminated" in controller.state:
                    running[pod_name] = now  # ran and ended between two looks
        status = k8s.run(name).get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        await asyncio.sleep(0.01)
    assert first is not None
    ended = time.monotonic()
    counts = status.get("counts") or {}
    if counts.get("passed") != cells:
        print(f"  warning: {name}: {counts}", file=sys.stderr)
    starts = [running[p] - seen[p] for p in running]
    return starts, cells / (ended - first) * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=20, help="cells per run (default 20)")
    parser.add_argument("--parallelism", type=int, action="append",
                        help="cells at once (repeatable; default 1 and 4)")  # fmt: skip
    parser.add_argument("--runtime", choices=["process", "container"], action="append")
    args = parser.parse_args()
    if args.cells < 2:
        parser.error("--cells must be at least 2 (a median and a p95 need cells)")
    parallelisms = args.parallelism or [1, 4]
    runtimes = args.runtime or ["process", "container"]
    for runtime in runtimes:
        reason = e2e.runtime_unavailable(runtime)
        if reason is not None:
            parser.error(f"runtime {runtime}: {reason}")
    figures: dict[str, dict[int, Any]] = {}
    for runtime in runtimes:
        figures[runtime] = asyncio.run(one_runtime(runtime, args.cells, parallelisms))
    load = os.getloadavg()
    print(f"cells on the test node: {args.cells} cells per run, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores")  # fmt: skip
    print(f"{'runtime':<10} {'parallel':>8} {'start median':>13} {'start p95':>10} "
          f"{'cells/min':>10}")  # fmt: skip
    for runtime, rows in figures.items():
        for parallelism, (starts, rate) in rows.items():
            print(f"{runtime:<10} {parallelism:>8} {statistics.median(starts):>12.2f}s "
                  f"{p95(starts):>9.2f}s {rate:>10.1f}")  # fmt: skip
    if {"process", "container"} <= figures.keys():
        for parallelism in parallelisms:
            (ps, pr), (cs, cr) = figures["process"][parallelism], figures["container"][parallelism]
            print(f"container / process at parallelism {parallelism}: start median "
                  f"{statistics.median(cs) / statistics.median(ps):.2f}x, p95 "
                  f"{p95(cs) / p95(ps):.2f}x, cells per minute {cr / pr:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
