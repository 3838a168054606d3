"""What the operator's own work keeps of kopf's: nothing.

kopf runs each handler with its cause — the watched object's whole body and raw event — in
a context variable, and every task or timer started from a handler copies the handler's
context. The operator starts one deadline timer per cell from the cell's pod event; had it
kept kopf's context, each timer would keep that pod's body alive until the deadline (about
40 KB a cell, 430 MB of the operator's at 5,000 cells; ``bench/operator_scale.py`` prints
the figure). Checked here while the last cells run: no kopf cause of an ended cell's pod is
alive, and an ended cell's deadline timer went with its grade.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from kopf._core.intents.causes import WatchingCause
from support.operator_support import Cluster, Kubelet, cluster, kubelet, listing, until

CELLS = 6
PARALLELISM = 2
HELD = 2
"""The first cells pass, so that the later ones are launched from their pods' events; the
last ones keep running."""


def _timer(task: asyncio.Task[Any]) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and "agent_health" in code.co_filename and code.co_name == "later"


def _counts(k8s: Cluster, name: str) -> tuple[int, int]:
    counts = k8s.run(name).get("status", {}).get("counts", {})
    return counts.get("passed", 0), counts.get("running", 0)


def _causes_of(pods: set[str]) -> list[str]:
    """The pods of ``pods`` whose kopf cause (body and raw event) is still alive."""
    gc.collect()
    return [
        found.body.metadata.name
        for found in gc.get_objects()
        if isinstance(found, WatchingCause) and found.body.metadata.name in pods
    ]


async def test_the_operators_tasks_hold_nothing_of_kopfs_handler_context() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example()
        run["spec"] = {"runSpecRef": {"name": "triage"}, "repeats": 1, "parallelism": PARALLELISM}
        tests = listing(*((f"suite/t.py::test {i}", ["x"]) for i in range(CELLS)))
        fake = Kubelet(k8s, tests, None, outcome=lambda _cell: outcome())

        def outcome() -> str:
            return "hold" if len(fake.seen) > CELLS - HELD else "passed"

        async with kubelet(fake), k8s.operator(status_interval=0.05):
            await k8s.apply(runspec)
            await k8s.apply(run)
            await until(lambda: len(fake.held) == HELD, "the last cells to run")
            name = run["metadata"]["name"]
            await until(lambda: _counts(k8s, name) == (CELLS - HELD, HELD), "the first graded")
            # The running cells' deadline timers; an ended cell's went with its grade.
            timers = [t for t in asyncio.all_tasks() if _timer(t) and not t.done()]
            assert len(timers) == HELD, timers
            ended = {p["metadata"]["name"] for p in k8s.pods() if p["metadata"]["name"] not in
                     {c.pod_name for c in fake.held.values()}}  # fmt: skip
            assert len(ended) == CELLS - HELD
            # Ended cells' last pod events were handled: kopf's causes of them are gone
            # (polled a bounded number of times, so that one still in kopf's hands may go).
            await until(lambda: not _causes_of(ended), "kopf's causes of ended pods to go", 50)
            for cell in list(fake.held):
                await fake.release(cell)
            await until(
                lambda: k8s.run(name).get("status", {}).get("phase") == "Succeeded",
                "the run to succeed",
            )
