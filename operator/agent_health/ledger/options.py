"""A ledger store's settings that do not belong in its URL: :class:`Options`.

Read by the stores that need them (the ConfigMap and object stores, whose clients they
configure); a local run's file ledger never does, so its class is made when first read
(``store.Options`` shows it; issue #40).
"""

import ssl
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
