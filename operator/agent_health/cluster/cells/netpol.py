"""The NetworkPolicy of a run: its cells accept no connections and reach only what they need.

Egress is allowed to the operator's judge pods (namespace + pod labels + port), to the
cluster DNS, and to the CIDRs the caller declares — which must include whatever the
gateway writes the ledger to (the API server for a ConfigMap ledger, the object store)
and whatever the target itself calls (its model provider). Everything within a cell
travels over the pod's loopback and is not subject to the policy.

The operator (``--network-policy``) creates one per EvaluationRun before its first cell,
from a :class:`Fence`; declared egress comes from ``--egress``, parsed by :func:`egress`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agent_health.cluster.api import evaluationrun
from agent_health.cluster.cells import manifests

NAMESPACE_LABEL = "kubernetes.io/metadata.name"
_CIDR = re.compile(r"^[0-9a-fA-F:.]+/[0-9]{1,3}$")


@dataclasses.dataclass(frozen=True)
class Egress:
    """Traffic allowed out of the cells: a CIDR, optionally only some ports."""

    cidr: str
    ports: tuple[int, ...] = ()
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    excluding: tuple[str, ...] = ()


def egress(text: str) -> Egress:
    """``CIDR[~EXCEPT...][:PORT[+PORT...]]``, e.g. ``0.0.0.0/0~10.0.0.0/8:443+6443``.

    A ValueError names the text and the expected form.
    """
    head, slash, tail = text.strip().rpartition("/")
    bits, _, ports = tail.partition(":")
    blocks = f"{head}{slash}{bits}".split("~")
    usage = f"--egress {text!r}: expected CIDR[~EXCEPT...][:PORT[+PORT...]], e.g. 10.0.0.0/8:443"
    if not slash or not all(_CIDR.match(b) for b in blocks):
        raise ValueError(usage)
    try:
        numbers = tuple(int(p) for p in ports.split("+")) if ports else ()
    except ValueError:
        raise ValueError(usage) from None
    if not all(0 < n < 65536 for n in numbers):
        raise ValueError(usage)
    return Egress(blocks[0], numbers, excluding=tuple(blocks[1:]))


@dataclasses.dataclass(frozen=True)
class Fence:
    """What the operator's per-run policies allow besides the judge (``--network-policy``)."""

    egress: tuple[Egress, ...] = ()
    dns_namespace: str = "kube-system"
    dns_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"k8s-app": "kube-dns"}
    )

    def policy(
        self, run: evaluationrun.EvaluationRun, settings: manifests.Settings
    ) -> dict[str, Any]:
        """The NetworkPolicy of ``run`` (see :func:`network_policy`)."""
        return network_policy(
            run, settings=settings, egress=self.egress, dns_namespace=self.dns_namespace,
            dns_labels=self.dns_labels,
        )  # fmt: skip


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
