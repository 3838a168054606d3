"""Where ledgers live, chosen by URL.

==============================  ===================================================
``file://DIR`` or a plain path  one ``CELL.jsonl`` per cell in DIR (the local default)
``configmap://NAMESPACE/NAME``  gzip + base64 chunks in one ConfigMap (small runs)
``s3://BUCKET/PREFIX``          object store via fsspec/s3fs (AWS, MinIO: ``?endpoint_url=``)
``gs://BUCKET/PREFIX``          object store via fsspec/gcsfs
==============================  ===================================================

Every backend has the same async surface (:class:`Backend`). Lines are opaque strings to a
backend; sealing and verifying them is :mod:`agent_health.ledger.chain`'s job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent_health.ledger import errors

_CELL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@runtime_checkable
class Backend(Protocol):
    """Per-cell append-only storage of ledger lines."""

    url: str

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        """Append ``lines`` (without newlines) to ``cell``, in order, as one batch."""
        ...

    async def read(self, cell: str) -> list[str]:
        """Every line of ``cell`` in append order; ``[]`` for a cell never written."""
        ...

    async def cells(self) -> list[str]:
        """The names of every cell that has lines, sorted."""
        ...

    async def flush(self) -> None:
        """Make every appended line durable."""
        ...

    async def close(self) -> None:
        """Flush, then release connections."""
        ...


class Options(BaseModel):
    """Backend settings that do not belong in a URL (credentials, API servers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kube_api_url: str | None = Field(
        default=None, description="Kubernetes API base URL; default: in-cluster service env"
    )
    kube_token: str | None = Field(
        default=None, description="bearer token; default: the mounted service-account token"
    )
    kube_ca_file: str | None = None
    kube_service_account_dir: str = Field(
        default="/var/run/secrets/kubernetes.io/serviceaccount",
        description="where the pod's token and ca.crt are mounted",
    )
    configmap_max_bytes: int = Field(default=1024 * 1024, gt=0)
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="extra fsspec options for object stores"
    )


Factory = Callable[[str, Options], Backend]


def check_cell(cell: str) -> str:
    """``cell`` if it is a safe cell name (letters, digits, ``.``, ``_``, ``-``; ≤ 200)."""
    if not _CELL.match(cell):
        raise errors.BackendConfigError(
            f"bad cell name {cell!r}: use letters, digits, '.', '_' and '-' "
            "(at most 200, starting with a letter or digit)"
        )
    return cell


def _builtins() -> Mapping[str, Factory]:
    from agent_health.ledger import configmap, filestore, objectstore

    return MappingProxyType(
        {
            "file": filestore.FileBackend.from_url,
            "configmap": configmap.ConfigMapBackend.from_url,
            "s3": objectstore.ObjectStoreBackend.from_url,
            "gs": objectstore.ObjectStoreBackend.from_url,
            "gcs": objectstore.ObjectStoreBackend.from_url,
        }
    )


def schemes(extra: Mapping[str, Factory] | None = None) -> list[str]:
    """The URL schemes that name a backend, built-in and user-supplied."""
    return sorted({*_builtins(), *(extra or {})})


def from_url(
    url: str, options: Options | None = None, extra: Mapping[str, Factory] | None = None
) -> Backend:
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
    return factory(url, options or Options())
