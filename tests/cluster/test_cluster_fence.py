"""A default-deny cell: the network attacks of issue #16, replayed against what ships.

Before, the default chart rendered no NetworkPolicy: a cell reached the cloud metadata server,
the API server, the operator's ``/metrics`` (every tenant's run names and pass rates) and
other pods, and each gateway's admin listener bound ``0.0.0.0:15000``, so another run's target
could push refusal records into its ledger. Here the chart is rendered with its defaults, the
operator is started with the arguments the chart gives it, against the API emulator, and the
policies it creates and the chart renders are asked packet by packet
(:mod:`netpol_support`) whether each attack would pass. The gateway a cell runs is started as
a process from the cell's own manifest, and its sockets are read from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from agent_health.cluster import operator, options
from agent_health.cluster.cells import cellgateway, cellpod, manifests, netpol
from agent_health.ledger import chain, podlog, records
from support.netpol_support import Address, Pod, connects, egress_allowed, ingress_allowed
from support.operator_support import NETWORK_POLICIES, Kubelet, cluster, kubelet, listing, until
from support.ship_support import NAMESPACE, by_kind, helm, one, render
from test_cluster_isolation import SETTINGS, _digests, _run, _runspec

API_SERVER = "203.0.113.10"  # a control plane on a public address, as GKE's public endpoint
PROVIDER = "198.51.100.7"  # the target's model provider
TEST_ID = "suite/rca.py::payment rca"
OPERATOR_LABELS = {
    "app.kubernetes.io/name": "agent-health",
    "app.kubernetes.io/instance": "evals",
    "app.kubernetes.io/component": "operator",
}
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"}, "10.0.9.9")
DNS = Pod("kube-system", {"k8s-app": "kube-dns"}, "10.0.0.10")


def _chart(*values: str) -> tuple[list[dict[str, Any]], list[str], dict[str, str]]:
    """The chart's documents, and its operator's arguments and literal environment."""
    documents = render(helm(), None, *values)
    container = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return documents, container["args"][1:], env


def _options(argv: list[str], env: dict[str, str], k8s: Any, judge_addr: str) -> options.Options:
    """The chart's operator options; only what a test process cannot have is replaced."""
    parser = argparse.ArgumentParser()
    options.add_arguments(parser, env)
    chosen = options.from_args(parser.parse_args(argv))
    test = k8s.options()
    return dataclasses.replace(
        chosen,
        controller_image=test.controller_image,
        gateway_image=test.gateway_image,
        metrics_addr=test.metrics_addr,
        judge_addr=judge_addr,
        health_addr=test.health_addr,
        insecure_registries=test.insecure_registries,
        judge_cache=None,
        stuck_grace=test.stuck_grace,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cell_of(run: str) -> Pod:
    return Pod(
        "default",
        {
            manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
            manifests.LABEL_RUN: run,
            manifests.LABEL_COMPONENT: "cell",
        },
        "10.0.1.5",
    )


@pytest.mark.slow
async def test_the_default_chart_fences_cells_from_metadata_the_api_server_metrics_and_pods() -> (
    None
):
    documents, argv, env = _chart(
        "--set", "cellNetworkPolicy.egress[0].cidr=0.0.0.0/0",
        "--set", "cellNetworkPolicy.egress[0].ports[0]=443",
        "--set", "cellNetworkPolicy.egress[1].cidr=::/0",
        "--set-json", 'operator.ledgerAllow=["configmap://{namespace}/","s3://ledgers/"]',
    )  # fmt: skip
    assert "--network-policy" in argv  # on by default now
    chart_policies = by_kind(documents, "NetworkPolicy")
    for policy in chart_policies:
        assert kubernetes_validate.validate(policy, "1.31", strict=True) == "1.31"
    tests = listing((TEST_ID, ["category:RCA"]))
    ledger = "configmap://default/triage-ledger-{run}"
    async with cluster() as k8s:
        endpoints = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [
                {
                    "addresses": [{"ip": API_SERVER}],
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
                }
            ],
        }
        answer = await k8s.client.post("/api/v1/namespaces/default/endpoints", json=endpoints)
        assert answer.status_code == 201, answer.text
        judge_port = _free_port()
        chosen = _options(argv, env, k8s, judge_addr=f"127.0.0.1:{judge_port}")
        fake = Kubelet(k8s, tests, ledger, outcome=lambda _: "hold")
        async with kubelet(fake), operator.running(chosen, k8s.connection(), environ={}):
            runspec, run = k8s.example(ledger=ledger)
            run["spec"] |= {"repeats": 1, "selection": {}}
            await k8s.apply(runspec)
            await k8s.apply(run)
            objects, s3 = k8s.example(ledger="s3://ledgers/runs")
            objects["metadata"]["name"] = "objects"
            s3["metadata"]["name"] = "objects-nightly"
            s3["spec"] |= {"runSpecRef": {"name": "objects"}, "repeats": 1, "selection": {}}
            await k8s.apply(objects)
            await k8s.apply(s3)
            await until(lambda: len(_policies(k8s)) == 4, "two runs' and two RunSpecs' policies")
            await until(lambda: len(fake.held) >= 1, "a running cell")
        created = _policies(k8s)
        order = [_created_kind(r) for r in k8s.operator_requests()]
    for policy in created:
        assert kubernetes_validate.validate(policy, "1.31", strict=True) == "1.31"
    # Each discovery pod started behind its RunSpec's policy, each cell behind its run's.
    kinds = [k for k in order if k is not None]
    assert kinds.index("networkpolicies") < kinds.index("discovery")
    everything = [*created, *chart_policies]
    judge_pod = Pod(NAMESPACE, OPERATOR_LABELS, "10.0.5.5")
    for run_name in ("triage-nightly", "objects-nightly"):
        cell = _cell_of(run_name)
        other = _cell_of("someone-elses-run")

        def reach(to: Any, port: int, protocol: str = "TCP", _cell: Pod = cell) -> bool:
            return connects(everything, _cell, to, port, protocol)

        # Cloud metadata: denied, inside the declared 0.0.0.0/0 and ::/0 too.
        for address, port in (
            ("169.254.169.254", 80), ("169.254.169.254", 443), ("169.254.169.252", 988),
            ("169.254.170.23", 80), ("fd00:ec2::254", 80), ("fd00:ec2::23", 80),
        ):  # fmt: skip
            assert not reach(Address(address), port), (run_name, address, port)
        # The API server for no cell: a ConfigMap ledger's gateway logs its records, and
        # the operator stores them.
        assert not reach(Address(API_SERVER), 443), run_name
        # The operator: its judge port, never its metrics (every tenant's run names); the
        # cells' egress names the port the operator's judge listens on, the chart's ingress 8090.
        assert egress_allowed(created, cell, judge_pod, judge_port)
        assert ingress_allowed(chart_policies, judge_pod, cell, 8090)
        for port in (9090, 8080):
            assert not egress_allowed(created, cell, judge_pod, port)
        assert not ingress_allowed(chart_policies, judge_pod, cell, 9090)
        # Another run's cell: nothing gets in (its gateway, its target, its peers).
        for port in (8080, 9000, 15000, 15001):
            assert not connects(everything, other, cell, port)
        # What the cell needs: DNS, and the declared provider.
        assert reach(DNS, 53, "UDP")
        assert reach(Address(PROVIDER), 443)
        assert not reach(Address(PROVIDER), 80)  # declared on 443 only
    # Prometheus scrapes the operator; a cell cannot, even with a wide-open egress of its own.
    assert connects(everything, PROMETHEUS, judge_pod, 9090)
    assert not connects(chart_policies, _cell_of("x"), judge_pod, 9090)
    # A discovery pod imports the tenant's suite: it reaches nothing at all.
    discovery = Pod(
        "default",
        {
            manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
            manifests.LABEL_RUNSPEC: "triage",
            manifests.LABEL_COMPONENT: "discovery",
        },
    )
    for to, port in ((Address("169.254.169.254"), 80), (Address(API_SERVER), 443), (DNS, 53)):
        assert not egress_allowed(created, discovery, to, port)


def _policies(k8s: Any) -> list[dict[str, Any]]:
    kind = k8s.emulator.store.kinds[(NETWORK_POLICIES.group, NETWORK_POLICIES.plural)]
    return list(k8s.emulator.store.list(kind, "default", lambda _labels: True))


def _created_kind(request: Any) -> str | None:
    """``networkpolicies``, ``discovery`` or ``cell`` for a create the operator sent."""
    if request.method.value != "POST" or request.resource is None:
        return None
    if request.resource.plural == "networkpolicies":
        return "networkpolicies"
    if request.resource.plural == "pods":
        labels = (request.data or {}).get("metadata", {}).get("labels", {})
        return str(labels.get(manifests.LABEL_COMPONENT))
    return None


def test_a_declared_block_keeps_its_own_address_and_loses_the_rest() -> None:
    carved = netpol.carve(
        "0.0.0.0/0", [*netpol.METADATA, f"{API_SERVER}/32"], excluded=["10.0.0.0/8"]
    )
    assert "169.254.169.254/32" in carved
    assert f"{API_SERVER}/32" in carved
    assert "fd00:ec2::254/128" not in carved  # another family
    assert netpol.carve("169.254.169.254/32", netpol.METADATA) == []  # declared exactly
    assert netpol.carve("169.254.0.0/16", netpol.METADATA) == [
        "169.254.169.254/32", "169.254.169.252/32", "169.254.170.2/32", "169.254.170.23/32",
    ]  # fmt: skip
    assert netpol.carve("10.0.0.0/8", ["10.1.2.3/32"], excluded=["10.1.0.0/16"]) == []


def test_the_chart_renders_the_operators_own_policy_with_metrics_for_prometheus_only() -> None:
    documents, _, _ = _chart(
        "--set", "operatorNetworkPolicy.metricsFrom[0].namespaceSelector.matchLabels"
        ".kubernetes\\.io/metadata\\.name=monitoring",
    )  # fmt: skip
    policies = by_kind(documents, "NetworkPolicy")
    judge_pod = Pod(NAMESPACE, OPERATOR_LABELS, "10.0.5.5")
    tenant = Pod("team-a", {"app": "dashboard"})
    assert connects(policies, PROMETHEUS, judge_pod, 9090)
    assert not connects(policies, tenant, judge_pod, 9090)  # only the monitoring namespace
    assert not connects(policies, _cell_of("x"), judge_pod, 9090)
    assert connects(policies, _cell_of("x"), judge_pod, 8090)  # the judge, through a gateway
    assert not connects(policies, tenant, judge_pod, 8090)
    assert connects(policies, Address("10.0.0.1"), judge_pod, 8080)  # the kubelet's probes
    off = by_kind(_chart("--set", "operatorNetworkPolicy.enabled=false")[0], "NetworkPolicy")
    assert off == []


# --- the gateway a cell runs listens on nothing another pod can reach ---------------------


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, size in (("tcp", 8), ("tcp6", 32)):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)  # 32-bit words in the host's (little-endian) order
            ip = ipaddress.ip_address(
                b"".join(raw[i : i + 4][::-1] for i in range(0, size // 2, 4))
            )
            found.append((str(ip), int(port, 16)))
    return found


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@contextlib.contextmanager
def _sockets_dir() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix=f"ah-fence-{os.getpid()}-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow
async def test_the_cells_gateway_listens_on_loopback_alone_and_its_probe_passes(
    tmp_path: Path,
) -> None:
    """The gateway container of a cell, started as its manifest says (paths moved into a
    temporary directory, loopback ports 0): every TCP listener is on 127.0.0.1, the admin
    socket answers the kubelet's exec probe, and no port is left for another pod to push to."""
    spec = _runspec(isolation={"mode": "pod"})
    pod = cellpod.cell_pod(
        _run(), spec, test_id=TEST_ID, repeat=0, digests=_digests(spec), settings=SETTINGS
    )
    gateway = next(c for c in pod["spec"]["initContainers"] if c["name"] == cellgateway.NAME)
    with _sockets_dir() as root:
        args = []
        for arg in gateway["args"]:
            arg = arg.replace("/var/run/agent-health/", f"{root}/")
            arg = re.sub(r"listen=127\.0\.0\.1:\d+", "listen=127.0.0.1:0", arg)
            args.append(arg)
        assert "--ledger-log" in args  # a ConfigMap ledger's gateway logs its records
        _write(Path(args[args.index("--key-file") + 1]), "k" * 32)  # the cell's ledger key
        for i, arg in enumerate(args):  # each principal's token file, as the kubelet mounts
            if args[i - 1] == "--token":
                _write(Path(arg.split("=", 1)[1]), f"token-of-{arg.split('=')[0]}-" + "x" * 32)
        (root / "gateway").mkdir()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent_health.gateway", *args[1:],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            command = gateway["startupProbe"]["exec"]["command"]
            probe = [sys.executable if c == "python" else c for c in command]
            probe[-1] = probe[-1].replace("/var/run/agent-health/", f"{root}/")

            async def probed() -> bool:
                done = await asyncio.create_subprocess_exec(
                    *probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                return await done.wait() == 0

            for _ in range(600):
                if process.returncode is not None:
                    assert process.stderr is not None
                    raise AssertionError((await process.stderr.read()).decode())
                if await probed():
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the gateway's startup probe never passed")
            listening = _listening(process.pid)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            assert process.stdout is not None
            logged = (await process.stdout.read()).decode()
            await asyncio.wait_for(process.wait(), 30)
    # Its standard output is its cell's ledger alone, framed: the cell-meta it opened with,
    # closed by an end frame when it stopped (no cell-end: the cell never ran).
    cell = args[args.index("--cell") + 1]
    assert all(line.startswith(f"{podlog.MARKER} ") for line in logged.splitlines()), logged
    lines = podlog.extract(logged, cell)
    assert [records.parse_line(line).kind for line in lines] == ["cell-meta"]
    assert chain.verify(lines, b"k" * 32, complete=False).ok
    routes = [a for a in gateway["args"] if "listen=127.0.0.1:" in a]
    assert len(routes) == 2  # target → peer:logs and peer:logs → target
    # ... and the receiver of the target's OTLP spans, on loopback too.
    otlp = gateway["args"][gateway["args"].index("--otlp-listen") + 1]
    assert len(listening) == len(routes) + 1
    assert ("127.0.0.1", int(otlp.rpartition(":")[2])) in listening
    assert {address for address, _ in listening} == {"127.0.0.1"}
