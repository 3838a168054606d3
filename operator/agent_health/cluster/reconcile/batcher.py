"""Few, batched status patches: at most one per run per interval, and never a no-op.

A run of 1,000 cells would otherwise patch its status 1,000 times in a burst. Each run has
its own interval (:meth:`StatusBatcher.pace`): a large run changes faster and is written
less often (:func:`interval_for`), so its patches stay a small part of its API writes. The
reconciler
calls :meth:`StatusBatcher.update` on every change with a *snapshot* function (e.g.
``tally.wire``); the batcher calls it only when it is about to write, so a burst costs one
snapshot per interval. The first change of a quiet run is written at once (leading edge),
later ones wait for the interval (:meth:`~StatusBatcher.tick` or the :meth:`~StatusBatcher.run`
loop sends them), and :meth:`~StatusBatcher.flush` writes the final status when the run ends.

Each write is a minimal JSON merge patch (RFC 7386) against the status last written, so
unchanged fields are not sent and a patch with nothing in it is skipped. The patch answer's
``resourceVersion`` and ``generation`` are remembered: :meth:`~StatusBatcher.is_own_echo`
tells the watch event of our own write from a change someone else made.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("agent_health.operator")

Snapshot = Callable[[], Mapping[str, Any]]
Json = dict[str, Any]
ECHOES_KEPT = 16
CELLS_PER_SECOND = 10
"""Cells in parallel per second of :func:`interval_for`."""
MOST_INTERVAL = 10.0


def interval_for(parallelism: int, least: float = 1.0, most: float = MOST_INTERVAL) -> float:
    """The status interval of a run of ``parallelism``: ``least`` up to 10 cells at once,
    then one second more per 10 more, at most ``most`` — the worst-case staleness of its
    counts (a phase change is written at once).

    >>> [interval_for(p) for p in (1, 10, 50, 100, 1000)]
    [1.0, 1.0, 5.0, 10.0, 10.0]
    """
    return min(max(least, parallelism / CELLS_PER_SECOND), max(least, most))


@dataclass(frozen=True, order=True)
class RunRef:
    """An EvaluationRun by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> RunRef:
        """The run that an object body (a watch event's ``object``) is."""
        metadata = body.get("metadata") or {}
        return cls(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


PatchFn = Callable[[RunRef, Json], Awaitable[Mapping[str, Any]]]
"""Sends ``{"status": ...}`` as a merge patch to the run's ``/status`` and returns the answer
(the whole object, as the API server returns it)."""


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Json:
    """The smallest RFC 7386 merge patch that turns ``old`` into ``new``.

    Objects are diffed key by key (a removed key becomes ``null``); lists and scalars are
    replaced whole, as merge patches require.

    >>> merge_patch({"a": 1, "b": {"c": 1, "d": 2}}, {"a": 1, "b": {"c": 2}})
    {'b': {'c': 2, 'd': None}}
    """
    patch: Json = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if key in old and before == value:
            continue
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            inner = merge_patch(before, value)
            if inner:
                patch[key] = inner
        else:
            patch[key] = _copy(value)
    return patch


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass
class _Run:
    interval: float
    written: Json | None = None  # the status as last written (None: unknown, send it whole)
    pending: Snapshot | None = None
    last_sent: float | None = None
    echoes: deque[tuple[str, int | None]] = field(default_factory=lambda: deque(maxlen=ECHOES_KEPT))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class StatusBatcher:
    """Coalesces status updates per run; see the module docstring.

    ``clock`` is monotonic seconds (inject a fake one in tests); ``interval`` the least time
    between two patches of one run.
    """

    def __init__(
        self,
        patch: PatchFn,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._patch = patch
        self.interval = interval
        self._clock = clock
        self._runs: dict[RunRef, _Run] = {}
        self._wake = asyncio.Event()
        self.patches_sent = 0
        self.noops_skipped = 0

    def _run(self, ref: RunRef) -> _Run:
        found = self._runs.get(ref)
        if found is None:
            found = self._runs[ref] = _Run(self.interval)
        return found

    def pace(self, ref: RunRef, interval: float) -> None:
        """Write the run's status at most every ``interval`` seconds (never more often than
        the batcher's own interval)."""
        self._run(ref).interval = max(interval, self.interval)

    def seed(self, ref: RunRef, status: Mapping[str, Any]) -> None:
        """What the run's status is now (read from the object), so the first patch is minimal."""
        self._run(ref).written = _copy(status)

    async def update(self, ref: RunRef, snapshot: Snapshot) -> bool:
        """Note that the run's status changed; write now if its interval has passed.

        Returns whether a patch was sent now (else it is held for :meth:`tick`).
        """
        run = self._run(ref)
        run.pending = snapshot
        if self._due_in(run) <= 0:
            return await self._emit(ref, run)
        self._wake.set()
        return False

    async def tick(self) -> int:
        """Send every held update whose interval has passed; the number of patches sent."""
        sent = 0
        for ref, run in list(self._runs.items()):
            if run.pending is not None and self._due_in(run) <= 0:
                sent += await self._emit(ref, run)
        return sent

    def next_due(self) -> float | None:
        """Seconds until a held update may be sent (0: now), or ``None`` when none is held."""
        waits = [self._due_in(run) for run in self._runs.values() if run.pending is not None]
        return max(0.0, min(waits)) if waits else None

    async def flush(self, ref: RunRef, snapshot: Snapshot | None = None) -> bool:
        """Write the run's latest status now, interval or not (the run ended, or we stop)."""
        run = self._run(ref)
        if snapshot is not None:
            run.pending = snapshot
        if run.pending is None:
            return False
        return await self._emit(ref, run)

    def forget(self, ref: RunRef) -> None:
        """Drop what is kept about a deleted run."""
        self._runs.pop(ref, None)

    def is_own_echo(self, body: Mapping[str, Any]) -> bool:
        """Whether ``body`` (a watched object) is the answer to one of our own status writes."""
        run = self._runs.get(RunRef.of(body))
        if run is None:
            return False
        metadata = body.get("metadata") or {}
        seen = (str(metadata.get("resourceVersion") or ""), metadata.get("generation"))
        return seen in run.echoes

    async def run(self, stop: asyncio.Event) -> None:
        """Send held updates as they fall due until ``stop`` is set, then flush them all."""
        while not stop.is_set():
            self._wake.clear()
            wait = self.next_due()
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
            try:
                await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            for ref, run in list(self._runs.items()):
                if run.pending is not None and self._due_in(run) <= 0:
                    await self._sent_or_kept(ref, run)
        for ref, run in list(self._runs.items()):
            if run.pending is not None:
                await self._sent_or_kept(ref, run)

    async def _sent_or_kept(self, ref: RunRef, run: _Run) -> None:
        """One run's held status written by the loop, which serves every run: a write the API
        refuses (the run was deleted meanwhile, the server is away) is logged and kept for the
        next try (:meth:`_emit`), and stops neither the loop nor another run's writes."""
        try:
            await self._emit(ref, run)
        except Exception as err:
            log.warning(
                "status of EvaluationRun %s/%s not written (kept for the next try): %s",
                ref.namespace,
                ref.name,
                err,
            )

    def _due_in(self, run: _Run) -> float:
        if run.last_sent is None:
            return 0.0
        return run.last_sent + run.interval - self._clock()

    async def _emit(self, ref: RunRef, run: _Run) -> bool:
        async with run.lock:
            snapshot, run.pending = run.pending, None
            if snapshot is None:  # another emit took it while we waited for the lock
                return False
            status = _copy(snapshot())
            diff = merge_patch(run.written, status) if run.written is not None else status
            if not diff:
                self.noops_skipped += 1
                return False
            run.last_sent = self._clock()
            try:
                answer = await self._patch(ref, {"status": diff})
            except BaseException:
                if run.pending is None:  # keep it for the next tick
                    run.pending = snapshot
                raise
            run.written = status
            metadata = answer.get("metadata") or {}
            run.echoes.append(
                (str(metadata.get("resourceVersion") or ""), metadata.get("generation"))
            )
            self.patches_sent += 1
            return True
