"""What a running server holds: its settings, the opened history and the threads that read
it, its guards, and the live parts (the hub of live runs, the local workers it supervises,
its view of the cluster). Handlers receive it; nothing of it is module-level.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agent_health.server import access

if TYPE_CHECKING:
    from agent_health import history

T = TypeVar("T")
READERS = 8
"""Threads that run the history's (blocking) queries."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """How ``agent-health serve`` was started."""

    history: history.Location | str
    """The history (a URL, or where the CLI found it)."""
    host: str = "127.0.0.1"
    port: int = 8340
    root: Path = dataclasses.field(default_factory=Path.cwd)
    """Where local runs started from the page find their suites (paths must lie inside)."""
    cluster: bool = False
    """Watch (and, for the operate role, create and steer) EvaluationRuns."""
    namespace: str | None = None
    """The namespace to watch (``None``: every namespace the identity may list)."""
    connection: Any = None
    """A ``kopf.ConnectionInfo`` to talk to the cluster as (``None``: the kubeconfig, or the
    pod's service account — as kubectl and the operator find them)."""


@dataclasses.dataclass
class State:
    settings: Settings
    history: history.History
    access: access.Access
    pool: concurrent.futures.ThreadPoolExecutor = dataclasses.field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(
            READERS, thread_name_prefix="agent-health-history"
        )
    )
    hub: Any = None
    """The live runs and their subscribers (:class:`.live.Hub`; typed there, which imports
    this module: no circle)."""
    workers: Any = None
    """The local runs this server started and supervises (:mod:`.steering`), if it does."""
    cluster: Any = None
    """Its watch of the cluster's EvaluationRuns (:mod:`.watching`), with ``--cluster``."""
    url: str = ""
    """Where the server answers (its own workers stream there)."""
    verifying: asyncio.Semaphore = dataclasses.field(default_factory=lambda: asyncio.Semaphore(1))
    """Held while a ledger is verified: one at a time (each is seconds of CPU for a big run)."""

    async def read(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call(*args, **kwargs)`` (a history query: it blocks) in a reader thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: call(*args, **kwargs))
