"""Starting and steering runs: local runs in worker processes this server supervises, and
(with ``--cluster``) EvaluationRuns created, suspended, resumed, requeued, retuned and
cancelled through the Kubernetes API — each also plain ``kubectl`` (docs/operator.md).

A local run is the same engine as ``agent-health run``, in a process of its own: ``python -m
agent_health.cli run PATHS --serve URL``, told its run id (so the page that started it
follows it at once) and, when this server needs tokens, a token of its own that may post
its events and is forgotten when it ends. Its output goes to a log file beside its report
(``ROOT/.agent-health/serve/RUN.log``, ``RUN.json``). Cancelling it is its Ctrl-C (SIGINT:
no new test starts, the reports and the history are written); one still running
:data:`GRACE` seconds later is terminated, then killed. A worker that ends without saying
so on its feed (it crashed, it was killed) is ended on the hub with its exit code, so no
page waits for it forever. Paths must lie under the server's ``--root``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any, Literal

import pydantic
from aiohttp import web

from agent_health.engine import reports, running
from agent_health.server import errors, routes, state

GRACE = 10.0
MAX_WORKERS = 4
WORKER_ENV = "AGENT_HEALTH_SERVE_WORKER"
"""The run id a worker is told (``agent-health run`` takes it as its own)."""
table = routes.Table()


class StartLocal(pydantic.BaseModel):
    """A local run to start: the suite's paths (under the server's root) and its options."""

    model_config = pydantic.ConfigDict(extra="forbid")

    paths: list[str] = pydantic.Field(min_length=1, max_length=64)
    agent: str | None = pydantic.Field(default=None, max_length=2048)
    repeat: int = pydantic.Field(default=1, ge=1, le=100)
    concurrency: int = pydantic.Field(default=4, ge=1, le=64)
    grep: str | None = pydantic.Field(default=None, max_length=1024)
    labels: list[str] = pydantic.Field(default_factory=list, max_length=32)
    no_judge: bool = False


class Worker(pydantic.BaseModel):
    """A local run this server started."""

    run: str
    paths: list[str]
    agent: str | None
    pid: int | None
    state: Literal["running", "cancelling", "ended"]
    exit_code: int | None = None
    started_at: datetime.datetime
    report: str
    log: str


@dataclasses.dataclass
class _Worker:
    view: Worker
    process: asyncio.subprocess.Process
    token: str | None
    watcher: asyncio.Task[None] | None = None
    stopping: asyncio.Task[None] | None = None


class Workers:
    """The local runs of one server (see the module docstring)."""

    def __init__(self, served: state.State) -> None:
        self.served = served
        self.workers: dict[str, _Worker] = {}

    def inside(self, given: str) -> Path:
        root = self.served.settings.root
        path = (root / given).resolve()
        if path != root and root not in path.parents:
            raise errors.Invalid(
                f"paths: {given} is outside the server's root {root}; start runs of suites "
                "under it (agent-health serve --root DIR)"
            )
        if not path.exists():
            raise errors.Invalid(f"paths: {given} does not exist under {root}")
        return path

    async def start(self, asked: StartLocal) -> Worker:
        busy = [w for w in self.workers.values() if w.view.state != "ended"]
        if len(busy) >= MAX_WORKERS:
            raise errors.SteeringError(
                f"{len(busy)} local runs are running already (at most {MAX_WORKERS}): wait "
                "for one to end or cancel one"
            )
        paths = [self.inside(p) for p in asked.paths]
        uid = reports.new_run_id()
        folder = self.served.settings.root / ".agent-health" / "serve"
        folder.mkdir(parents=True, exist_ok=True)
        report, log = folder / f"{uid}.json", folder / f"{uid}.log"
        argv = [sys.executable, "-m", "agent_health.cli", "run", *map(str, paths)]
        argv += ["--serve", self.served.url, "--reporter", f"json:{report}"]
        argv += ["--repeat", str(asked.repeat), "-j", str(asked.concurrency)]
        if asked.agent:
            argv += ["--agent", asked.agent]
        if asked.grep:
            argv += ["--grep", asked.grep]
        for label in asked.labels:
            argv += ["--label", label]
        if asked.no_judge:
            argv.append("--no-judge")
        env = {k: v for k, v in os.environ.items() if k != running.SERVE_TOKEN_ENV}
        env[WORKER_ENV] = uid
        env.pop(running.SERVE_ENV, None)
        token = None
        if not self.served.access.open_locally:
            token = secrets.token_urlsafe(32)
            self.served.access.add_token(token, "operate")
            env[running.SERVE_TOKEN_ENV] = token
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(self.served.settings.root),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the server is not the run's
            )
        view = Worker(
            run=uid,
            paths=[str(p) for p in paths],
            agent=asked.agent,
            pid=process.pid,
            state="running",
            started_at=datetime.datetime.now(datetime.UTC),
            report=str(report),
            log=str(log),
        )
        if self.served.hub is not None:  # live at once: the page that started it follows it
            begun = running.LiveBegun(
                agent=asked.agent, total=0, started_at=view.started_at, source="worker"
            )
            self.served.hub.take(running.LiveBatch(run=uid, events=[begun]), source="worker")
        found = self.workers[uid] = _Worker(view, process, token)
        found.watcher = asyncio.create_task(self._watch(found))
        return view

    async def _watch(self, worker: _Worker) -> None:
        code = await worker.process.wait()
        worker.view = worker.view.model_copy(update={"state": "ended", "exit_code": code})
        if worker.token is not None:
            self.served.access.forget_token(worker.token)
        hub = self.served.hub
        if hub is not None:
            live = hub.runs.get(worker.view.run)
            if live is None or not live.view.ended:
                why = f"the worker exited with code {code} before its run said it ended"
                batch = running.LiveBatch(
                    run=worker.view.run,
                    events=[running.LiveEnded(interrupted=True, stopped=why)],
                )
                hub.take(batch, source="worker")

    async def cancel(self, uid: str) -> Worker:
        worker = self.workers.get(uid)
        if worker is None:
            raise errors.NotFound(f"no local run {uid!r} started by this server")
        if worker.view.state == "ended":
            raise errors.SteeringError(f"run {uid} has ended already")
        worker.view = worker.view.model_copy(update={"state": "cancelling"})
        worker.stopping = asyncio.create_task(self._stop(worker))
        return worker.view

    async def _stop(self, worker: _Worker) -> None:
        """SIGINT (the run's own Ctrl-C), then SIGTERM, then SIGKILL, :data:`GRACE` apart."""
        for sent in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if worker.process.returncode is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(sent)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.process.wait()), GRACE)

    def list(self) -> list[Worker]:
        return [w.view for w in self.workers.values()][::-1]

    async def close(self) -> None:
        """The server stops: every worker is stopped as by cancel, and awaited."""
        live = [w for w in self.workers.values() if w.process.returncode is None]
        await asyncio.gather(*(self._stop(w) for w in live), return_exceptions=True)
        for worker in self.workers.values():
            if worker.watcher is not None:
                worker.watcher.cancel()


def _workers(served: state.State) -> Workers:
    if served.workers is None:
        raise errors.NotFound("this server starts no local runs")
    found: Workers = served.workers
    return found


@table.route(
    "POST",
    "/api/workers",
    summary="start a local run (a worker process)",
    role="operate",
    tag="steer",
    body=StartLocal,
    answer=Worker,
    status=201,
)
async def start_local(
    served: state.State, request: web.Request, _q: None, asked: StartLocal
) -> Worker:
    return await _workers(served).start(asked)


@table.route(
    "GET",
    "/api/workers",
    summary="the local runs this server started",
    tag="steer",
    answer=list[Worker],
)
async def list_workers(served: state.State, request: web.Request, _q: None, _b: None) -> Any:
    return _workers(served).list()


class Nothing(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


@table.route(
    "POST",
    "/api/workers/{uid}/cancel",
    summary="cancel a local run (its Ctrl-C)",
    role="operate",
    tag="steer",
    body=Nothing,
    answer=Worker,
)
async def cancel_local(served: state.State, request: web.Request, _q: None, _b: Nothing) -> Worker:
    return await _workers(served).cancel(request.match_info["uid"])


# -- the cluster's runs ---------------------------------------------------------------------


class StartCluster(pydantic.BaseModel):
    """An EvaluationRun of a RunSpec to create (its spec as ``kubectl apply`` takes it)."""

    model_config = pydantic.ConfigDict(extra="forbid", populate_by_name=True)

    namespace: str = pydantic.Field(min_length=1, max_length=63, pattern=r"^[a-z0-9-]+$")
    run_spec: str = pydantic.Field(alias="runSpec", min_length=1, max_length=253)
    repeats: int = pydantic.Field(default=1, ge=1, le=100)
    parallelism: int = pydantic.Field(default=1, ge=1, le=1000)
    labels: list[str] = pydantic.Field(default_factory=list, max_length=32)
    grep: str | None = pydantic.Field(default=None, max_length=1024)
    suspend: bool = False
    budget: dict[str, Any] | None = None


class SteerCluster(pydantic.BaseModel):
    """What steers a running EvaluationRun (the fields ``kubectl patch`` may change)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    suspend: bool | None = None
    parallelism: int | None = pydantic.Field(default=None, ge=1, le=1000)
    budget: dict[str, Any] | None = None


class ClusterRun(pydantic.BaseModel):
    namespace: str
    name: str
    uid: str
    spec: dict[str, Any]


def _cluster(served: state.State) -> Any:
    if served.cluster is None:
        raise errors.NotFound("this server does not watch a cluster (agent-health serve --cluster)")
    return served.cluster


def _answer(body: dict[str, Any]) -> ClusterRun:
    metadata = body.get("metadata") or {}
    return ClusterRun(
        namespace=str(metadata.get("namespace")),
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid")),
        spec=dict(body.get("spec") or {}),
    )


@table.route(
    "POST",
    "/api/cluster/runs",
    summary="create an EvaluationRun of a RunSpec",
    role="operate",
    tag="steer",
    body=StartCluster,
    answer=ClusterRun,
    status=201,
)
async def start_cluster(
    served: state.State, request: web.Request, _q: None, asked: StartCluster
) -> ClusterRun:
    spec: dict[str, Any] = {
        "runSpecRef": {"name": asked.run_spec},
        "repeats": asked.repeats,
        "parallelism": asked.parallelism,
        "selection": {"labels": asked.labels, **({"grep": asked.grep} if asked.grep else {})},
        "suspend": asked.suspend,
    }
    if asked.budget is not None:
        spec["budget"] = asked.budget
    return _answer(await _cluster(served).create(asked.namespace, spec))


@table.route(
    "PATCH",
    "/api/cluster/runs/{namespace}/{name}",
    summary="steer an EvaluationRun: suspend or resume, parallelism, budget",
    role="operate",
    tag="steer",
    body=SteerCluster,
    answer=ClusterRun,
)
async def steer_cluster(
    served: state.State, request: web.Request, _q: None, asked: SteerCluster
) -> ClusterRun:
    change = asked.model_dump(exclude_none=True)
    if not change:
        raise errors.Invalid("nothing to change: give suspend, parallelism or budget")
    where = request.match_info
    return _answer(await _cluster(served).patch(where["namespace"], where["name"], change))


@table.route(
    "POST",
    "/api/cluster/runs/{namespace}/{name}/requeue",
    summary="run the errored cells of an EvaluationRun again (spec.requeueErrored + 1)",
    role="operate",
    tag="steer",
    body=Nothing,
    answer=ClusterRun,
)
async def requeue_cluster(
    served: state.State, request: web.Request, _q: None, _b: Nothing
) -> ClusterRun:
    where = request.match_info
    return _answer(await _cluster(served).requeue(where["namespace"], where["name"]))


@table.route(
    "DELETE",
    "/api/cluster/runs/{namespace}/{name}",
    summary="cancel an EvaluationRun (delete it; its cells go with it)",
    role="operate",
    tag="steer",
    body=Nothing,
    answer=Nothing,
)
async def cancel_cluster(
    served: state.State, request: web.Request, _q: None, _b: Nothing
) -> Nothing:
    where = request.match_info
    await _cluster(served).delete(where["namespace"], where["name"])
    return Nothing()
