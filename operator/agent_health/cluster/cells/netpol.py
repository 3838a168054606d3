"""The NetworkPolicies of a run's cells and of a RunSpec's discovery pod: nothing in, little out.

A cell accepts no connections from anywhere (no ingress rule: other pods, other runs' targets
included, reach none of its ports). Its egress is allowed to:

* the cluster DNS;
* the operator's judge pods (namespace + pod labels + the judge port: not its metrics port);
* the CIDRs the operator declares (``--egress``: the object store, the target's model
  provider).

Cloud metadata addresses (:data:`METADATA`) and the API server are carved out (``except``) of
every declared block that contains them, so ``0.0.0.0/0:443`` does not quietly open the
instance's credentials or the control plane; a block that *is* such an address (say
``169.254.169.254/32``) declares it and is kept. Everything within a cell travels over the
pod's loopback and is not subject to the policy.

The operator (``--network-policy``) creates one per EvaluationRun before its first cell, from
a :class:`Fence`; declared egress comes from ``--egress``, parsed by :func:`egress`. A
RunSpec's discovery pod imports the suite's code and needs no network at all: its policy
(:func:`discovery_policy`) allows nothing in or out.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import manifests

NAMESPACE_LABEL = "kubernetes.io/metadata.name"
_CIDR = re.compile(r"^[0-9a-fA-F:.]+/[0-9]{1,3}$")
METADATA = (
    "169.254.169.254/32",  # instance metadata: AWS, GCP, Azure, OCI, OpenStack, ...
    "169.254.169.252/32",  # GKE's metadata server (Workload Identity, Dataplane V2)
    "127.0.0.1/32",  # GKE's metadata server as Calico's NAT reaches it (the node's :988)
    "169.254.170.2/32",  # ECS task metadata and credentials
    "169.254.170.23/32",  # the EKS Pod Identity agent
    "100.100.100.200/32",  # Alibaba Cloud metadata
    "fd00:ec2::254/128",  # AWS instance metadata over IPv6
    "fd00:ec2::23/128",  # the EKS Pod Identity agent over IPv6
)
"""Addresses that hand out a node's or pod's cloud credentials: denied unless declared."""


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
    api_server: tuple[Egress, ...] = ()
    """The API server's addresses (its endpoints, and the Service's IP) with their ports:
    carved out of every declared block (no cell talks to it: with a ConfigMap ledger the
    gateway writes its records to its log and the operator stores them)."""

    def policy(
        self, run: evaluationrun.EvaluationRun, settings: manifests.Settings
    ) -> dict[str, Any]:
        """The NetworkPolicy of ``run`` (see :func:`network_policy`)."""
        return network_policy(
            run,
            settings=settings,
            egress=self.egress,
            dns_namespace=self.dns_namespace,
            dns_labels=self.dns_labels,
            api_server=self.api_server,
        )

    def rules(self, settings: manifests.Settings) -> list[dict[str, Any]]:
        """The egress rules of :meth:`policy`, for a policy selecting other pods (a pool's)."""
        return egress_rules(
            settings=settings,
            egress=self.egress,
            dns_namespace=self.dns_namespace,
            dns_labels=self.dns_labels,
            api_server=self.api_server,
        )


def network_policy(
    run: evaluationrun.EvaluationRun,
    *,
    settings: manifests.Settings,
    egress: Sequence[Egress] = (),
    dns_namespace: str = "kube-system",
    dns_labels: Mapping[str, str] | None = None,
    api_server: Sequence[Egress] = (),
) -> dict[str, Any]:
    """The policy selecting ``run``'s cells (plain or sandboxed); owned by the run."""
    namespace, name, _ = manifests.identity(run)
    labels = manifests.run_labels(run, "cell")
    selector = {k: labels[k] for k in (manifests.LABEL_RUN, manifests.LABEL_COMPONENT)}
    rules = egress_rules(
        settings=settings,
        egress=egress,
        dns_namespace=dns_namespace,
        dns_labels=dns_labels,
        api_server=api_server,
    )
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


def egress_rules(
    *,
    settings: manifests.Settings,
    egress: Sequence[Egress] = (),
    dns_namespace: str = "kube-system",
    dns_labels: Mapping[str, str] | None = None,
    api_server: Sequence[Egress] = (),
) -> list[dict[str, Any]]:
    """What a cell may reach: the cluster DNS, the judge pods, the declared egress."""
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
    denied = [*METADATA, *(a.cidr for a in api_server)]
    rules += [_ip_rule(a, denied) for a in egress]
    return rules


def discovery_policy(spec: runspec.RunSpec) -> dict[str, Any]:
    """The policy of ``spec``'s discovery pods: no traffic in or out; owned by the RunSpec.

    Discovery imports the suite's files and prints their tests; it needs no network, and
    code that runs at import time gets none.
    """
    namespace, name, _ = manifests.identity(spec)
    selector = {
        manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
        manifests.LABEL_RUNSPEC: manifests.label_value(name),
        manifests.LABEL_COMPONENT: "discovery",
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{manifests.fit(name, manifests.DNS_LABEL_MAX - 10)}-discovery",
            "namespace": namespace,
            "labels": {
                manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
                manifests.LABEL_RUNSPEC: manifests.label_value(name),
                manifests.LABEL_COMPONENT: "network-policy",
            },
            "ownerReferences": [manifests.owner_reference(spec)],
        },
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }


def _ip_rule(allowed: Egress, denied: Sequence[str]) -> dict[str, Any]:
    """One declared block, with every denied address it contains (but is not) carved out."""
    block: dict[str, Any] = {"cidr": allowed.cidr}
    carved = [*allowed.excluding, *carve(allowed.cidr, denied, allowed.excluding)]
    if carved:
        block["except"] = carved
    rule: dict[str, Any] = {"to": [{"ipBlock": block}]}
    if allowed.ports:
        rule["ports"] = [{"protocol": allowed.protocol, "port": p} for p in allowed.ports]
    return rule


def carve(cidr: str, denied: Sequence[str], excluded: Sequence[str] = ()) -> list[str]:
    """The ``denied`` networks strictly inside ``cidr`` and not already ``excluded``.

    >>> carve("0.0.0.0/0", ["169.254.169.254/32", "fd00:ec2::254/128"])
    ['169.254.169.254/32']
    >>> carve("169.254.169.254/32", ["169.254.169.254/32"])  # declared: kept
    []
    """
    block = ipaddress.ip_network(cidr, strict=False)
    already = [ipaddress.ip_network(e, strict=False) for e in excluded]
    found: list[str] = []
    for text in denied:
        net = ipaddress.ip_network(text, strict=False)
        if net.version != block.version or net == block:
            continue
        if not net.subnet_of(block):  # type: ignore[arg-type]
            continue
        if any(net.subnet_of(e) for e in already if e.version == net.version):  # type: ignore[arg-type]
            continue
        if str(net) not in found:
            found.append(str(net))
    return found
