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

from collections.abc import Mapping
from types import MappingProxyType

from agent_health.ledger import configmap, errors, filestore, objectstore, store


def _builtins() -> Mapping[str, store.Factory]:
    return MappingProxyType(
        {
            "file": filestore.FileBackend.from_url,
            "configmap": configmap.ConfigMapBackend.from_url,
            "s3": objectstore.ObjectStoreBackend.from_url,
            "gs": objectstore.ObjectStoreBackend.from_url,
            "gcs": objectstore.ObjectStoreBackend.from_url,
        }
    )


def schemes(extra: Mapping[str, store.Factory] | None = None) -> list[str]:
    """The URL schemes that name a backend, built-in and user-supplied."""
    return sorted({*_builtins(), *(extra or {})})


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
    table = {**_builtins(), **(extra or {})}
    factory = table.get(scheme.lower())
    if factory is None:
        raise errors.BackendConfigError(
            f"unknown ledger URL scheme {scheme!r} in {url!r}; use one of "
            + ", ".join(f"{s}://" for s in schemes(extra))
            + " (or a plain directory path)"
        )
    return factory(url, options or store.Options())
