"""The operator at scale: one EvaluationRun of many cells on the emulated API server.

The real ``agent-health operator`` runs as a subprocess (logged in through a kubeconfig
that points at the emulator); this script serves the emulator, a loopback registry and
plays the kubelet and each cell's gateway: every cell runs ``--cell-seconds`` and ends, its
ledger recorded by the gateway's own recorder, sealed with the cell's key — by default into
its log (a ConfigMap ledger, one per run: the operator reads each ended cell's gateway log
through the API server and stores many cells per merge patch), or spooled and written at
its end into a file ledger. Printed: API writes per cell by kind (pods, Secrets, run
status, Events, ledger, other) for the operator and the gateways together (with a ConfigMap
ledger the gateways make no request at all), cells created per second (the first
``parallelism`` of them, and over the whole run), the run's status
patches and their rate, and the operator's peak RSS (``VmHWM``). Targets: ≤ 2 writes per
cell (operator and gateways), ≤ 1 status patch per second, ≤ 250 MB.

    .venv/bin/python bench/operator_scale.py                 # 200 cells, a few minutes
    .venv/bin/python bench/operator_scale.py --ledger file   # the ledger out of the API
    .venv/bin/python bench/operator_scale.py --cells 1000    # the 1,000-cell figure

Counts of writes are exact whatever the machine's load; rates are not (say the load average
with them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import operator_support as support  # noqa: E402
from support.node import kueue, kueueobjects  # noqa: E402

WRITES = ("create", "patch", "update", "delete")
KINDS = ("pods", "secrets", "status", "events", "ledger", "other")


def kubeconfig(url: str, path: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emulator", "cluster": {"server": url, "insecure-skip-tls-verify": True}}
        ],
        "users": [{"name": "operator", "user": {"token": "operator"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "operator"}}],
        "current-context": "emulator",
    }
    path.write_text(yaml.safe_dump(config))


def verb(request: Any) -> str:
    method = request.method.value
    if method == "GET":
        if request.params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if request.name else "list"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]


def kind(request: Any) -> str:
    """What a write request writes, as this benchmark splits them."""
    plural = request.resource.plural if request.resource is not None else ""
    if plural == "evaluationruns" and request.subresource == "status":
        return "status"
    if plural == "configmaps":
        return "ledger"
    return plural if plural in KINDS else "other"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        if args.ledger == "file":
            ledger = f"file://{tmp}/ledger"
        else:
            ledger = "configmap://default/ledger-{run}"
        async with support.cluster() as k8s:
            kubeconfig(k8s.url, Path(tmp) / "kubeconfig")
            runspec, run = k8s.example(ledger=ledger)
            run["spec"] = {
                "runSpecRef": {"name": "triage"},
                "repeats": args.repeats,
                "parallelism": args.parallelism,
            }
            tests = support.listing(*((f"suite/t.py::test {i}", ["x"]) for i in range(args.tests)))
            fake = support.Kubelet(
                k8s, tests, None, cell_seconds=args.cell_seconds, spool=Path(tmp) / "spools"
            )
            queueing = contextlib.AsyncExitStack()
            if args.queue_quota:
                # Kueue (the stand-in of tests/support/node/kueue.py) admits at most --queue-quota
                # cells at once: a ClusterQueue of that many pods, its LocalQueue "evals".
                stand_in = await queueing.enter_async_context(
                    kueue.running(k8s.emulator, k8s.client)
                )
                for path, body in (
                    ("resourceflavors", kueueobjects.resource_flavor()),
                    ("clusterqueues", kueueobjects.cluster_queue(
                        "evals", cohort="evals", pods=args.queue_quota)),
                    ("namespaces/default/localqueues",
                     kueueobjects.local_queue("evals", "default", "evals")),
                ):  # fmt: skip
                    answer = await k8s.client.post(f"/apis/{kueue.GROUP}/v1beta1/{path}", json=body)
                    answer.raise_for_status()
                run["spec"]["queue"] = "evals"
            options = k8s.options()
            env = os.environ | {"KUBECONFIG": str(Path(tmp) / "kubeconfig")}
            command = [
                str(Path(sys.executable).parent / "agent-health"), "operator",
                "--controller-image", options.controller_image,
                "--gateway-image", options.gateway_image,
                "--metrics-addr", "127.0.0.1:0", "--judge-addr", "127.0.0.1:0",
                "--health-addr", "127.0.0.1:0",
                "--insecure-registry", k8s.registry.host,
                "--judge-service-url", "http://agent-health-judge.agent-health.svc:8090",
                # A RunSpec's ledger must be under a prefix the operator allows.
                "--ledger-allow", "configmap://{namespace}/", "--ledger-allow", f"file://{tmp}/",
            ]  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                *command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            log: deque[bytes] = deque(maxlen=200)
            draining = asyncio.ensure_future(_drain(process, log))
            try:
                async with queueing, support.kubelet(fake):
                    await k8s.apply(runspec)
                    applied = asyncio.get_running_loop().time()
                    await k8s.apply(run)
                    name = run["metadata"]["name"]
                    done = await support.until(
                        lambda: (
                            k8s.run(name).get("status", {}).get("phase") == "Succeeded"
                            and k8s.run(name)
                        ),
                        "the run to succeed",
                        attempts=int(args.cap_seconds / 0.02),
                    )
                    all_done = asyncio.get_running_loop().time() - applied
                    rss, cpu = peak_rss_mb(process.pid), cpu_seconds(process.pid)
                    peak_queued = max(
                        (len(a.waiting) and sum(a.waiting.values()) for a in stand_in.admissions),
                        default=0,
                    ) if args.queue_quota else 0  # fmt: skip
                    peak_admitted = max(
                        (a.usage["evals"].get("pods", 0) for a in stand_in.admissions), default=0
                    ) if args.queue_quota else 0  # fmt: skip
            except AssertionError:
                print(b"".join(log).decode(errors="replace")[-3000:], file=sys.stderr)
                raise
            finally:
                process.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 30)
                await draining
            requests = k8s.operator_requests()
            # Whoever else spoke to the API server but the kubelet (no gateway should).
            gateways = [
                r
                for r in k8s.emulator
                if r.headers.get("Authorization") not in ("Bearer operator", "Bearer kubelet")
            ]
            seen = [t - applied for t in fake.created if t >= applied]
            first_cell = next(
                (t - applied for t, n in zip(fake.created, fake.started, strict=True)
                 if t >= applied and "-discover-" not in n),
                None,
            )  # fmt: skip
    cells = args.tests * args.repeats
    by_verb = Counter(verb(r) for r in requests)
    ledger_verbs = Counter(verb(r) for r in gateways)
    operator_writes = sum(by_verb[v] for v in WRITES)
    ledger_writes = sum(ledger_verbs[v] for v in WRITES)
    by_kind = Counter(kind(r) for r in [*requests, *gateways] if verb(r) in WRITES)
    patches = [
        r
        for r in requests
        if r.method.value == "PATCH" and r.subresource == "status"
        and r.resource.plural == "evaluationruns"
    ]  # fmt: skip
    seconds = (done["status"]["completionTime"], done["status"]["startTime"])
    started = time.strptime(seconds[1], "%Y-%m-%dT%H:%M:%SZ")
    ended = time.strptime(seconds[0], "%Y-%m-%dT%H:%M:%SZ")
    run_seconds = max(time.mktime(ended) - time.mktime(started), 1.0)
    burst = seen[: min(args.parallelism, len(seen))]
    return {
        "cells": cells,
        "parallelism": args.parallelism,
        "queue_quota": args.queue_quota,
        "seconds_to_first_cell_running": round(first_cell, 2) if first_cell is not None else None,
        "seconds_to_all_cells_done": round(all_done, 1),
        "peak_cells_admitted": int(peak_admitted),
        "peak_cells_queued": int(peak_queued),
        "counts": done["status"]["counts"],
        "run_seconds": run_seconds,
        "first_cells": len(burst),
        "first_cells_seconds": round(burst[-1], 2) if burst else None,
        "first_cells_per_second": round(len(burst) / burst[-1], 1) if burst else None,
        "cells_created_per_second": round(len(seen) / seen[-1], 2) if seen else None,
        "writes_per_cell_by_kind": {k: round(by_kind[k] / cells, 3) for k in KINDS},
        "requests_per_cell": {v: round(n / cells, 3) for v, n in sorted(by_verb.items())},
        "gateway_requests_per_cell": {
            v: round(n / cells, 3) for v, n in sorted(ledger_verbs.items())
        },
        "operator_writes_per_cell": round(operator_writes / cells, 3),
        "gateway_writes_per_cell": round(ledger_writes / cells, 3),
        "writes_per_cell": round((operator_writes + ledger_writes) / cells, 3),
        "status_patches": len(patches),
        "status_patches_per_second": round(len(patches) / run_seconds, 3),
        "operator_peak_rss_mb": round(rss, 1),
        "operator_cpu_seconds": round(cpu, 1),
    }


async def _drain(process: asyncio.subprocess.Process, log: deque[bytes]) -> None:
    """Keep the tail of the operator's log (an undrained pipe would block it)."""
    assert process.stderr is not None
    async for line in process.stderr:
        log.append(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200, help="tests x repeats (default 200)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tests", type=int, help="default: --cells / --repeats")
    parser.add_argument("--parallelism", type=int, default=100)
    parser.add_argument(
        "--ledger", choices=("configmap", "file"), default="configmap",
        help="configmap (default): the ledger's writes go through the API server and count",
    )  # fmt: skip
    parser.add_argument("--cell-seconds", type=float, default=0.2)
    parser.add_argument("--cap-seconds", type=float, default=900.0)
    parser.add_argument(
        "--queue-quota", type=int, default=0,
        help="put the run in a Kueue LocalQueue whose ClusterQueue admits this many cells at "
        "once (the Kueue stand-in of tests/support/node/kueue.py); 0 (default): no queue",
    )  # fmt: skip
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.tests is None:
        args.tests = max(1, args.cells // args.repeats)
    figures = asyncio.run(bench(args))
    counts = figures["counts"]
    print(f"cells: {figures['cells']} at parallelism {figures['parallelism']}, "
          f"{counts['passed']} passed in {figures['run_seconds']:.0f} s")  # fmt: skip
    if figures["queue_quota"]:
        print(f"Kueue: quota {figures['queue_quota']} cells, at most "
              f"{figures['peak_cells_admitted']} admitted at once (target <= quota), up to "
              f"{figures['peak_cells_queued']} queued")  # fmt: skip
    print(f"run created to first cell running: {figures['seconds_to_first_cell_running']} s; "
          f"to all cells done: {figures['seconds_to_all_cells_done']} s")  # fmt: skip
    print(f"cells created per second: {figures['first_cells_per_second']} for the first "
          f"{figures['first_cells']} (in {figures['first_cells_seconds']} s), "
          f"{figures['cells_created_per_second']} over the run "
          f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"operator API requests per cell: {figures['requests_per_cell']}")
    print(f"gateway (ledger) API requests per cell: {figures['gateway_requests_per_cell']}")
    split = ", ".join(f"{k} {v}" for k, v in figures["writes_per_cell_by_kind"].items())
    print(f"write requests per cell: {figures['writes_per_cell']} (operator "
          f"{figures['operator_writes_per_cell']} + gateways {figures['gateway_writes_per_cell']}; "
          f"target <= 2): {split}")  # fmt: skip
    print(f"status patches of the run: {figures['status_patches']} "
          f"({figures['status_patches_per_second']}/s, target <= 1/s)")  # fmt: skip
    print(f"operator peak RSS: {figures['operator_peak_rss_mb']} MB (target <= 250)")
    print(f"operator CPU: {figures['operator_cpu_seconds']} s over {figures['run_seconds']:.0f} s "
          "(the emulator, in this process, is the slower side)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
