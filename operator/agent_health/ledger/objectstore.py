"""The object store backend: ``s3://BUCKET/PREFIX`` (AWS, MinIO) and ``gs://BUCKET/PREFIX``.

Objects cannot be appended to, so each append writes one new part object
``PREFIX/CELL/00000000.jsonl``, ``00000001.jsonl``, ...; reading a cell concatenates its
parts in order. Only one writer (the cell's gateway) appends to a cell.

Storage goes through fsspec (``pip install 'agent-health[s3]'`` for s3fs); async file systems
are used natively, sync ones in a worker thread, so the event loop never blocks. Options go
in :attr:`~agent_health.ledger.store.Options.storage_options`, or in the URL query for the
endpoint: ``s3://ledgers/run-1?endpoint_url=http://minio:9000``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from agent_health.ledger import errors, store

_PART = re.compile(r"^(\d{8})\.jsonl$")
_EXTRAS = {"s3": "s3", "gs": "gcs", "gcs": "gcs"}
_MODULES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs"}  # what each extra installs
_URL_OPTIONS = frozenset({"endpoint_url", "region_name", "anon"})


class ObjectStoreBackend:
    """Ledger lines as part objects under ``BUCKET/PREFIX/CELL/``."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        parts = urlsplit(url)
        if not parts.netloc:
            raise errors.BackendConfigError(
                f"ledger URL {url!r} names no bucket: use {parts.scheme}://BUCKET/PREFIX"
            )
        self.protocol = parts.scheme.lower()
        self.url = url
        self.root = f"{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
        query = dict(parse_qsl(parts.query))
        unknown = set(query) - _URL_OPTIONS
        if unknown:
            raise errors.BackendConfigError(
                f"ledger URL {url!r}: unknown option(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_URL_OPTIONS))}"
            )
        self._options: dict[str, Any] = {"use_listings_cache": False, **(storage_options or {})}
        if "endpoint_url" in query:
            self._options["endpoint_url"] = query["endpoint_url"]
        if "region_name" in query:
            self._options.setdefault("client_kwargs", {})["region_name"] = query["region_name"]
        if "anon" in query:
            self._options["anon"] = query["anon"].lower() in ("1", "true", "yes")
        self._fs: Any = None
        self._session: Any = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._next_part: dict[str, int] = {}

    @classmethod
    def from_url(cls, url: str, options: store.Options) -> ObjectStoreBackend:
        return cls(url, dict(options.storage_options))

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        store.check_cell(cell)
        if not lines:
            return
        data = store.text_of(lines).encode("utf-8")
        async with self._locks.setdefault(cell, asyncio.Lock()):
            if cell not in self._next_part:
                existing = await self._parts(cell)
                self._next_part[cell] = _index(existing[-1]) + 1 if existing else 0
            index = self._next_part[cell]
            await self._call("pipe_file", f"{self.root}/{cell}/{index:08d}.jsonl", data)
            self._next_part[cell] = index + 1

    async def read(self, cell: str) -> list[str]:
        store.check_cell(cell)
        paths = await self._parts(cell)
        blobs = await asyncio.gather(*(self._call("cat_file", p) for p in paths))
        text = b"".join(blobs).decode("utf-8")
        return text.split("\n")[:-1] if text else []

    async def cells(self) -> list[str]:
        found = await self._call("find", self.root)
        names = set()
        for path in found:
            relative = str(path).removeprefix(self.root + "/").split("/")
            if len(relative) == 2 and _PART.match(relative[1]):
                names.add(relative[0])
        return sorted(names)

    async def flush(self) -> None:
        """Nothing is buffered: each append is stored as its own object before it returns."""

    async def close(self) -> None:
        session, self._session, self._fs = self._session, None, None
        if session is not None and hasattr(session, "close"):
            closing = session.close()
            if inspect.isawaitable(closing):
                await closing

    async def _parts(self, cell: str) -> list[str]:
        found = await self._call("find", f"{self.root}/{cell}")
        return sorted(str(p) for p in found if _PART.match(str(p).rsplit("/", 1)[-1]))

    async def _call(self, name: str, *args: Any) -> Any:
        fs = await self._filesystem()
        try:
            if getattr(fs, "async_impl", False):
                return await getattr(fs, f"_{name}")(*args)
            return await asyncio.to_thread(getattr(fs, name), *args)
        except FileNotFoundError as err:
            raise errors.BackendError(
                f"ledger {self.url}: {args[0] if args else self.root} not found — "
                "does the bucket exist?"
            ) from err
        except (OSError, ValueError, RuntimeError) as err:
            raise errors.BackendError(f"ledger {self.url}: {name} failed: {err}") from err

    async def _filesystem(self) -> Any:
        if self._fs is None:
            self._fs = await asyncio.to_thread(self._make_filesystem)
            if getattr(self._fs, "async_impl", False) and hasattr(self._fs, "set_session"):
                self._session = await self._fs.set_session()
        return self._fs

    def _make_filesystem(self) -> Any:
        require_extra(self.url)  # names the module missing, in the words a local run uses
        extra = _EXTRAS.get(self.protocol, self.protocol)
        try:
            import fsspec

            # skip_instance_cache: fsspec's instance cache is process-wide state; each
            # backend owns its file system and its session on its own event loop.
            return fsspec.filesystem(
                self.protocol, asynchronous=True, skip_instance_cache=True, **self._options
            )
        except ImportError as err:
            raise errors.BackendConfigError(
                f"ledger {self.url} needs an extra: pip install 'agent-health[{extra}]' ({err})"
            ) from err
        except (ValueError, TypeError) as err:
            raise errors.BackendConfigError(
                f"ledger {self.url}: cannot open the object store: {err}"
            ) from err


def require_extra(url: str) -> None:
    """Raise :class:`errors.BackendConfigError` naming the extra to install when the client
    library of ``url``'s store is missing; no I/O. A local run checks it before its first
    test: otherwise the first append (a test's end) would be the first to find out."""
    protocol = urlsplit(url).scheme.lower()
    extra = _EXTRAS.get(protocol)
    if extra is None:
        return
    for module in ("fsspec", _MODULES[protocol]):
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise errors.BackendConfigError(
                f"ledger {url} needs the {extra} extra (no module {module!r}): "
                f"pip install 'agent-health[{extra}]'"
            )


def _index(path: str) -> int:
    match = _PART.match(path.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else -1
