"""Where ledgers live, chosen by URL.

==============================  ===================================================
``file://DIR`` or a plain path  one ``CELL.jsonl`` per cell in DIR (the local default)
``configmap://NAMESPACE/NAME``  gzip + base64 chunks in one ConfigMap (small runs)
``s3://BUCKET/PREFIX``          object store via fsspec/s3fs (AWS, MinIO: ``?endpoint_url=``)
``gs://BUCKET/PREFIX``          object store via fsspec/gcsfs
==============================  ===================================================

Every backend has the same async surface (:class:`.store.Backend`). Lines are opaque strings to a
backend; sealing and verifying them is :mod:`agent_health.ledger.chain`'s job.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from agent_health.ledger import errors, store

# scheme → (module, class): a store's module (and its client library) loads when first used.
BUILTINS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "file": ("agent_health.ledger.filestore", "FileBackend"),
        "configmap": ("agent_health.ledger.configmap", "ConfigMapBackend"),
        "s3": ("agent_health.ledger.objectstore", "ObjectStoreBackend"),
        "gs": ("agent_health.ledger.objectstore", "ObjectStoreBackend"),
        "gcs": ("agent_health.ledger.objectstore", "ObjectStoreBackend"),
    }
)


def _builtin(scheme: str) -> store.Factory | None:
    where = BUILTINS.get(scheme)
    if where is None:
        return None
    factory: store.Factory = getattr(importlib.import_module(where[0]), where[1]).from_url
    return factory


def schemes(extra: Mapping[str, store.Factory] | None = None) -> list[str]:
    """The URL schemes that name a backend, built-in and user-supplied."""
    return sorted({*BUILTINS, *(extra or {})})


def from_url(
    url: str, options: store.Options | None = None, extra: Mapping[str, store.Factory] | None = None
) -> store.Backend:
    """Open the backend that ``url`` names; a URL without a scheme is a local directory.

    >>> from_url("file:///tmp/ledger").url
    'file:///tmp/ledger'
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        url, scheme = f"file://{url}", "file"
    factory = (extra or {}).get(scheme.lower()) or _builtin(scheme.lower())
    if factory is None:
        raise errors.BackendConfigError(
            f"unknown ledger URL scheme {scheme!r} in {url!r}; use one of "
            + ", ".join(f"{s}://" for s in schemes(extra))
            + " (or a plain directory path)"
        )
    return factory(url, options or store.Options())


def require_client(url: str) -> None:
    """Raise :class:`~agent_health.ledger.errors.BackendConfigError` naming the extra to
    install when the client library of ``url``'s store is missing (no I/O). A writer checks
    it before it starts: its first append comes long after (a local run's first test end)."""
    if url.partition("://")[0].lower() in ("s3", "gs", "gcs"):
        from agent_health.ledger import objectstore

        objectstore.require_extra(url)
