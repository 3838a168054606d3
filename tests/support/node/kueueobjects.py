"""Kueue's objects as the stand-in of :mod:`node.kueue` reads them, and builders for tests:
the CRDs (permissive), a ClusterQueue's quotas per resource over its flavors, a pod's
requests as Kueue counts them, and ClusterQueue / LocalQueue / ResourceFlavor bodies.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from typing import Any

from agent_health.cluster.cells import resources

from support.node import crds

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"


def crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return crds.permissive(GROUP, VERSION, kind, plural, scope)


CRDS = (
    crd("ResourceFlavor", "resourceflavors", "Cluster"),
    crd("ClusterQueue", "clusterqueues", "Cluster"),
    crd("LocalQueue", "localqueues", "Namespaced"),
)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, decimal.Decimal]:
    """``pods`` 1 and the pod's effective CPU and memory requests: sidecars (init containers
    with ``restartPolicy: Always``) plus the larger of the regular containers' sum and any
    other init container (Kubernetes' and Kueue's rule)."""
    spec = pod.get("spec") or {}
    found: dict[str, decimal.Decimal] = {"pods": decimal.Decimal(1)}

    def asked(container: Mapping[str, Any], name: str) -> decimal.Decimal:
        value = ((container.get("resources") or {}).get("requests") or {}).get(name)
        return resources.quantity(value) if value is not None else ZERO

    for name in ("cpu", "memory"):
        inits = spec.get("initContainers") or []
        sidecars = sum(
            (asked(c, name) for c in inits if c.get("restartPolicy") == "Always"),
            ZERO,
        )
        regular = sum((asked(c, name) for c in spec.get("containers") or []), ZERO)
        others = [asked(c, name) for c in inits if c.get("restartPolicy") != "Always"]
        found[name] = sidecars + max([regular, *others])
    return found


ZERO = decimal.Decimal(0)
NONE: tuple[decimal.Decimal, decimal.Decimal | None] = (ZERO, None)


def total(amounts: Iterable[decimal.Decimal]) -> decimal.Decimal:
    return sum(amounts, ZERO)


def quotas_of(cq: Mapping[str, Any]) -> dict[str, tuple[decimal.Decimal, decimal.Decimal | None]]:
    """Resource → (nominal quota, borrowing limit or ``None``) over every flavor of the queue."""
    found: dict[str, tuple[decimal.Decimal, decimal.Decimal | None]] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                nominal = resources.quantity(res.get("nominalQuota", 0))
                limit = res.get("borrowingLimit")
                borrowing = resources.quantity(limit) if limit is not None else None
                old = found.get(res["name"])
                if old is not None:
                    nominal += old[0]
                    if borrowing is not None and old[1] is not None:
                        borrowing += old[1]
                found[res["name"]] = (nominal, borrowing)
    return found


def cluster_queue(
    name: str,
    *,
    cohort: str,
    pods: int,
    borrowing_limit: int | None = None,
    reclaim: str = "Any",
    weight: str = "1",
    hold: bool = False,
) -> dict[str, Any]:
    """A ClusterQueue of ``pods`` nominal quota (a flavor ``default``) in ``cohort``, with
    CPU and memory to spare."""
    quota: dict[str, Any] = {"name": "pods", "nominalQuota": pods}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    # A workload asking for a resource its ClusterQueue does not cover is never admitted
    # (every cell asks for CPU and memory): plenty of both, the pods are the quota.
    room = [{"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "4Ti"}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohort": cohort,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "pods"],
                    "flavors": [{"name": "default", "resources": [*room, quota]}],
                }
            ],
            "preemption": {"reclaimWithinCohort": reclaim, "withinClusterQueue": "Never"},
            "fairSharing": {"weight": weight},
            "stopPolicy": "Hold" if hold else "None",
        },
    }


def local_queue(name: str, namespace: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster},
    }


def resource_flavor(name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {},
    }
