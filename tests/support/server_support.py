"""agent-health serve in the test's process: started on a free loopback port in a thread of
its own (its own event loop), stopped when the test ends; and the OpenAPI check every API
answer goes through."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from agent_health import history, server

from support.history_support import report


@dataclass
class Running:
    url: str
    port: int
    stop: asyncio.Event
    loop: asyncio.AbstractEventLoop
    documents: dict[str, Any] = field(default_factory=dict)

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@contextlib.contextmanager
def serving(
    history_url: str, guards: server.Access | None = None, **settings: Any
) -> Iterator[Running]:
    """``agent-health serve`` on ``history_url`` until the block ends."""
    guards = guards or server.Access(host=settings.get("host", "127.0.0.1"))
    chosen = server.Settings(history=history_url, port=0, **settings)
    started = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        box["loop"] = loop
        stop = asyncio.Event()
        box["stop"] = stop

        def ready(url: str) -> None:
            box["url"] = url
            started.set()

        try:
            loop.run_until_complete(server.serve(chosen, guards, ready=ready, stop=stop))
        except BaseException as err:  # said to the test, not lost in the thread
            box["error"] = err
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(60)
    if "error" in box:
        raise box["error"]
    url = box["url"]
    running = Running(url, int(url.rsplit(":", 1)[1]), box["stop"], box["loop"])
    try:
        yield running
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)


def recorded_history(path: Path) -> str:
    """A SQLite history of three runs of one agent: green, then one test failing, then
    another test errored by the agent — and their JSON reports beside it."""
    url = f"sqlite:///{path / 'history.db'}"
    runs = [
        ({"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed"}, 0),
        ({"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "passed"}, 1),
        ({"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "errored"}, 1),
    ]
    with history.open_history(url) as opened:
        for n, (statuses, code) in enumerate(runs):
            data = report(statuses, run_id=f"run-{n}", at=n * 10)
            data["provenance"]["suite"]["git_branch"] = "main"
            data["provenance"]["ledger"] = f"file://{path}/ledger-{n}"
            saved = path / f"run-{n}.json"
            import json

            saved.write_text(json.dumps(data))
            opened.record(
                data,
                history.RunContext(exit_code=code, report_path=str(saved), ledger_verified=True),
            )
    return url


def check_answer(document: dict[str, Any], method: str, path: str, status: int, body: Any) -> None:
    """``body`` is what the OpenAPI ``document`` says ``method path`` answers with ``status``."""
    operation = document["paths"][path][method.lower()]
    schema = operation["responses"][str(status)]["content"]["application/json"]["schema"]
    wrapped = {**schema, "components": document["components"]}
    jsonschema.Draft202012Validator(wrapped).validate(body)
