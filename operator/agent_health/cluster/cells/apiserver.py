"""Where a cell would reach the Kubernetes API server, read once when the operator starts.

The cells' NetworkPolicy (:mod:`.netpol`) carves these addresses out of every declared
egress block that contains them: no cell talks to the API server.
A NetworkPolicy sees a Service's traffic after its address is translated to an endpoint, so
the endpoints of Service ``default/kubernetes`` are what counts (one ``get``, by name: the
chart's RBAC has exactly that); in a pod the Service's own address is added as well.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import urllib.parse

from agent_health.cluster import kube
from agent_health.cluster.cells import netpol

log = logging.getLogger("agent_health.operator")


async def addresses(api: kube.Client, service: str | None) -> tuple[netpol.Egress, ...]:
    """Where a cell would reach the API server: the endpoints of Service ``default/kubernetes``
    (a NetworkPolicy sees a Service's traffic after its address is translated to them) and,
    in a pod, the Service's own address (``service``, the URL the operator itself uses)."""
    found: list[netpol.Egress] = []
    try:
        body = await api.get(kube.ENDPOINTS, "default", "kubernetes")
    except kube.ApiError as err:
        log.warning(
            "cannot read Endpoints default/kubernetes (%s): the cells' NetworkPolicy cannot "
            "carve the API server out of --egress blocks",
            err,
        )
        body = {}
    for subset in body.get("subsets") or []:
        ports = tuple(
            int(p["port"]) for p in subset.get("ports") or [] if p.get("protocol", "TCP") == "TCP"
        )
        for address in subset.get("addresses") or []:
            with contextlib.suppress(KeyError, ValueError):
                found.append(netpol.Egress(_one_address(address["ip"]), ports))
    if service is not None:
        parts = urllib.parse.urlsplit(service)
        with contextlib.suppress(ValueError):
            port = parts.port or 443
            found.append(netpol.Egress(_one_address(parts.hostname or ""), (port,)))
    return tuple(found)


def _one_address(ip: str) -> str:
    """``ip`` as a one-address CIDR; a ValueError when it is not an IP address."""
    return str(ipaddress.ip_network(ip))
