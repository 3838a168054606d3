"""Live runs: the hub every live event passes through, and the Server-Sent Events a page
follows.

Events come from local runs (``run --serve URL`` posts :class:`~agent_health.engine.running.
Batch` es to ``POST /api/live/events``), from the runs this server started (the same feed),
and from the cluster's EvaluationRuns (:mod:`.watching`, cell by cell). Each event gets the
next id of the server's one sequence and is encoded once; :meth:`Hub.publish` never waits.

A page follows ``GET /api/events`` (optionally ``?run=UID``). Each SSE message carries its
``id``: a browser that reconnects sends ``Last-Event-ID`` and gets every event after it, so
it misses nothing; if that id is older than the events kept (:data:`KEPT`), it gets one
``reset`` event and reloads the run's state (``GET /api/live/{uid}``), which holds every
result so far. Writes are coalesced: a follower wakes at most every :data:`TICK` seconds
and writes what came meanwhile in one chunk, so a run finishing a thousand tests a second
costs each follower a few writes a second, not a thousand.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import itertools
import json
import time
from typing import Any, Literal

import pydantic
from aiohttp import web

from agent_health.engine import running
from agent_health.server import routes, state

KEPT = 200_000
"""Events kept for reconnecting followers (the oldest are dropped first)."""
TICK = 0.05
HEARTBEAT = 15.0
ENDED_KEPT = 3600.0
"""Seconds an ended live run stays on the hub (its results are in the history by then)."""
MAX_RUNS = 1000
table = routes.Table()


class Counts(pydantic.BaseModel):
    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0
    flaky: int = 0


class InFlight(pydantic.BaseModel):
    """A test running now."""

    id: str
    name: str
    repeat: int = 0
    agent: str | None = None
    since: datetime.datetime | None = pydantic.Field(
        default=None, description="when it started (a cluster cell: when its pod ran)"
    )


class LiveRun(pydantic.BaseModel):
    """A run as the hub knows it: counts, pass rate, what is in flight."""

    uid: str
    source: Literal["local", "worker", "cluster"] = "local"
    agent: str | None = None
    suite: str | None = None
    total: int = 0
    started_at: datetime.datetime | None = None
    ended: bool = False
    interrupted: bool = False
    stopped: str | None = None
    counts: Counts = pydantic.Field(default_factory=Counts)
    pass_rate: float | None = pydantic.Field(
        default=None, description="passed / (passed + failed + errored by the agent), so far"
    )
    in_flight: list[InFlight] = pydantic.Field(default_factory=list)
    phase: str | None = pydantic.Field(default=None, description="a cluster run's phase")
    namespace: str | None = pydantic.Field(default=None, description="a cluster run's namespace")
    name: str | None = pydantic.Field(default=None, description="a cluster run's name")


class LiveDetail(pydantic.BaseModel):
    """One live run with every result so far, and the id of the last event it includes."""

    last_event: int
    run: LiveRun
    results: list[running.LiveResult]


class LiveBoard(pydantic.BaseModel):
    last_event: int
    runs: list[LiveRun]


class Accepted(pydantic.BaseModel):
    accepted: int
    last_event: int


@dataclasses.dataclass
class _Run:
    view: LiveRun
    results: dict[tuple[str, int, str | None], running.LiveResult] = dataclasses.field(
        default_factory=dict
    )
    flight: dict[tuple[str, int, str | None], InFlight] = dataclasses.field(default_factory=dict)
    by_agent: int = 0
    ended_at: float | None = None

    def snapshot(self) -> LiveRun:
        if self.view.source == "cluster":  # its status's counts: every cell, not the 200 kept
            return self.view
        counts = Counts()
        agent_errors = 0
        for result in self.results.values():
            if hasattr(counts, result.status):
                setattr(counts, result.status, getattr(counts, result.status) + 1)
            if result.status == "errored" and result.cause == "agent":
                agent_errors += 1
        decided = counts.passed + counts.failed + agent_errors
        rate = round(counts.passed / decided, 6) if decided else None
        return self.view.model_copy(
            update={"counts": counts, "pass_rate": rate, "in_flight": list(self.flight.values())}
        )


class Hub:
    """Every live run and the events of each (see the module docstring)."""

    def __init__(self, kept: int = KEPT, clock: Any = time.monotonic) -> None:
        self.kept = kept
        self.clock = clock
        # Ids go on from the clock (in microseconds), never from 0: a browser that followed
        # a server before it restarted asks for events after an id this one has not reached.
        self.sequence = time.time_ns() // 1000
        self.events: collections.deque[tuple[int, str, bytes]] = collections.deque()
        self.runs: dict[str, _Run] = {}
        self._changed = asyncio.Event()
        self.followers = 0
        self.closed = False

    # -- in --------------------------------------------------------------------------------

    def publish(self, run: str, kind: str, data: dict[str, Any]) -> int:
        """Give an event the next id and keep it; wake the followers. Never waits."""
        self.sequence += 1
        payload = json.dumps({"run": run, "kind": kind, **data}, separators=(",", ":"))
        message = f"id: {self.sequence}\nevent: {kind}\ndata: {payload}\n\n".encode()
        self.events.append((self.sequence, run, message))
        while len(self.events) > self.kept:
            self.events.popleft()
        self._changed.set()
        return self.sequence

    def take(self, batch: running.LiveBatch, *, source: str | None = None) -> int:
        """A run's posted events: folded into its state and published."""
        self._forget_old()
        found = self.runs.get(batch.run)
        for event in batch.events:
            if found is None:
                found = self.runs[batch.run] = _Run(LiveRun(uid=batch.run))
            key: tuple[str, int, str | None]
            if isinstance(event, running.LiveBegun):
                chosen = event.source if source is None else source
                found.view = found.view.model_copy(
                    update={
                        "agent": event.agent,
                        "suite": event.suite,
                        "total": event.total,
                        "started_at": event.started_at,
                        "source": chosen,
                        "ended": False,
                    }
                )
                self.publish(batch.run, "run", {"state": found.snapshot().model_dump(mode="json")})
            elif isinstance(event, running.LiveStarted):
                key = (event.id, event.repeat, event.agent)
                found.flight[key] = InFlight(
                    id=event.id, name=event.name, repeat=event.repeat, agent=event.agent
                )
                self.publish(batch.run, "started", event.model_dump(mode="json", exclude={"kind"}))
            elif isinstance(event, running.LiveFinished):
                result = event.result
                key = (result.id, result.repeat, result.agent)
                found.flight.pop(key, None)
                found.results[key] = result
                self.publish(batch.run, "result", {"result": result.model_dump(mode="json")})
            else:
                found.flight.clear()
                found.view = found.view.model_copy(
                    update={
                        "ended": True,
                        "interrupted": event.interrupted,
                        "stopped": event.stopped,
                    }
                )
                found.ended_at = self.clock()
                self.publish(
                    batch.run, "ended", {"state": found.snapshot().model_dump(mode="json")}
                )
        return len(batch.events)

    def cluster_run(self, uid: str, view: LiveRun, results: list[running.LiveResult]) -> None:
        """A watched EvaluationRun's state: new or changed results published one by one."""
        found = self.runs.get(uid)
        if found is None:
            found = self.runs[uid] = _Run(view)
            self.publish(uid, "run", {"state": found.snapshot().model_dump(mode="json")})
        was_ended = found.view.ended
        found.view = view
        for result in results:
            key = (result.id, result.repeat, result.agent)
            if found.results.get(key) != result:
                found.results[key] = result
                self.publish(uid, "result", {"result": result.model_dump(mode="json")})
        kind = "ended" if view.ended and not was_ended else "run"
        if kind == "ended":
            found.ended_at = self.clock()
        self.publish(uid, kind, {"state": found.snapshot().model_dump(mode="json")})

    def _forget_old(self) -> None:
        now = self.clock()
        for uid in [
            u for u, r in self.runs.items() if r.ended_at and now - r.ended_at > ENDED_KEPT
        ]:
            del self.runs[uid]
        while len(self.runs) > MAX_RUNS:  # the oldest ended first, else the oldest
            ended = [u for u, r in self.runs.items() if r.ended_at is not None]
            del self.runs[(ended or list(self.runs))[0]]

    # -- out -------------------------------------------------------------------------------

    def board(self) -> LiveBoard:
        return LiveBoard(
            last_event=self.sequence, runs=[r.snapshot() for r in self.runs.values()][::-1]
        )

    def detail(self, uid: str) -> LiveDetail | None:
        found = self.runs.get(uid)
        if found is None:
            return None
        return LiveDetail(
            last_event=self.sequence,
            run=found.snapshot(),
            results=list(found.results.values()),
        )

    def after(self, last: int, run: str | None) -> tuple[list[bytes], bool]:
        """The messages after id ``last`` (of ``run`` only, when given), and whether some
        were dropped since (the follower must reload)."""
        if last > self.sequence:  # an id of a server before this one: reload
            return [], True
        if not self.events:
            return [], last < self.sequence
        oldest = self.events[0][0]
        if last + 1 < oldest:
            return [], True
        # ids are consecutive: the first wanted one is found by arithmetic, not a scan
        wanted = itertools.islice(self.events, max(0, last + 1 - oldest), None)
        return [m for _, r, m in wanted if run is None or r == run], False

    async def follow(self, request: web.Request, run: str | None, last: int) -> web.StreamResponse:
        """Stream the events after ``last`` as Server-Sent Events until the follower goes."""
        answer = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # a proxy in front must not buffer the stream
            }
        )
        await answer.prepare(request)
        self.followers += 1
        try:
            await answer.write(b"retry: 2000\n\n")
            beat = self.clock()
            while not self.closed:
                seen = self.sequence
                messages, lost = self.after(last, run)
                last = seen
                if lost:
                    said = json.dumps({"run": run, "kind": "reset"})
                    await answer.write(f"id: {seen}\nevent: reset\ndata: {said}\n\n".encode())
                elif messages:
                    await answer.write(b"".join(messages))
                    beat = self.clock()
                elif self.clock() - beat >= HEARTBEAT:
                    await answer.write(b": still here\n\n")
                    beat = self.clock()
                if self.sequence == last:
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), HEARTBEAT)
                await asyncio.sleep(TICK)  # what comes meanwhile goes in the same write
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.followers -= 1
        return answer

    async def close(self) -> None:
        self.closed = True
        self._changed.set()


# -- routes -----------------------------------------------------------------------------------


class FollowQuery(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    run: str | None = pydantic.Field(default=None, description="one run's events only")
    after: int = pydantic.Field(
        default=0, ge=0, description="the last event id already seen (Last-Event-ID wins)"
    )


def _hub(served: state.State) -> Hub:
    hub = served.hub
    assert isinstance(hub, Hub)
    return hub


@table.route(
    "POST",
    "/api/live/events",
    summary="a run's live events (run --serve URL)",
    role="operate",
    tag="live",
    body=running.LiveBatch,
    answer=Accepted,
)
async def post_events(
    served: state.State, request: web.Request, _q: None, batch: running.LiveBatch
) -> Accepted:
    hub = _hub(served)
    return Accepted(accepted=hub.take(batch), last_event=hub.sequence)


@table.route("GET", "/api/live", summary="the live runs", tag="live", answer=LiveBoard)
async def live_runs(served: state.State, request: web.Request, _q: None, _b: None) -> LiveBoard:
    return _hub(served).board()


@table.route(
    "GET",
    "/api/live/{uid}",
    summary="one live run with every result so far",
    tag="live",
    answer=LiveDetail,
)
async def live_run(served: state.State, request: web.Request, _q: None, _b: None) -> LiveDetail:
    found = _hub(served).detail(request.match_info["uid"])
    if found is None:
        raise web.HTTPNotFound(
            text=routes.problem(f"no live run {request.match_info['uid']!r} on this server"),
            content_type="application/json",
        )
    return found


@table.route(
    "GET",
    "/api/events",
    summary="live events as Server-Sent Events (event ids; Last-Event-ID resumes)",
    tag="live",
    query=FollowQuery,
    media="text/event-stream",
)
async def events(
    served: state.State, request: web.Request, q: FollowQuery, _b: None
) -> web.StreamResponse:
    last = q.after
    given = request.headers.get("Last-Event-ID", "").strip()
    if given.isdigit():
        last = int(given)
    return await _hub(served).follow(request, q.run, last)
