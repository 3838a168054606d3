"""A whole cluster in the test process, for the operator's end-to-end test.

:func:`cluster` builds it: the API emulator (:mod:`kube`) behind the ``kubernetes``
Service's TLS listener, the node (:mod:`node`: bridge and network namespaces, the kubelet,
the service proxy, the Deployment and Agent Sandbox controllers), a registry stand-in at
``kind-registry:5000`` (the name the chart's kind values use) and a scripted judge model.
:meth:`Cluster.install` installs the chart as ``helm install`` would — CRDs first, then
every rendered object of ``ci/kind-values.yaml`` (plus the few ``--set`` a machine with no
internet needs) — so the operator runs as the chart's Deployment says: its arguments, its
environment (the judge key from a Secret), its ServiceAccount, probes and volumes.

Everything the cluster needs from the outside is on this host: the emulator on loopback,
the registry and the judge model on the node's bridge address.

Two runtimes (``cluster(root, runtime=...)``): ``process`` runs images as commands on this
host's files, with a registry stand-in that serves a digest for any tag; ``container`` runs
every container as a real container (:mod:`node.podman`) from the images ``make images``
built (:func:`build_images`), pushed to a real registry (Debian's docker-registry) at
``kind-registry:5000`` and pulled from it by digest by the node. On both, the operator's
image is put on the node as ``kind load`` does, under the name ``make images`` gives it
(:data:`OPERATOR_IMAGE`), and the node finds an image by exactly the name a pod asks for, as
a kind node's containerd does: the chart's kind values must ask for that name.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from agent_health.ledger import backends, chain, keys, records, store

from support import operator_support, registry_support, ship_support
from support.judge_servers import Answer, ScriptedModel
from support.kube import ApiError, Emulator, Kind, serve
from support.node import (
    controllers,
    images,
    kubelet,
    network,
    podman,
    runtime,
    sandboxpools,
    services,
)

RELEASE, NAMESPACE = "evals", "agent-health"
KIND_VALUES = ship_support.CHART / "ci" / "kind-values.yaml"
REGISTRY = "kind-registry:5000"
ROOT = Path(__file__).resolve().parents[2]
IMAGES_SCRIPT = ROOT / "scripts" / "images.py"
REGISTRY_CACHE = ROOT / ".cache" / "registry"
"""The real registry's blobs, kept between runs (an unchanged layer is not pushed again)."""
PUSHED = ("controller", "gateway", "triage-agent", "log-server", "mcp-time")
"""The images cells run, pushed to the registry; the operator's is loaded onto the node."""
OPERATOR_IMAGE: str = ship_support.images_script().chart_tags("operator")[1]
"""The operator's image as ``make images`` names it for kind, with every builder."""
JUDGE_KEY = "operator-judge-key-2b7f"
RUNSPEC_JUDGE_KEY = "runspec-judge-key-91c3"
GATEWAY_ACCOUNT = f"{RELEASE}-agent-health-cell-gateway"
EXTRA_KINDS = (
    Kind("apps", "v1", "deployments", "Deployment", status=True, short_names=("deploy",)),
    Kind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", status=True),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Kind(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
    ),
)


async def until(check: Callable[[], Any], what: str, seconds: float = 180.0) -> Any:
    """Wait for ``check`` to be truthy: a generous bound for a loaded 2-core machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        found = check()
        if found:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"gave up after {seconds:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


@dataclasses.dataclass
class Cluster:
    emulator: Emulator
    url: str
    api: httpx.AsyncClient
    net: network.Network
    node: kubelet.Kubelet
    proxy: services.ServiceProxy
    registry: operator_support.Registry | registry_support.Registry
    model: ScriptedModel
    runtime: str = "process"
    pushed: dict[str, str] = dataclasses.field(default_factory=dict)
    """With the container runtime: each pushed ``repository`` → its digest in the registry."""
    installed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """What :meth:`install` applied: the chart's rendered documents."""

    # -- objects -------------------------------------------------------------------------

    def kind(self, api_version: str, kind: str) -> Kind:
        group, _, version = api_version.rpartition("/")
        for found in self.emulator.store.kinds.values():
            if (found.group, found.version, found.kind) == (group, version, kind):
                return found
        raise KeyError(f"the emulator serves no {api_version} {kind}")

    def path(self, body: Mapping[str, Any], name: str = "") -> str:
        kind = self.kind(body["apiVersion"], body["kind"])
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        if kind.namespaced:
            base += f"/namespaces/{body['metadata'].get('namespace', 'default')}"
        return f"{base}/{kind.plural}" + (f"/{name}" if name else "")

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        answer = await self.api.post(self.path(body), json=body)
        assert answer.status_code == 201, f"creating {body['kind']}: {answer.text}"
        return dict(answer.json())

    def read(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.emulator.read(plural, namespace, name)
        except ApiError:
            return None

    def run(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.read("evaluationruns.agenthealth.dev", namespace, name) or {}

    def pods(self, namespace: str = "default", **labels: str) -> list[dict[str, Any]]:
        kind = self.emulator.store.kinds[("", "pods")]
        return [
            p
            for p in self.emulator.store.list(kind, namespace, lambda _l: True)
            if all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
        ]

    async def secret(
        self, namespace: str, name: str, *, offered: bool = False, **data: str
    ) -> None:
        """A Secret of ``data`` (``_`` in a key becomes ``-``); ``offered``: labelled for
        RunSpecs to use, as README says (``agenthealth.dev/usable-by-runs=true``)."""
        labels = {"agenthealth.dev/usable-by-runs": "true"} if offered else {}
        encoded = {
            k.replace("_", "-"): base64.b64encode(v.encode()).decode() for k, v in data.items()
        }
        await self.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "data": encoded,
            }
        )

    async def config_map(self, namespace: str, name: str, files: Mapping[str, str]) -> None:
        await self.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": dict(files),
            }
        )

    # -- the chart -------------------------------------------------------------------------

    def chart_overrides(self) -> list[str]:
        """What a cluster without internet or kube-prometheus-stack changes in the kind
        values: the judge model's URL, and no ServiceMonitor/PrometheusRule (their CRDs come
        with kube-prometheus-stack; README says to leave them off without it)."""
        return [
            f"judge.baseUrl={self.model.url}",
            "serviceMonitor.enabled=false",
            "prometheusRule.enabled=false",
        ]

    async def install(self, *more: str) -> list[dict[str, Any]]:
        """``helm install evals charts/agent-health -n agent-health -f ci/kind-values.yaml``."""
        sets = [arg for s in [*self.chart_overrides(), *more] for arg in ("--set", s)]
        documents = await asyncio.to_thread(
            ship_support.render,
            ship_support.helm(),
            "kind",
            "--include-crds",
            *sets,
        )
        crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
        for body in [*crds, *(d for d in documents if d not in crds)]:
            body = dict(body)
            if self.kind(body["apiVersion"], body["kind"]).namespaced:
                body["metadata"] = {"namespace": NAMESPACE, **body["metadata"]}
            await self.apply(body)
        self.installed = documents
        return documents

    def operator_pod(self) -> dict[str, Any] | None:
        found = self.pods(NAMESPACE, **{"app.kubernetes.io/component": "operator"})
        live = [p for p in found if (p.get("status") or {}).get("phase") == "Running"]
        return live[-1] if live else None

    def operator_ready(self) -> bool:
        pod = self.operator_pod()
        conditions = {
            c["type"]: c["status"] for c in (pod or {}).get("status", {}).get("conditions", [])
        }
        return conditions.get("Ready") == "True"

    # -- reading what cells recorded -----------------------------------------------------

    def ledger_key(self, run: str, namespace: str = "default") -> bytes:
        secret = self.read("secrets", namespace, f"{run}-ledger-key")
        assert secret is not None, f"run {run} has no ledger key Secret"
        return base64.b64decode(secret["data"]["key"])

    async def ledger(self, url: str, cell: str, key: bytes) -> list[records.Record]:
        """A cell's records, their HMAC chain verified with the cell's key (derived from the
        run's ``key``, as the operator derives it)."""
        options = store.Options(kube_api_url=self.url, kube_token="test")
        backend = backends.from_url(url, options)
        try:
            lines = await backend.read(cell)
        finally:
            await backend.close()
        verified = chain.verify(lines, keys.cell_key(key, cell))
        assert verified.ok, f"ledger cell {cell}: {verified.problem}"
        return [records.parse_line(line) for line in lines]


def runtime_unavailable(name: str) -> str | None:
    """Why this machine cannot run the end-to-end test on runtime ``name``, if it cannot."""
    reason = network.available()
    if reason is None and name == "container":
        reason = podman.available() or registry_support.available()
    return reason


def build_images() -> None:
    """``make images``' build (a quick no-op when every image is up to date and checked)."""
    done = subprocess.run(
        [sys.executable, str(IMAGES_SCRIPT), "build"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"building the images (scripts/images.py build) failed:\n{done.stderr[-4000:]}"
        )


async def push_images(address: str) -> dict[str, str]:
    """Push the cells' images to the registry at ``address``; ``repository`` → digest."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(IMAGES_SCRIPT), "push", "--registry", address, "--insecure",
         "--json", *PUSHED],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pushing the images to {address} failed:\n{done.stderr[-4000:]}")
    pushed: dict[str, str] = json.loads(done.stdout)
    return {
        reference.split("/", 1)[1].rsplit(":", 1)[0]: digest for reference, digest in pushed.items()
    }


async def derive(hub: registry_support.Registry, name: str, entrypoint: list[str] | None) -> str:
    """An image made from the example agent's, its entry point replaced (``None``: a copy),
    pushed to the registry as ``agent-health/NAME:dev``; its reference as cells name it."""

    def make() -> None:
        env = dict(os.environ)
        env.setdefault("CONTAINERS_CONF", str(podman.CONTAINERS_CONF))

        def run(*argv: str) -> str:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[:3])}: {done.stderr.strip()[-2000:]}")
            return done.stdout.strip()

        working = run("buildah", "from", "--pull=false", "localhost/agent-health/triage-agent:dev")
        try:
            if entrypoint is not None:
                run("buildah", "config", "--entrypoint", json.dumps(entrypoint), working)
            run("buildah", "commit", "--quiet", working, f"localhost/agent-health/{name}:dev")
        finally:
            run("buildah", "rm", working)
        run("skopeo", "copy", "--quiet", "--dest-tls-verify=false",
            f"containers-storage:localhost/agent-health/{name}:dev",
            f"docker://{hub.address}/agent-health/{name}:dev")  # fmt: skip

    await asyncio.to_thread(make)
    return f"{REGISTRY}/agent-health/{name}:dev"


@contextlib.asynccontextmanager
async def cluster(root: Path, runtime_name: str = "process") -> AsyncIterator[Cluster]:
    """The cluster, up and empty (namespaces, the API's Service, the CA); torn down after."""
    async with contextlib.AsyncExitStack() as stack:
        net = await stack.enter_async_context(network.Network.open())
        emulator, url = await stack.enter_async_context(serve())
        api = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer kubelet"}, timeout=60)
        )
        for kind in EXTRA_KINDS:
            emulator.serve(kind)
        answer = await api.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=controllers.SANDBOX_CRD
        )
        answer.raise_for_status()
        pools = sandboxpools.SandboxPools(emulator, api)  # warm pools (isolation.warmPool)
        await pools.install()
        port = int(REGISTRY.split(":")[1])
        pushed: dict[str, str] = {}
        node_runtime: runtime.Runtime
        hub: operator_support.Registry | registry_support.Registry
        if runtime_name == "container":
            hub = await stack.enter_async_context(
                registry_support.serve(REGISTRY_CACHE, host=net.node_ip, port=port)
            )
            pushed = await push_images(hub.address)
            containers = await stack.enter_async_context(
                podman.Podman.open(root / "containers", {REGISTRY: hub.address})
            )
            await containers.load(OPERATOR_IMAGE)
            node_runtime = containers
        else:
            hub = await stack.enter_async_context(
                operator_support.registry_server(net.node_ip, port)
            )
            puller = images.Puller(
                images.catalog(),
                hosts={"kind-registry": net.node_ip},
                insecure=frozenset({REGISTRY}),
            )
            puller.load(OPERATOR_IMAGE, "operator")
            node_runtime = runtime.Processes(puller)
        model = await ScriptedModel.start(
            "openai", host=net.node_ip, default=Answer(True, 0.9, "fine")
        )
        stack.push_async_callback(model.close)
        host, _, port = url.removeprefix("http://").partition(":")
        proxy = services.ServiceProxy(
            emulator,
            api,
            allocate=net.service_ip,
            api_server=(host, int(port)),
            extra_hosts={REGISTRY.split(":")[0]: net.node_ip},
        )
        node = kubelet.Kubelet(emulator, api, net, node_runtime, proxy, root)
        emulator.logs = node.log
        found = Cluster(
            emulator, url, api, net, node, proxy, hub, model, runtime_name, pushed
        )  # fmt: skip
        tasks = [
            asyncio.ensure_future(proxy.run()),
            asyncio.ensure_future(node.run()),
            asyncio.ensure_future(controllers.Deployments(emulator, api).run()),
            asyncio.ensure_future(controllers.Sandboxes(emulator, api).run()),
            asyncio.ensure_future(pools.run()),
        ]
        try:
            await found.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "kubernetes", "namespace": "default"},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
                }
            )
            await proxy.wait_for("default", "kubernetes")
            # (Namespace objects cannot be created on the emulator, nor are they needed.)
            for namespace in ("default", NAMESPACE, "kube-system"):
                await found.config_map(namespace, "kube-root-ca.crt", {"ca.crt": proxy.ca_pem()})
            yield found
        finally:
            await node.close()
            for task in tasks:
                task.cancel()
            emulator.store.close()  # the operator's watches end with it, not after a timeout
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def example(registry: str = REGISTRY, **changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``examples/run.yaml`` with the images the README's kind steps push."""
    runspec, run = yaml.safe_load_all(operator_support.EXAMPLE.read_text())
    spec = runspec["spec"]
    spec["target"]["image"] = f"{registry}/agent-health/triage-agent:dev"
    spec["peers"][0]["image"] = f"{registry}/agent-health/log-server:dev"
    spec |= changes
    return runspec, run


def dump(cluster: Cluster, run: str | None = None) -> str:
    """What to print when a case fails: the runs, and the pods (of ``run``) with the tail of
    each container's log."""
    lines = []
    kind = cluster.emulator.store.kinds[("agenthealth.dev", "evaluationruns")]
    for body in cluster.emulator.store.list(kind, None, lambda _l: True):
        if run is not None and body["metadata"]["name"] != run:
            continue
        status = body.get("status") or {}
        conditions = [
            f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message', '')[:200]})"
            for c in status.get("conditions") or []
        ]
        lines.append(f"EvaluationRun {body['metadata']['name']}: {status.get('phase')} "
                     f"{json.dumps(status.get('counts'))}")  # fmt: skip
        lines += [f"  {c}" for c in conditions]
        lines += [f"  test {json.dumps(t)}" for t in status.get("tests") or [] if t.get("error")]
    for pod in cluster.node.pods.values():
        labels = pod.body["metadata"].get("labels") or {}
        if labels.get("app.kubernetes.io/component") == "operator":
            for c in pod.containers.values():
                for number, ran in enumerate(c.runs):
                    tail = ran.log.read_text(errors="replace")[-2500:]
                    lines.append(
                        f"operator log (run {number}):\n    " + tail.replace("\n", "\n    ")
                    )
            continue
        if run is not None and labels.get("agenthealth.dev/run") != run:
            continue
        lines.append(f"pod {pod.namespace}/{pod.name}: {pod.phase}")
        for c in pod.containers.values():
            lines.append(f"  {c.name}: restarts {c.restarts} {json.dumps(c.state)[:300]}")
            if c.runs:
                tail = c.runs[-1].log.read_text(errors="replace")[-600:]
                lines.append("    " + tail.replace("\n", "\n    "))
    return "\n".join(lines)
