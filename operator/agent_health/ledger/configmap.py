"""The ConfigMap backend: ``configmap://NAMESPACE/NAME``, for small runs without a bucket.

All cells of a ledger share one ConfigMap. A cell is stored in ``binaryData`` as numbered
chunks ``CELL.jsonl.gz.0000``, ``...0001``, each the gzip of whole lines; an append
rewrites only the last chunk (or starts a new one). A cell has one writer (its gateway), so
an append reads the ConfigMap (its cell's last chunk, and the size so far) and sends only
its cell's changed chunks, as a JSON merge patch: cells written at the same moment by many
gateways never conflict, and each append is one write. In a cluster the operator creates
the run's ConfigMap, owned by the run, before its first cell (``cluster.reconcile.ledgers``);
elsewhere the first writer creates it, and one that loses that race (409 AlreadyExists)
reads it again and patches. When
the ConfigMap would exceed the Kubernetes 1 MiB limit the append fails with
:class:`~agent_health.ledger.errors.LedgerTooLarge` — the ledger is never truncated (a
write that two cells' appends push over the limit together is refused by the API server,
422, and is the same error).

The Kubernetes API is spoken with plain httpx: the base URL and bearer token come from the
pod's service-account mount unless given in :class:`~agent_health.ledger.store.Options`
(outside a cluster, what ``agent_health.cluster.kube.ledger_options`` read from a kubeconfig).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from agent_health.ledger import errors, store

CHUNK_BYTES = 256 * 1024
MAX_ATTEMPTS = 20
_KEY = re.compile(r"^(?P<cell>.+)\.jsonl\.gz\.(?P<index>\d+)$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

ConfigMap = dict[str, Any]


class ConfigMapBackend:
    """Ledger lines of every cell in the ``binaryData`` of one ConfigMap."""

    def __init__(
        self,
        namespace: str,
        name: str,
        options: store.Options | None = None,
        *,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.namespace, self.name = namespace, name
        self.url = f"configmap://{namespace}/{name}"
        self._options = options or store.Options()
        self._chunk_bytes = chunk_bytes
        self._client: httpx.AsyncClient | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str, options: store.Options) -> ConfigMapBackend:
        parts = url.removeprefix("configmap://").strip("/").split("/")
        if len(parts) != 2 or not all(parts):
            raise errors.BackendConfigError(
                f"ledger URL {url!r} must be configmap://NAMESPACE/NAME"
            )
        namespace, name = parts
        if not _DNS_LABEL.match(namespace):
            raise errors.BackendConfigError(
                f"ledger URL {url!r}: namespace {namespace!r} is not a Kubernetes namespace "
                "name (lower-case letters, digits and '-', at most 63)"
            )
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise errors.BackendConfigError(
                f"ledger URL {url!r}: {name!r} is not a ConfigMap name (lower-case letters, "
                "digits, '-' and '.', at most 253)"
            )
        return cls(namespace, name, options)

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        store.check_cell(cell)
        if not lines:
            return
        text = "".join(f"{line}\n" for line in lines)
        await self._update(lambda current: self._compose(current, cell, text))

    async def store_cells(self, batch: Mapping[str, Sequence[str]]) -> None:
        """Write whole cells, many in one merge patch (the operator stores a run's cells,
        collected from their gateways' logs, together: one write for many cells).

        A cell already there with exactly these lines (stored before an operator restart) is
        left as it is; one with other lines is a :class:`~.errors.BackendError`, and a batch
        over the size limit :class:`~.errors.LedgerTooLarge`: then nothing is written.
        """
        texts = {
            store.check_cell(cell): "".join(f"{line}\n" for line in lines)
            for cell, lines in batch.items()
            if lines
        }
        if texts:
            await self._update(lambda current: self._compose_cells(current, texts))

    async def _update(self, compose: Callable[[ConfigMap | None], dict[str, str]]) -> None:
        """Read the ConfigMap, ``compose`` its new ``binaryData``, write the change."""
        async with self._lock:
            for attempt in range(MAX_ATTEMPTS):
                current = await self._get()
                data = await asyncio.to_thread(compose, current)
                if await self._store(current, data):
                    return
                await asyncio.sleep(min(0.01 * 2**attempt, 0.5))
        raise errors.BackendError(
            f"ledger {self.url}: gave up after {MAX_ATTEMPTS} attempts: the ConfigMap was "
            "deleted or created by someone else each time; check who else writes it"
        )

    async def read(self, cell: str) -> list[str]:
        store.check_cell(cell)
        current = await self._get()
        data = (current or {}).get("binaryData") or {}
        text = await asyncio.to_thread(_decode_cell, data, cell, self.url)
        return text.split("\n")[:-1] if text else []

    async def cells(self) -> list[str]:
        current = await self._get()
        keys = ((current or {}).get("binaryData") or {}).keys()
        return sorted({m["cell"] for k in keys if (m := _KEY.match(k))})

    async def flush(self) -> None:
        """Nothing is buffered: an append returns once the API server stored it."""

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- chunks ---------------------------------------------------------------------------

    def _compose(self, current: ConfigMap | None, cell: str, text: str) -> dict[str, str]:
        """The new ``binaryData``: ``text`` added to ``cell``, checked against the size limit."""
        data = dict((current or {}).get("binaryData") or {})
        self._add(data, cell, text)
        self._check_size(current, data)
        return data

    def _compose_cells(self, current: ConfigMap | None, texts: Mapping[str, str]) -> dict[str, str]:
        """The new ``binaryData`` with each whole cell of ``texts`` (see :meth:`store_cells`)."""
        data = dict((current or {}).get("binaryData") or {})
        for cell, text in texts.items():
            if _chunk_indexes(data, cell):
                stored = _decode_cell(data, cell, self.url)
                if stored == text:
                    continue
                raise errors.BackendError(
                    f"ledger {self.url}: cell {cell} already holds other records; a cell is "
                    "written once, by the operator that collected it"
                )
            for index, chunk in enumerate(_chunks(text, self._chunk_bytes)):
                data[_key(cell, index)] = _gzip(chunk)
        self._check_size(current, data)
        return data

    def _add(self, data: dict[str, str], cell: str, text: str) -> None:
        """Add ``text`` to ``cell``'s last chunk, or a new chunk when that one is full."""
        indexes = _chunk_indexes(data, cell)
        last = indexes[-1] if indexes else None
        if last is not None:
            old = _gunzip(data[_key(cell, last)], self.url, cell)
            if len(old) + len(text.encode()) <= self._chunk_bytes:
                data[_key(cell, last)] = _gzip(old + text.encode())
                return
        data[_key(cell, 0 if last is None else last + 1)] = _gzip(text.encode())

    def _check_size(self, current: ConfigMap | None, binary: dict[str, str]) -> None:
        # Kubernetes counts the decoded bytes of data and binaryData values against 1 MiB.
        plain = sum(len(v.encode()) for v in ((current or {}).get("data") or {}).values())
        total = plain + sum(len(base64.b64decode(v)) for v in binary.values())
        limit = self._options.configmap_max_bytes
        if total > limit:
            raise errors.LedgerTooLarge(
                f"ledger {self.url} would hold {total} bytes, over the ConfigMap limit of "
                f"{limit} bytes; nothing was written — use an object store ledger "
                "(s3://BUCKET/PREFIX or gs://BUCKET/PREFIX) for runs this large"
            )

    # -- Kubernetes API -------------------------------------------------------------------

    def _path(self, named: bool = True) -> str:
        base = f"/api/v1/namespaces/{self.namespace}/configmaps"
        return f"{base}/{self.name}" if named else base

    async def _get(self) -> ConfigMap | None:
        response = await self._request("GET", self._path())
        if response.status_code == 404:
            return None
        self._raise_for(response, "read")
        body: ConfigMap = response.json()
        return body

    async def _store(self, current: ConfigMap | None, binary: dict[str, str]) -> bool:
        """Create the ConfigMap, or patch in this cell's changed chunks; ``False`` when it
        changed under us (created or deleted meanwhile): read it again."""
        if current is not None:
            before = current.get("binaryData") or {}
            changed = {k: v for k, v in binary.items() if before.get(k) != v}
            if not changed:
                return True
            patch = {"binaryData": changed}
            response = await self._request("PATCH", self._path(), patch, merge=True)
            if response.status_code == 404:
                return False
            self._raise_for(response, "write")
            return True
        body: ConfigMap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "agent-health"},
            },
            "binaryData": binary,
        }
        response = await self._request("POST", self._path(named=False), body)
        if response.status_code == 409:
            return False
        self._raise_for(response, "write")
        return True

    async def _request(
        self, method: str, path: str, body: ConfigMap | None = None, *, merge: bool = False
    ) -> httpx.Response:
        client = await self._http()
        headers = {"Content-Type": "application/merge-patch+json"} if merge else None
        try:
            if body is None:
                return await client.request(method, path)
            return await client.request(method, path, content=json.dumps(body), headers=headers)
        except httpx.HTTPError as err:
            raise errors.BackendError(
                f"ledger {self.url}: cannot reach the Kubernetes API at {client.base_url}: {err!r}"
            ) from err

    def _raise_for(self, response: httpx.Response, action: str) -> None:
        if response.is_success:
            return
        too_long = response.status_code == 422 and "too long" in response.text.lower()
        if action == "write" and (too_long or response.status_code == 413):
            raise errors.LedgerTooLarge(
                f"ledger {self.url}: the API server refused the write as over the ConfigMap "
                f"size limit ({response.text[:200]}); nothing was written — use an object "
                "store ledger (s3://BUCKET/PREFIX or gs://BUCKET/PREFIX) for runs this large"
            )
        hint = ""
        if response.status_code in (401, 403):
            hint = (
                f"; grant the service account get, create and patch on configmaps in "
                f"namespace {self.namespace}"
            )
        raise errors.BackendError(
            f"ledger {self.url}: the Kubernetes API refused to {action} the ConfigMap "
            f"({response.status_code}: {response.text[:200]}){hint}"
        )

    async def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            base, token, verify = await asyncio.to_thread(self._connection)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            headers.update(self._options.kube_headers)
            self._client = httpx.AsyncClient(
                base_url=base, headers=headers, verify=verify, timeout=30.0
            )
        return self._client

    def _connection(self) -> tuple[str, str | None, ssl.SSLContext | str | bool]:
        """Base URL, token and TLS verification: explicit options, else the pod's mount."""
        opts = self._options
        if opts.kube_api_url is not None and (opts.kube_headers or opts.kube_verify):
            return opts.kube_api_url, opts.kube_token, opts.kube_verify or True  # a kubeconfig
        base = opts.kube_api_url
        if base is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise errors.BackendConfigError(
                    f"ledger {self.url}: not running in a cluster (KUBERNETES_SERVICE_HOST "
                    "unset) and no Kubernetes API URL given (Options.kube_api_url)"
                )
            base = f"https://{host}:{port}"
        account = Path(opts.kube_service_account_dir)
        token = opts.kube_token
        if token is None:
            token_file = account / "token"
            try:
                token = token_file.read_text().strip()
            except OSError as err:
                raise errors.BackendConfigError(
                    f"ledger {self.url}: no Kubernetes token given and {token_file} is "
                    f"unreadable ({err.strerror or err})"
                ) from err
        ca = opts.kube_ca_file or (
            str(account / "ca.crt") if (account / "ca.crt").exists() else None
        )
        return base, token, ca if ca else True


def _key(cell: str, index: int) -> str:
    return f"{cell}.jsonl.gz.{index:04d}"


def _chunks(text: str, size: int) -> list[bytes]:
    """``text`` (whole lines) in pieces of at most ``size`` bytes, each of whole lines (a
    longer line is a piece of its own)."""
    pieces: list[bytes] = []
    current = b""
    for line in text.encode("utf-8").splitlines(keepends=True):
        if current and len(current) + len(line) > size:
            pieces.append(current)
            current = b""
        current += line
    return [*pieces, current] if current else pieces


def _chunk_indexes(data: dict[str, str], cell: str) -> list[int]:
    return sorted(int(m["index"]) for k in data if (m := _KEY.match(k)) and m["cell"] == cell)


def _gzip(raw: bytes) -> str:
    return base64.b64encode(gzip.compress(raw, mtime=0)).decode("ascii")


def _gunzip(value: str, url: str, cell: str) -> bytes:
    try:
        return gzip.decompress(base64.b64decode(value))
    except (OSError, ValueError, EOFError) as err:
        raise errors.BackendError(
            f"ledger {url}: a chunk of cell {cell} is not gzip+base64 ({err})"
        ) from err


def _decode_cell(data: dict[str, str], cell: str, url: str) -> str:
    chunks = [_gunzip(data[_key(cell, i)], url, cell) for i in _chunk_indexes(data, cell)]
    return b"".join(chunks).decode("utf-8")
