"""What every ledger store is: the :class:`Backend` protocol, its :class:`Options`, cell names.

The stores (:mod:`.filestore`, :mod:`.configmap`, :mod:`.objectstore`) implement it;
:mod:`.backends` picks one by URL. Neither imports the other's registry.
"""

import re
import ssl
from collections.abc import Callable, Sequence
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

    model_config = ConfigDict(
        defer_build=True, frozen=True, extra="forbid", arbitrary_types_allowed=True
    )

    kube_api_url: str | None = Field(
        default=None, description="Kubernetes API base URL; default: in-cluster service env"
    )
    kube_token: str | None = Field(
        default=None, description="bearer token; default: the mounted service-account token"
    )
    kube_ca_file: str | None = None
    kube_headers: dict[str, str] = Field(
        default_factory=dict,
        description="headers for the API, e.g. Authorization from a kubeconfig",
    )
    kube_verify: ssl.SSLContext | None = Field(
        default=None, exclude=True, description="TLS for the API (CA, client certificate)"
    )
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


def text_of(lines: Sequence[str]) -> str:
    """``lines`` as a store holds them: each ended by a newline, in one string.

    >>> text_of(["a", "b"])
    'a\\nb\\n'

    Joined once: a line with its newline added first is a copy of it per line, and ledger
    lines are longer than what the allocator keeps small (an MCP route's carry their
    results), which made that join the largest part of writing a spool out.
    """
    return "\n".join([*lines, ""]) if lines else ""
