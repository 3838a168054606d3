"""NetworkPolicy semantics, to ask of rendered or created policies "would this packet pass?".

Kubernetes' rules (networking.k8s.io/v1): a pod selected by no policy of a direction is open
in it; once selected, traffic passes only when some rule of some selecting policy allows it
(rules add up, nothing subtracts). A rule allows a peer when one of its ``to``/``from``
entries matches — ``ipBlock`` by address minus its ``except``, ``namespaceSelector`` and
``podSelector`` (both in one entry: both must match; a ``podSelector`` alone: the policy's
namespace) — and one of its ``ports`` matches (no ``ports``: every port). Enough of the
semantics to replay the attacks of issue #16 against the policies the chart and the
operator write; CNI-specific behaviour (host-network sources, Service IPs) is out of scope.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Pod:
    """A pod as policies see it: its namespace (and that namespace's labels), labels, IP."""

    namespace: str
    labels: Mapping[str, str]
    ip: str = "10.0.0.1"

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace}


@dataclasses.dataclass(frozen=True)
class Address:
    """A destination or source that is not a pod: an IP alone."""

    ip: str


Peer = Pod | Address


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels`` (an empty selector matches everything)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _peer_matches(entry: Mapping[str, Any], peer: Peer, policy_namespace: str) -> bool:
    if "ipBlock" in entry:
        block = entry["ipBlock"]
        address = ipaddress.ip_address(peer.ip)
        network = ipaddress.ip_network(block["cidr"], strict=False)
        if address.version != network.version or address not in network:
            return False
        return not any(
            address in ipaddress.ip_network(e, strict=False)
            for e in block.get("except", [])
            if ipaddress.ip_network(e, strict=False).version == address.version
        )
    if not isinstance(peer, Pod):
        return False
    if "namespaceSelector" in entry:
        if not selects(entry["namespaceSelector"], peer.namespace_labels):
            return False
    elif peer.namespace != policy_namespace:
        return False
    return selects(entry.get("podSelector") or {}, peer.labels)


def _port_matches(ports: Sequence[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    return any(
        p.get("protocol", "TCP") == protocol and (p.get("port") in (None, port)) for p in ports
    )


def _selecting(
    policies: Iterable[Mapping[str, Any]], pod: Pod, direction: str
) -> list[Mapping[str, Any]]:
    return [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in p["spec"].get("policyTypes", ["Ingress"])
        and selects(p["spec"]["podSelector"], pod.labels)
    ]


def egress_allowed(
    policies: Iterable[Mapping[str, Any]], source: Pod, to: Peer, port: int, protocol: str = "TCP"
) -> bool:
    """Whether ``source`` may open a connection to ``to``'s ``port``."""
    selecting = _selecting(policies, source, "Egress")
    if not selecting:
        return True
    return any(
        _port_matches(rule.get("ports"), port, protocol)
        and (
            not rule.get("to")
            or any(_peer_matches(t, to, p["metadata"]["namespace"]) for t in rule["to"])
        )
        for p in selecting
        for rule in p["spec"].get("egress") or []
    )


def ingress_allowed(
    policies: Iterable[Mapping[str, Any]], to: Pod, source: Peer, port: int, protocol: str = "TCP"
) -> bool:
    """Whether ``source`` may open a connection to ``to``'s ``port``."""
    selecting = _selecting(policies, to, "Ingress")
    if not selecting:
        return True
    return any(
        _port_matches(rule.get("ports"), port, protocol)
        and (
            not rule.get("from")
            or any(_peer_matches(f, source, p["metadata"]["namespace"]) for f in rule["from"])
        )
        for p in selecting
        for rule in p["spec"].get("ingress") or []
    )


def connects(
    policies: Sequence[Mapping[str, Any]], source: Peer, to: Peer, port: int, protocol: str = "TCP"
) -> bool:
    """Both ends agree: a pod source's egress and a pod destination's ingress."""
    if isinstance(source, Pod) and not egress_allowed(policies, source, to, port, protocol):
        return False
    return not isinstance(to, Pod) or ingress_allowed(policies, to, source, port, protocol)
