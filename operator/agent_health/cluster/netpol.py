"""The NetworkPolicy of a run: its cells accept no connections and reach only what they need.

Egress is allowed to the operator's judge pods (namespace + pod labels + port), to the
cluster DNS, and to the CIDRs the caller declares — which must include whatever the
gateway writes the ledger to (the API server for a ConfigMap ledger, the object store)
and whatever the target itself calls (its model provider). Everything within a cell
travels over the pod's loopback and is not subject to the policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agent_health.cluster import evaluationrun, manifests

NAMESPACE_LABEL = "kubernetes.io/metadata.name"


@dataclasses.dataclass(frozen=True)
class Egress:
    """Traffic allowed out of the cells: a CIDR, optionally only some ports."""

    cidr: str
    ports: tuple[int, ...] = ()
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    excluding: tuple[str, ...] = ()


def network_policy(
    run: evaluationrun.EvaluationRun,
    *,
    settings: manifests.Settings,
    egress: Sequence[Egress] = (),
    dns_namespace: str = "kube-system",
    dns_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The policy selecting ``run``'s cells (plain or sandboxed); owned by the run."""
    namespace, name, _ = manifests.identity(run)
    labels = manifests.run_labels(run, "cell")
    selector = {k: labels[k] for k in (manifests.LABEL_RUN, manifests.LABEL_COMPONENT)}
    rules: list[dict[str, Any]] = [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: dns_namespace}},
                    "podSelector": {"matchLabels": dict(dns_labels or {"k8s-app": "kube-dns"})},
                }
            ],
            "ports": [{"protocol": p, "port": 53} for p in ("UDP", "TCP")],
        }
    ]
    if settings.judge is not None:
        rules.append(
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {NAMESPACE_LABEL: settings.judge.namespace}
                        },
                        "podSelector": {"matchLabels": dict(settings.judge.pod_labels)},
                    }
                ],
                "ports": [{"protocol": "TCP", "port": settings.judge.port}],
            }
        )
    for allowed in egress:
        block: dict[str, Any] = {"cidr": allowed.cidr}
        if allowed.excluding:
            block["except"] = list(allowed.excluding)
        rule: dict[str, Any] = {"to": [{"ipBlock": block}]}
        if allowed.ports:
            rule["ports"] = [{"protocol": allowed.protocol, "port": p} for p in allowed.ports]
        rules.append(rule)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{manifests.fit(name, manifests.DNS_LABEL_MAX - 6)}-cells",
            "namespace": namespace,
            "labels": manifests.run_labels(run, "network-policy"),
            "ownerReferences": [manifests.owner_reference(run)],
        },
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": rules,
        },
    }
