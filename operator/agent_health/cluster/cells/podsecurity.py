"""What every pod agent-health creates sets for safety: the restricted security profile on
the pod and on each container, no API token or host namespaces, and the annotation that
keeps a cloud identity webhook from handing the pod's role to every container."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster.cells import manifests


def pod_security_context(settings: manifests.Settings) -> dict[str, Any]:
    """The pod-wide part of the restricted profile; ``fsGroup`` lets the uid read Secrets."""
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "fsGroup": settings.run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(settings: manifests.Settings) -> dict[str, Any]:
    """A container's restricted security context (set on each, not left to the pod's)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_spec_base(settings: manifests.Settings) -> dict[str, Any]:
    """Pod spec fields every agent-health pod sets: no API token, no host namespaces."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "shareProcessNamespace": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": pod_security_context(settings),
    }
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    if settings.runtime_class is not None:
        spec["runtimeClassName"] = settings.runtime_class
    return spec


def skip_cloud_identity(pod_spec: Mapping[str, Any], *, keep: str | None = None) -> dict[str, str]:
    """Annotations that keep EKS's identity webhook from handing the pod's role to every
    container: ``eks.amazonaws.com/skip-containers`` lists each one but ``keep``.

    IRSA and EKS Pod Identity inject their credentials into *every* container of a pod whose
    ServiceAccount carries a role, unless the pod names the containers to skip. A cell's
    ServiceAccount exists for its gateway (the ledger), so all others are skipped.
    """
    names = [c["name"] for c in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]]
    return {manifests.SKIP_CONTAINERS: ",".join(n for n in names if n != keep)}
