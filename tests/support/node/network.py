"""The node's network: a bridge on the host, one network namespace per pod, Service IPs.

The node is a Linux bridge ``ahb<pid hex>`` holding the node's own address ``10.N.0.1/16``
(``N`` chosen so that no interface of this host uses the /16). Each pod gets a network
namespace ``ah-<pid>-<n>`` with loopback and a veth on the bridge (``10.N.x.y/16``), so
its containers share ``localhost`` and its own IP as a pod's containers do. Service
cluster IPs are ``/32`` addresses on the bridge (``10.N.255.k``), where the node's service
proxy (:mod:`node.services`) listens. There is no default route: a pod reaches the node,
other pods and Services, and nothing else.

Every name carries the test process's pid, so runs of the test side by side never meet;
:meth:`Network.close` removes everything, and :meth:`Network.open` first removes what a
killed earlier run (its pid gone) left behind. Creating namespaces needs root
(:func:`available` says whether this process can).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import re
import shutil
from collections.abc import AsyncIterator

NETNS_DIR = "/run/netns"
_OURS = re.compile(r"^ah-(\d+)-\d+$")
_BRIDGE = re.compile(r"^ahb([0-9a-f]+)$")


class NetworkError(Exception):
    """An ``ip`` command failed; the message has its output."""


def available() -> str | None:
    """``None`` when this process can build the node's network, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the end-to-end test as root, as CI does)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


@dataclasses.dataclass(frozen=True)
class PodNetwork:
    """One pod's place on the node."""

    ip: str
    netns: str
    """The namespace's name; its file is ``/run/netns/<netns>``."""
    veth: str
    """The host end of the pod's veth (on the bridge)."""

    @property
    def netns_path(self) -> str:
        return f"{NETNS_DIR}/{self.netns}"


@dataclasses.dataclass
class Network:
    """The bridge, the pods' namespaces and the Service IPs of one test run."""

    subnet: ipaddress.IPv4Network
    bridge: str
    pid: int = dataclasses.field(default_factory=os.getpid)
    _pods: int = 0
    _services: int = 0
    _live: dict[str, PodNetwork] = dataclasses.field(default_factory=dict)

    @property
    def node_ip(self) -> str:
        """The node's own address: the node's servers (registry, proxies) listen here."""
        return str(self.subnet.network_address + 1)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls) -> AsyncIterator[Network]:
        """Build the bridge on a free /16; remove everything on the way out."""
        reason = available()
        if reason is not None:
            raise NetworkError(reason)
        await _remove_leftovers()
        pid = os.getpid()
        network: Network | None = None
        for attempt in range(8):
            subnet = await _free_subnet(skip=attempt)
            network = cls(subnet=subnet, bridge=f"ahb{pid:x}", pid=pid)
            # A bridge without an address of its own takes the lowest of its ports' and
            # changes it as pods come and go; every pod's ARP entry for the node would then
            # point at a MAC nobody answers to until it expires (tens of seconds of lost
            # packets to the API server). A fixed, locally administered MAC stays.
            await _ip(
                f"link add {network.bridge} address {_mac(pid)} type bridge",
                f"addr add {network.node_ip}/{subnet.prefixlen} dev {network.bridge}",
                f"link set {network.bridge} up",
            )
            # Another test run may have taken the same /16 at the same moment: keep it only
            # when this bridge is alone in it.
            if await _alone(network.bridge, subnet):
                break
            await _ip(f"link del {network.bridge}", check=False)
            network = None
        if network is None:
            raise NetworkError("no /16 for the node's bridge stayed free; too many test runs?")
        try:
            yield network
        finally:
            await network.close()

    async def attach(self) -> PodNetwork:
        """A new pod's namespace, veth and address."""
        self._pods += 1
        n = self._pods
        # 10.N.0.1 is the node and 10.N.255.0/24 holds Service IPs.
        third, fourth = divmod(n, 254)
        if third >= 255:
            raise NetworkError(f"the node ran out of pod addresses in {self.subnet}")
        ip = str(self.subnet.network_address + third * 256 + fourth + 1)
        pod = PodNetwork(ip=ip, netns=f"ah-{self.pid}-{n}", veth=f"ah{self.pid:x}v{n}")
        await _ip(f"netns add {pod.netns}")
        self._live[pod.netns] = pod
        await _ip(
            f"link add {pod.veth} type veth peer name eth0 netns {pod.netns}",
            f"link set {pod.veth} master {self.bridge} up",
        )
        await _ip(
            f"addr add {ip}/{self.subnet.prefixlen} dev eth0",
            "link set eth0 up",
            "link set lo up",
            netns=pod.netns,
        )
        return pod

    async def detach(self, pod: PodNetwork) -> None:
        """Remove a pod's namespace (its veth goes with it)."""
        if self._live.pop(pod.netns, None) is not None:
            await _ip(f"netns del {pod.netns}", check=False)

    async def service_ip(self) -> str:
        """A new cluster IP, on the bridge, for the service proxy to listen on."""
        self._services += 1
        if self._services >= 255:
            raise NetworkError("the node ran out of Service IPs")
        ip = str(self.subnet.network_address + 255 * 256 + self._services)
        await _ip(f"addr add {ip}/32 dev {self.bridge}")
        return ip

    async def close(self) -> None:
        for pod in list(self._live.values()):
            await self.detach(pod)
        await _ip(f"link del {self.bridge}", check=False)


async def _ip(*commands: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip`` commands as one batch (``ip -n NETNS -batch -``)."""
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate("\n".join(commands).encode() + b"\n")
    if check and process.returncode != 0:
        raise NetworkError(f"ip {' ; '.join(commands)}: {err.decode().strip()}")
    return out.decode()


async def _show(*argv: str) -> str:
    """Output of one ``ip`` query (``ip -o ...``)."""
    process = await asyncio.create_subprocess_exec(
        "ip", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise NetworkError(f"ip {' '.join(argv)}: {err.decode().strip()}")
    return out.decode()


async def _addresses() -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) of every IPv4 address of this host."""
    found = []
    for line in (await _show("-4", "-o", "addr", "show")).splitlines():
        words = line.split()
        if len(words) > 3:
            found.append((words[1], ipaddress.ip_interface(words[3]).network))
    return found


async def _free_subnet(skip: int = 0) -> ipaddress.IPv4Network:
    """A 10.N.0.0/16 that no address of this host is in (the ``skip``-th such, counting from
    one chosen by the pid, so runs side by side start apart)."""
    used = [network for _, network in await _addresses()]
    start = os.getpid() % 128
    for offset in range(128):
        subnet = ipaddress.IPv4Network(f"10.{64 + (start + offset) % 128}.0.0/16")
        if not any(subnet.overlaps(other) for other in used):
            if skip == 0:
                return subnet
            skip -= 1
    raise NetworkError("no free 10.N.0.0/16 for the node's bridge")


async def _alone(bridge: str, subnet: ipaddress.IPv4Network) -> bool:
    return all(
        name == bridge or not subnet.overlaps(network) for name, network in await _addresses()
    )


async def _remove_leftovers() -> None:
    """Namespaces and bridges of earlier runs whose process is gone (a killed test run)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(NETNS_DIR):
            found = _OURS.match(name)
            if found and not alive(int(found.group(1))):
                await _ip(f"netns del {name}", check=False)
    for line in (await _show("-o", "link", "show", "type", "bridge")).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        found = _BRIDGE.match(name)
        if found and not alive(int(found.group(1), 16)):
            await _ip(f"link del {name}", check=False)


def _mac(pid: int) -> str:
    """A locally administered unicast MAC address for the bridge of test run ``pid``."""
    octets = [0x02, 0xAE, *(pid & 0xFFFFFFFF).to_bytes(4, "big")]
    return ":".join(f"{o:02x}" for o in octets)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (a test run's, whose leftovers must stay)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
