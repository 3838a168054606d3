"""agent-health serve --cluster against the emulator with the real operator: an
EvaluationRun created from the API, followed live cell by cell, suspended and resumed,
requeued and cancelled — each a change of the run the operator then honours."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kopf
import pytest
from agent_health import server
from support.operator_support import Kubelet, cluster, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/t.py::first", []), ("suite/t.py::second", []))
CHANGE = {"X-Agent-Health": "1"}


@contextlib.asynccontextmanager
async def served(history_url: str, k8s_url: str) -> AsyncIterator[str]:
    """The server in a thread of its own (its own loop), talking to the emulator."""
    connection = kopf.ConnectionInfo(server=k8s_url, insecure=True, token="serve")
    settings = server.Settings(
        history=history_url, port=0, cluster=True, namespace="default", connection=connection
    )
    box: dict[str, Any] = {}
    ready = threading.Event()

    def run() -> None:
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        box["loop"], box["stop"] = loop, stop

        def said(url: str) -> None:
            box["url"] = url
            ready.set()

        try:
            loop.run_until_complete(server.serve(settings, server.Access(), ready=said, stop=stop))
        except BaseException as err:
            box["error"] = err
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    await asyncio.to_thread(ready.wait, 60)
    if "error" in box:
        raise box["error"]
    try:
        yield box["url"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        await asyncio.to_thread(thread.join, 30)


async def test_a_run_created_followed_suspended_resumed_requeued_and_cancelled(
    tmp_path: Path,
) -> None:
    async with cluster() as k8s:
        runspec_body, _ = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _cell: "hold")
        async with (
            kubelet(fake),
            k8s.operator(),
            served(f"sqlite:///{tmp_path / 'h.db'}", k8s.url) as url,
            httpx.AsyncClient(base_url=url, headers=CHANGE, timeout=60) as api,
        ):
            await k8s.apply(runspec_body)
            bad = await api.post(
                "/api/cluster/runs",
                json={"namespace": "default", "runSpec": "triage", "parallelism": 0},
            )
            assert bad.status_code == 400
            made = await api.post(
                "/api/cluster/runs",
                json={"namespace": "default", "runSpec": "triage", "repeats": 2, "parallelism": 2},
            )
            assert made.status_code == 201, made.text
            run = made.json()
            uid, name = run["uid"], run["name"]
            where = f"/api/cluster/runs/default/{name}"
            await until(lambda: len(fake.held) == 2, "two cells to run")

            async def live() -> dict[str, Any]:
                return (await api.get(f"/api/live/{uid}")).json()

            async def waited(check: Any, what: str) -> dict[str, Any]:
                for _ in range(2000):
                    found = await live()
                    if check(found):
                        return found
                    await asyncio.sleep(0.05)
                raise AssertionError(f"timed out waiting for {what}: {found}")

            first = await waited(lambda d: d["run"]["phase"] == "Running", "the run to run")
            assert (first["run"]["source"], first["run"]["name"]) == ("cluster", name)
            # What is in flight: the cells running, as the operator's status names them.
            held = sorted((cell.test_id, cell.repeat) for cell in fake.held.values())
            flying = await waited(lambda d: len(d["run"]["in_flight"]) == 2, "two in flight")
            assert sorted((f["id"], f["repeat"]) for f in flying["run"]["in_flight"]) == held
            assert all(f["since"] for f in flying["run"]["in_flight"])
            assert k8s.run(name)["status"]["counts"]["running"] == 2

            released = sorted(fake.held)[0]
            left = [(c.test_id, c.repeat) for n, c in fake.held.items() if n != released]
            await fake.release(released)
            one = await waited(
                lambda d: len(d["results"]) == 1 and len(d["run"]["in_flight"]) == 1,
                "the first cell's result, and one still in flight",
            )
            assert one["results"][0]["status"] == "passed"
            assert [(f["id"], f["repeat"]) for f in one["run"]["in_flight"]] == left

            assert (await api.patch(where, json={"suspend": True})).status_code == 200
            assert k8s.run(name)["spec"]["suspend"] is True  # what kubectl patch would do
            await until(
                lambda: (
                    not fake.held
                    and all((p.get("status") or {}).get("phase") == "Succeeded" for p in k8s.pods())
                ),
                "the running cell to stop (the one that passed stays, graded)",
            )
            await waited(lambda d: d["run"]["phase"] == "Suspended", "the page to say suspended")
            refused = await api.patch(where, json={"repeats": 3})
            assert refused.status_code == 400  # not a field that steers a run

            assert (await api.patch(where, json={"suspend": False})).status_code == 200
            await until(lambda: len(fake.held) == 2, "cells to run again")
            while not finished(k8s, name):
                for held in list(fake.held):
                    await fake.release(held)
                await asyncio.sleep(0.05)
            done = await waited(lambda d: d["run"]["ended"], "the run to end on the hub")
            assert done["run"]["counts"]["passed"] == 4
            assert sorted((r["id"], r["repeat"]) for r in done["results"]) == [
                ("suite/t.py::first", 0), ("suite/t.py::first", 1),
                ("suite/t.py::second", 0), ("suite/t.py::second", 1),
            ]  # fmt: skip

            again = await api.post(f"{where}/requeue", json={})
            assert again.status_code == 200
            assert k8s.run(name)["spec"]["requeueErrored"] == 1

            gone = await api.request("DELETE", where, json={})
            assert gone.status_code == 200
            missing = await api.request("DELETE", where, json={})
            assert missing.status_code == 404
