"""The judge cache: verdicts by content address, in SQLite, shared by runs and processes.

The key is the sha256 of everything that decides a verdict: evaluator id, model, criteria,
context selection, the canonical evidence (trajectory without timings, output), tools,
options, the repeat index (so repeats stay independent) and the prompt version. The file
lives at ``AGENT_HEALTH_JUDGE_CACHE``, else ``judge.cache_path``, else
``$XDG_CACHE_HOME/agent-health/judge.sqlite`` (``~/.cache/...``).

Concurrent writers (tests of one run, several runs, the operator) are safe: WAL journal, a
busy timeout, and ``INSERT OR REPLACE`` of immutable values. Every SQLite call runs off the
event loop (``asyncio.to_thread``). A corrupt file is reported (:class:`JudgeCacheWarning`),
moved aside and rebuilt; if even that fails, judging goes on uncached. Errored verdicts are
never stored (the caller's rule, see ``backend``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_health.judging import errors

SCHEMA_VERSION = 1
ENV = "AGENT_HEALTH_JUDGE_CACHE"
FILE_NAME = "judge.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS verdicts ("
    " key TEXT PRIMARY KEY, verdict TEXT NOT NULL, created_at REAL NOT NULL)",
)


def key(parts: Mapping[str, Any]) -> str:
    """The content address of a judge call: sha256 of its canonical JSON."""
    canonical = json.dumps(
        parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def default_path(configured: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Where the cache lives (env, then config, then the user's cache directory).

    A directory (one that exists, or a path ending in ``/``) holds the cache as
    ``judge.sqlite``: a volume mounted for the cache is a directory.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(ENV) or configured
    if chosen:
        path = Path(chosen).expanduser()
        return path / FILE_NAME if chosen.endswith("/") or path.is_dir() else path
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-health" / FILE_NAME


class Cache:
    """One SQLite connection, used from worker threads under a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: Path) -> Cache:
        """Open (creating, or rebuilding a corrupt file); never raises for a bad file."""
        cache = cls(path)
        await asyncio.to_thread(cache._open)
        return cache

    @property
    def usable(self) -> bool:
        return self._db is not None

    async def get(self, address: str) -> dict[str, Any] | None:
        """The stored verdict fields for ``address``, or ``None``."""
        return await asyncio.to_thread(self._get, address)

    async def put(self, address: str, verdict: Mapping[str, Any]) -> None:
        """Store a verdict (last writer wins; equal keys hold equal answers)."""
        await asyncio.to_thread(self._put, address, json.dumps(dict(verdict)))

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _open(self) -> None:
        with self._lock:
            try:
                self._db = self._connect()
            except sqlite3.OperationalError as err:  # locked, read-only, no such directory
                self._disable(err)
            except sqlite3.DatabaseError as err:  # not a database, malformed image
                self._rebuild(err)
            except OSError as err:
                self._disable(err)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if row is None:
                db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
            elif row[0] != str(SCHEMA_VERSION):
                db.execute("DELETE FROM verdicts")
                db.execute(
                    "UPDATE meta SET value = ? WHERE name = 'schema'", (str(SCHEMA_VERSION),)
                )
        except BaseException:
            db.close()
            raise
        return db

    def _rebuild(self, err: Exception) -> None:
        """Move the corrupt file aside and start a fresh one (caller holds the lock)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            self._db = self._connect()
        except (OSError, sqlite3.Error) as again:
            self._disable(again)
            return
        warnings.warn(
            f"judge cache {self.path} was corrupt ({err}); moved it to {aside.name} and "
            "started a new one",
            errors.JudgeCacheWarning,
            stacklevel=2,
        )

    def _disable(self, err: Exception) -> None:
        self._db = None
        warnings.warn(
            f"judge cache {self.path} cannot be used ({err}); judging goes on without a "
            f"cache (set {ENV} or judge.cache_path to a writable file)",
            errors.JudgeCacheWarning,
            stacklevel=2,
        )

    def _get(self, address: str) -> dict[str, Any] | None:
        with self._lock:
            if self._db is None:
                return None
            try:
                row = self._db.execute(
                    "SELECT verdict FROM verdicts WHERE key = ?", (address,)
                ).fetchone()
            except sqlite3.OperationalError:
                return None  # locked past the busy timeout: a miss, not a failure
            except sqlite3.DatabaseError as err:
                self._rebuild(err)
                return None
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _put(self, address: str, verdict: str) -> None:
        with self._lock:
            if self._db is None:
                return
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO verdicts (key, verdict, created_at) VALUES (?, ?, ?)",
                    (address, verdict, time.time()),
                )
            except sqlite3.OperationalError:
                return  # locked past the busy timeout: the verdict is simply not kept
            except sqlite3.DatabaseError as err:
                self._rebuild(err)

    def _close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
