"""A run's live feed: each test as it starts and ends, streamed to ``agent-health serve``
(``run --serve URL`` or ``AGENT_HEALTH_SERVE``, :mod:`.feedtarget`), and the wire models the
server reads.

The feed never slows or fails the run. Events are queued by the session's listener calls
(no I/O there) and posted in batches by one background task; a server that is gone, slow
or refusing is one warning line on stderr, after which the run goes on without its feed.
At the run's end the task gets :data:`END_GRACE` seconds to post what is queued.

The events of one run (:class:`Batch` posted to ``POST /api/live/events``):

* :class:`Begun` — the run's id (the one its history row and report carry), its agent,
  its suite and how many (test, repeat) it plans;
* :class:`Started` — a test began (what a page shows in flight);
* :class:`Finished` — a test's result, in brief (:class:`LiveResult`);
* :class:`Ended` — the run ended (interrupted or not, and why it stopped early).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import sys
from collections.abc import Callable
from typing import Annotated, Literal

import pydantic

from agent_health.engine.running import feedtarget
from agent_health.sdk.results import TestResult

PATH = "/api/live/events"
BATCH = 500
END_GRACE = 3.0
TIMEOUT = 5.0
MAX_ERROR = 1024


class LiveResult(pydantic.BaseModel):
    """One (test, repeat) as it ended, in brief."""

    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    id: str
    name: str
    file: str = ""
    line: int = 0
    repeat: int = 0
    agent: str | None = None
    status: str
    cause: str | None = None
    score: float | None = None
    duration_ms: float = 0.0
    error: str | None = None
    tokens: int | None = None
    cost_usd: float | None = None

    @classmethod
    def of(cls, result: TestResult) -> LiveResult:
        metrics = result.metrics or {}
        tokens = metrics.get("total_tokens")
        cost = metrics.get("cost_usd")
        return cls(
            id=result.id,
            name=result.title or result.name,
            file=result.file,
            line=result.line,
            repeat=result.repeat,
            agent=result.agent,
            status=result.status,
            cause=result.cause,
            score=result.score,
            duration_ms=result.duration_ms,
            error=(result.error or "")[:MAX_ERROR] or None,
            tokens=tokens if isinstance(tokens, int) else None,
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )


class Begun(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    kind: Literal["begun"] = "begun"
    agent: str | None = None
    suite: str | None = None
    total: int = pydantic.Field(ge=0, description="(test, repeat) planned")
    started_at: datetime.datetime
    source: Literal["local", "worker", "cluster"] = "local"


class Started(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    kind: Literal["started"] = "started"
    id: str
    name: str
    repeat: int = 0
    agent: str | None = None


class Finished(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    kind: Literal["finished"] = "finished"
    result: LiveResult


class Ended(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    kind: Literal["ended"] = "ended"
    interrupted: bool = False
    stopped: str | None = None


Event = Annotated[Begun | Started | Finished | Ended, pydantic.Field(discriminator="kind")]


class Batch(pydantic.BaseModel):
    """What a run posts: some of its events, in order."""

    model_config = pydantic.ConfigDict(defer_build=True)  # built for a run that streams

    run: str = pydantic.Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._:-]+$")
    events: list[Event] = pydantic.Field(max_length=10_000)


class Feed:
    """A session listener that streams the run to a server (see the module docstring).

    ``warn`` writes the one warning line (default: stderr)."""

    def __init__(
        self,
        url: str,
        run: str,
        *,
        token: str | None = None,
        warn: Callable[[str], None] | None = None,
        transport: object = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.run = run
        self.token = token if token is not None else os.environ.get(feedtarget.TOKEN_ENV) or None
        self.warn = warn or _stderr
        self.queue: list[Begun | Started | Finished | Ended] = []
        self.gone: str | None = None
        self.sent = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._transport = transport

    # -- the session's listener (no I/O: the run never waits for the server) ---------------

    def begin(self, total: int, *, agent: str | None, suite: str | None, source: str) -> None:
        when = datetime.datetime.now(datetime.UTC)
        chosen: Literal["local", "worker", "cluster"] = "worker" if source == "worker" else "local"
        self._put(Begun(agent=agent, suite=suite, total=total, started_at=when, source=chosen))

    def on_test_start(self, test_id: str, title: str, repeat: int, agent: str | None) -> None:
        self._put(Started(id=test_id, name=title, repeat=repeat, agent=agent))

    def on_test_end(self, result: TestResult) -> None:
        self._put(Finished(result=LiveResult.of(result)))

    def end(self, *, interrupted: bool, stopped: str | None) -> None:
        self._put(Ended(interrupted=interrupted, stopped=stopped))

    def _put(self, event: Begun | Started | Finished | Ended) -> None:
        if self.gone is None:
            self.queue.append(event)
            self._wake.set()

    # -- the background task ---------------------------------------------------------------

    async def __aenter__(self) -> Feed:
        self._task = asyncio.create_task(self._post_all())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), END_GRACE)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
                self._lost(f"{len(self.queue)} events not sent within {END_GRACE:.0f} s")

    async def _post_all(self) -> None:
        import httpx

        headers = {"X-Agent-Health": "1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        kwargs: dict[str, object] = {"timeout": TIMEOUT, "headers": headers}
        if self._transport is not None:
            kwargs["transport"] = self._transport
        async with httpx.AsyncClient(**kwargs) as client:  # type: ignore[arg-type]
            while self.gone is None:
                if not self.queue:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                part, self.queue = self.queue[:BATCH], self.queue[BATCH:]
                body = Batch(run=self.run, events=part).model_dump_json()
                try:
                    answer = await client.post(
                        self.url + PATH,
                        content=body,
                        headers={"Content-Type": "application/json"},
                    )
                except httpx.HTTPError as err:
                    self._lost(f"{type(err).__name__}: {err}".rstrip(": "))
                    return
                if answer.status_code >= 300:
                    said = answer.text[:200].replace("\n", " ")
                    self._lost(f"it answered {answer.status_code} {said}".strip())
                    return
                self.sent += len(part)

    def _lost(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
            self.queue.clear()
            self.warn(
                f"warning: the live feed to {self.url} stopped ({why}); the run goes on, "
                "its results are in its reports and the history"
            )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Tee:
    """Several listeners as one (the terminal's progress and a feed)."""

    def __init__(self, *listeners: object) -> None:
        self.listeners = [x for x in listeners if x is not None]
        self._starting = [x.on_test_start for x in self.listeners if hasattr(x, "on_test_start")]

    def on_test_start(self, test_id: str, title: str, repeat: int, agent: str | None) -> None:
        for call in self._starting:
            call(test_id, title, repeat, agent)

    def on_test_end(self, result: TestResult) -> None:
        for listener in self.listeners:
            listener.on_test_end(result)  # type: ignore[attr-defined]
