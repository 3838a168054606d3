"""A ConfigMap ledger written by the operator: cells from their gateways' logs, many per write.

With a ConfigMap ledger a cell's gateway writes its sealed records to its own log
(:mod:`agent_health.ledger.podlog`), not to the API server. When the cell's pod has ended the
operator reads that log (:func:`read`: ``GET pods/NAME/log``, a read), takes the cell's
records out of it, and hands them to the run's :class:`Collector`, which stores every cell
handed to it within :data:`DELAY` seconds (or :data:`BATCH_BYTES` of records, or every cell
the run has going, whichever comes first) in one merge patch of the run's ConfigMap
(:meth:`~agent_health.ledger.configmap.ConfigMapBackend.store_cells`). So a run's ledger costs
one write per batch of cells instead of one per cell, and the gateways hold no credential.

A cell is graded from the records once they are stored, so the ConfigMap holds exactly
what was graded (``agent-health ledger verify`` and ``grade`` read it as before). A batch
the API server refuses as a whole (the ConfigMap would pass 1 MiB) is stored again cell by
cell, so only the cells that do not fit fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from agent_health import ledger
from agent_health.cluster import kube
from agent_health.cluster.cells import cellgateway
from agent_health.ledger import configmap, podlog

DELAY = 1.0
"""Seconds a collected cell may wait for others to share its write (a short time bound)."""
BATCH_BYTES = 512 * 1024
"""A batch holding this many bytes of records is written at once (well under the 1 MiB a
ConfigMap holds: chunks are gzipped, and each is only what the batch adds)."""
LOG_BYTES = 8 * 1024 * 1024
"""The most of a gateway's log read: a ledger fits a ConfigMap, so a log past this holds
far more diagnostics than records; one cut here lacks its end frame and is never graded."""


async def read(api: kube.Client, namespace: str, pod: str, ledger_cell: str) -> list[str]:
    """The ledger lines of ``ledger_cell`` in the log of ``pod``'s gateway container.

    :class:`~agent_health.ledger.errors.LedgerLogError` when the log holds no whole ledger
    of the cell; :class:`~agent_health.cluster.kube.ApiError` when it cannot be read.
    """
    text = await api.log(namespace, pod, cellgateway.NAME, limit=LOG_BYTES)
    return await asyncio.to_thread(podlog.extract, text, ledger_cell)


@dataclasses.dataclass
class _Batch:
    cells: dict[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    waiters: dict[str, asyncio.Future[None]] = dataclasses.field(default_factory=dict)
    size: int = 0
    timer: asyncio.TimerHandle | None = None


class Collector:
    """One run's collected cells, stored into its ConfigMap ledger in batches."""

    def __init__(
        self,
        backend: configmap.ConfigMapBackend,
        *,
        active: Callable[[], int] | None = None,
        delay: float = DELAY,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.backend = backend
        self.active = active
        """How many of the run's cells are going (its slots in use): once they are all in
        the batch, no other can join it before it is written, so it is written at once."""
        self.delay = delay
        self.batch_bytes = batch_bytes
        self.writes = 0
        """Batches sent to the API server (for tests and the benchmark's accounting)."""
        self._batch = _Batch()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def store(self, cell: str, lines: Sequence[str]) -> None:
        """Store ``cell``'s ``lines`` with the next batch; return once they are stored.

        Raises :class:`~agent_health.ledger.errors.LedgerError` when they cannot be (over
        the ConfigMap's size limit, the API refuses, another record already there).
        """
        batch = self._batch
        if cell in batch.waiters:  # handed in twice (a repeated watch event): one write
            return await asyncio.shield(batch.waiters[cell])
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        batch.cells[cell] = lines
        batch.waiters[cell] = waiter
        batch.size += sum(len(line) + 1 for line in lines)
        everyone = self.active is not None and len(batch.cells) >= self.active()
        if batch.size >= self.batch_bytes or everyone:
            self._send()
        elif batch.timer is None:
            batch.timer = asyncio.get_running_loop().call_later(self.delay, self._send)
        await asyncio.shield(waiter)

    async def close(self) -> None:
        """Store what is waiting, then stop."""
        if self._batch.cells:
            self._send()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _send(self) -> None:
        batch, self._batch = self._batch, _Batch()
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.ensure_future(self._write(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, batch: _Batch) -> None:
        async with self._lock:  # one write at a time: each reads what the last one stored
            try:
                await self._store(batch.cells)
            except ledger.LedgerError as err:
                if len(batch.cells) == 1:
                    return _settle(batch.waiters, err)
                for cell, lines in batch.cells.items():  # only the cells that do not fit fail
                    try:
                        await self._store({cell: lines})
                    except Exception as one:
                        _settle({cell: batch.waiters[cell]}, one)
                    else:
                        _settle({cell: batch.waiters[cell]}, None)
                return None
            except Exception as err:  # every waiter hears of it; none is left hanging
                return _settle(batch.waiters, err)
            _settle(batch.waiters, None)

    async def _store(self, cells: dict[str, Sequence[str]]) -> None:
        self.writes += 1
        await self.backend.store_cells(cells)


def _settle(waiters: dict[str, asyncio.Future[None]], error: BaseException | None) -> None:
    for waiter in waiters.values():
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
