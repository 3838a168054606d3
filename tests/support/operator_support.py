"""A cluster for operator tests and the scale benchmark: the emulator, a registry, a kubelet.

* :class:`Cluster` — the kmock-based API server with the CRDs applied, a registry v2 fake on
  loopback, and an httpx client that speaks as ``Bearer kubelet`` (the operator speaks as
  ``Bearer operator``, so the request log tells the two apart).
* :class:`Kubelet` — plays the kubelet and each cell's gateway: a discovery pod ends with
  the ``list --json`` listing as its termination message (and, when it runs MCP peers, its
  ``tools`` container with the ``mcp tools`` listing of :attr:`Kubelet.mcp_tools`); a cell
  pod runs, its ledger is sealed with the cell's key (read from the Secret the operator
  created) and the pod ends. A gateway told ``--ledger-log`` (a ConfigMap ledger) writes its
  records to its log, which the kubelet serves as the API server's ``pods/NAME/log``; any
  other writes its ledger.
  What each cell does is scripted per (test id, repeat).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import io
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import kopf
import yaml
from agent_health.cluster import operator
from agent_health.cluster import options as options_mod
from agent_health.cluster.api import crds
from agent_health.cluster.cells import cellgateway, cellsecrets, ledgerurl, manifests
from agent_health.cluster.reconcile import secretrefs
from agent_health.gateway import recorder
from agent_health.ledger import assignment, backends, chain, keys, podlog, records, spool, store
from agent_health.sdk import results
from aiohttp import web

from support import ledger_support
from support.kube import Emulator, Kind, rbac, serve
from support.kube import store as kube_store

GROUP = "agenthealth.dev/v1alpha1"
RUNSPECS = "/apis/agenthealth.dev/v1alpha1/namespaces/default/runspecs"
RUNS = "/apis/agenthealth.dev/v1alpha1/namespaces/default/evaluationruns"
PODS = "/api/v1/namespaces/default/pods"
EXAMPLE = Path(__file__).parents[2] / "examples" / "run.yaml"
T0 = datetime(2025, 1, 1, tzinfo=UTC)
PINNED = "@sha256:" + "c" * 64
COMPONENT = manifests.LABEL_COMPONENT
EXAMPLE_SECRETS = ("judge-credentials", "triage-agent-llm")
"""The Secrets ``examples/run.yaml`` names, created (offered to runs) in every test cluster."""
NETWORK_POLICIES = Kind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")


async def until(check: Callable[[], Any], what: str, attempts: int = 2000) -> Any:
    """Poll ``check`` until it is truthy, a bounded number of times (a count, not a clock)."""
    for _ in range(attempts):
        found = check()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


def finished(k8s: Cluster, name: str) -> dict[str, Any] | None:
    """The EvaluationRun's status once it is Succeeded or Failed, else None (for :func:`until`)."""
    status = dict(k8s.run(name).get("status") or {})
    return status if status.get("phase") in ("Succeeded", "Failed") else None


def condition(status: dict[str, Any], type: str) -> dict[str, Any]:
    """The condition of ``type`` in a status."""
    return next(c for c in status.get("conditions", []) if c["type"] == type)


OCI = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}


@dataclasses.dataclass
class Registry:
    """A registry v2 fake: every tag exists, except in repositories listed in ``missing``; a
    manifest asked for by digest exists once a tag has resolved to that digest."""

    missing: set[str] = dataclasses.field(default_factory=set)
    host: str = ""
    served: dict[tuple[str, str], bytes] = dataclasses.field(default_factory=dict)
    """(repository, digest) → the manifest served under it."""
    asked: list[str] = dataclasses.field(default_factory=list)
    """Every ``name:ref`` asked for, in order."""

    async def manifest(self, request: web.Request) -> web.Response:
        name, ref = request.match_info["name"], request.match_info["ref"]
        self.asked.append(f"{name}:{ref}")
        unknown = web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        if name in self.missing:
            return unknown
        if ref.startswith("sha256:"):
            found = self.served.get((name, ref))
            if found is None:
                return unknown
            return web.Response(body=found, headers={"Docker-Content-Digest": ref, **OCI})
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI["Content-Type"], "name": name, "ref": ref}
        ).encode()
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
        self.served[(name, digest)] = body
        return web.Response(body=body, headers={"Docker-Content-Digest": digest, **OCI})


def _died(name: str, reason: str, exit_code: int) -> dict[str, Any]:
    """A sidecar the kubelet restarted once: its first instance ended with ``reason``."""
    return {
        "name": name,
        "restartCount": 1,
        "state": {"terminated": {"exitCode": 143, "reason": "Error"}},
        "lastState": {"terminated": {"exitCode": exit_code, "reason": reason}},
    }


def _crash_loop(name: str) -> dict[str, Any]:
    """A sidecar that keeps dying: restarted 3 times, now waiting in CrashLoopBackOff."""
    return {
        "name": name,
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
    }


# Outcomes whose pod ends with a passing ledger but a sidecar that died during the cell.
SIDECAR_DEATHS: dict[str, list[dict[str, Any]]] = {
    "target-oom": [_died("target", "OOMKilled", 137)],
    "target-crash": [_died("target", "Error", 1)],
    "gateway-restart": [_died("gateway", "Error", 2)],
}


def _gateway_args(pod: dict[str, Any]) -> list[str]:
    gateway = next(
        (c for c in pod["spec"].get("initContainers") or [] if c["name"] == "gateway"), {}
    )
    return list(gateway.get("args") or [])


@contextlib.asynccontextmanager
async def registry_server(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[Registry]:
    """The fake on ``host:port`` (loopback and a free port unless told otherwise)."""
    fake = Registry()
    app = web.Application()
    app.router.add_route("*", "/v2/{name:.+}/manifests/{ref}", fake.manifest)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    fake.host = f"{host}:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()


@dataclasses.dataclass
class Cluster:
    emulator: Emulator
    url: str
    client: httpx.AsyncClient
    registry: Registry

    def connection(self) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=self.url, insecure=True, token="operator")

    def options(self, **more: Any) -> options_mod.Options:
        image = f"{self.registry.host}/agent-health"
        fields: dict[str, Any] = {
            "controller_image": f"{image}/controller{PINNED}",
            "gateway_image": f"{image}/gateway{PINNED}",
            "metrics_addr": "127.0.0.1:0",
            "judge_addr": "127.0.0.1:0",
            "health_addr": "127.0.0.1:0",
            "judge_service_url": "http://agent-health-judge.agent-health.svc:8090",
            "insecure_registries": (self.registry.host,),
            "stuck_grace": 0.0,
        }
        return options_mod.Options(**(fields | more))

    def operator(
        self, *, environ: dict[str, str] | None = None, **more: Any
    ) -> contextlib.AbstractAsyncContextManager[operator.Operator]:
        return operator.running(self.options(**more), self.connection(), environ=environ or {})

    def operator_requests(self) -> list[Any]:
        return [r for r in self.emulator if r.headers.get("Authorization") == "Bearer operator"]

    def example(self, *, isolation: str = "pod", ledger: str | None = None) -> list[dict[str, Any]]:
        """``examples/run.yaml`` with images from the fake registry."""
        runspec, run = yaml.safe_load_all(EXAMPLE.read_text())
        spec = runspec["spec"]
        for part in (spec["target"], *spec["peers"]):
            part["image"] = part["image"].replace("ghcr.io", self.registry.host)
        spec["isolation"] = (
            {"mode": isolation}
            if isolation == "pod"
            else {"mode": isolation, "runtimeClassName": "gvisor"}
        )
        if ledger is not None:
            spec["ledger"] = {"url": ledger}
        return [runspec, run]

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        path = RUNSPECS if body["kind"] == "RunSpec" else RUNS
        answer = await self.client.post(path, json=body)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    def run(self, name: str) -> dict[str, Any]:
        return self.emulator.read("evaluationruns.agenthealth.dev", "default", name)

    def runspec(self, name: str) -> dict[str, Any]:
        return self.emulator.read("runspecs.agenthealth.dev", "default", name)

    def cell_secret(self, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The Secret a cell pod mounts its tokens and ledger key from, and the pod's own
        items in it (named as in a Secret of its own: ``controller``, ``ledger-key``...)."""
        place = cellsecrets.place_of(pod)
        assert place is not None, f"{pod['metadata']['name']} mounts no token"
        secret = self.emulator.read("secrets", pod["metadata"]["namespace"], place.secret)
        own = {
            key.removeprefix(place.prefix): base64.b64decode(value)
            for key, value in secret["data"].items()
            if key.startswith(place.prefix)
        }
        return secret, own

    def pods(self, component: str = "cell") -> list[dict[str, Any]]:
        kind = self.emulator.store.kinds[("", "pods")]
        found = self.emulator.store.list(kind, "default", lambda _labels: True)
        labels = manifests.LABEL_COMPONENT
        return [p for p in found if p["metadata"].get("labels", {}).get(labels) == component]


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    async with (
        serve() as (emulator, url),
        registry_server() as fake,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer kubelet"}, timeout=120
        ) as client,
    ):
        emulator.serve(NETWORK_POLICIES)
        for definition in crds.definitions():
            answer = await client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=definition
            )
            assert answer.status_code == 201, answer.text
        for name in EXAMPLE_SECRETS:  # what README has a user create for examples/run.yaml
            answer = await client.post(
                "/api/v1/namespaces/default/secrets", json=offered_secret(name, "default")
            )
            assert answer.status_code == 201, answer.text
        yield Cluster(emulator, url, client, fake)


def offered_secret(name: str, namespace: str, *, offered: bool = True) -> dict[str, Any]:
    """A tenant's Secret with an API key, labelled as offered to runs (or not)."""
    labels = {secretrefs.LABEL: secretrefs.OFFERED} if offered else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"api-key": base64.b64encode(b"sk-tenant").decode()},
    }


# -- what a cell records -------------------------------------------------------------------


def listing(*tests: tuple[str, list[str]]) -> list[dict[str, Any]]:
    """``agent-health list --json`` output for tests given as (id, labels)."""
    return [
        {
            "id": test_id,
            "name": test_id.split("::")[-1],
            "title": test_id.split("::")[-1],
            "file": test_id.split("::")[0],
            "line": 1,
            "labels": labels,
            "mode": "run",
            "content_hash": hashlib.sha256(test_id.encode()).hexdigest()[:16],
        }
        for test_id, labels in tests
    ]


def cell_records(
    test_id: str,
    repeat: int,
    cell: str,
    passed: bool,
    *,
    ledger_cell: str | None = None,
    attempt: int | None = None,
) -> list[records.Record]:
    """A cell's ledger as a real one looks: meta, exchanges, run result, signals, end."""
    gate = results.Signal(
        kind="deterministic",
        role="gate",
        name="to_have_called_tool(search_logs)",
        passed=passed,
        score=float(passed),
    )
    return [
        records.CellMeta(
            test_id=test_id,
            repeat=repeat,
            run_id=cell,
            started_at=T0,
            cell=ledger_cell,
            attempt=attempt,
        ),
        ledger_support.exchange(evidence="tok", started_at=T0, ended_at=T0, request_bytes=12),
        # The tool call the trajectory claims, as the gateway saw it on its way to the peer
        # that serves it (the example's peer declares its tools: a claim is held to this).
        ledger_support.exchange(
            principal="target",
            upstream="peer:logs",
            method="GET",
            path="/search_logs?q=pay",
            started_at=T0,
            ended_at=T0,
        ),
        records.RunResultRecord(
            run_id=cell,
            prompt="Diagnose the payment service.",
            output="payment-service cannot reach db-primary",
            trajectory=[
                {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"q": "pay"}},
                {"type": "assistant", "content": "payment-service cannot reach db-primary"},
            ],
            token_usage={"prompt": 300, "completion": 40},
            duration_ms=1500.0,
        ),
        records.SignalRecord(signal=gate.model_dump(mode="json")),
        records.CellEnd(
            status="passed" if passed else "failed",
            exit_code=0 if passed else 1,
            duration_ms=2000.0,
        ),
    ]


def mcp_claim_records(
    test_id: str,
    repeat: int,
    cell: str,
    *,
    made: bool,
    ledger_cell: str | None = None,
    attempt: int | None = None,
) -> list[records.Record]:
    """A cell whose agent claims a call of ``get_current_time``, a tool of its MCP peer
    ``time``: the gateway saw the target start a session with that peer (an ``initialize``
    POST), and, when the call was ``made``, read its ``tools/call``."""
    claim = results.Signal(
        kind="deterministic", role="gate", name="to_have_called_tool('get_current_time')",
        passed=True, score=1.0, evidence={"expected": {"tool": "get_current_time"}},
    )  # fmt: skip
    base = cell_records(test_id, repeat, cell, True, ledger_cell=ledger_cell, attempt=attempt)
    meta, to_target = base[0], base[1]
    session = records.Exchange(
        principal="target", evidence="none", upstream="peer:time", method="POST", path="/mcp",
        status=200, started_at=T0, ended_at=T0, request_bytes=80, request_sha256="0" * 64,
    )  # fmt: skip
    call = records.McpRecord(
        principal="target", server="peer:time", method="tools/call", id=1,
        name="get_current_time", arguments={"timezone": "UTC"}, status=200,
        result={"content": [{"type": "text", "text": "12:00"}]}, is_error=False,
        started_at=T0, ended_at=T0,
    )  # fmt: skip
    run = records.RunResultRecord(
        run_id=cell, prompt="What time is it?", output="12:00",
        trajectory=[{"type": "tool_call", "tool_name": "get_current_time",
                     "tool_args": {"timezone": "UTC"}}],
        duration_ms=10.0,
    )  # fmt: skip
    return [
        meta, to_target, session, *([call] if made else []), run,
        records.SignalRecord(signal=claim.model_dump(mode="json")),
        records.CellEnd(status="passed", exit_code=0, duration_ms=20.0),
    ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Cell:
    """A cell pod as the kubelet sees it."""

    name: str
    run: str
    test_id: str
    repeat: int
    attempt: int
    ledger_cell: str
    """Where this attempt's gateway records: its ``--cell`` argument."""
    ledger: str | None
    """The ledger URL its gateway writes to: its ``--ledger`` argument (``None``: its log)."""
    key_secret: str
    """The Secret holding the key the gateway seals with (its ``ledger-key`` volume)."""
    key_item: str
    service_account: str | None = None
    """The ServiceAccount the pod runs as: whose token its gateway writes the ledger with."""
    pod: str = ""
    """The pod's name, when it is not the cell's (a pooled sandbox's)."""
    key: bytes | None = None
    """The ledger key, when the pod was not given it in a Secret (a pooled cell unwraps it)."""
    caps: tuple[int | None, int | None] = (None, None)
    """The exchanges and bytes its gateway may record (``--max-cell-exchanges``/``-bytes``)."""

    @property
    def pod_name(self) -> str:
        return self.pod or self.name

    @classmethod
    def assigned(cls, pod: dict[str, Any], handed: assignment.Assignment, key: bytes) -> Cell:
        """A pooled pod's cell, once the operator wrote its assignment on the pod."""
        ledger = handed.ledger
        return cls(
            name=handed.cell,
            run=handed.evaluation_run,
            test_id=handed.test_id,
            repeat=handed.repeat,
            attempt=handed.attempt,
            ledger_cell=handed.ledger_cell,
            ledger=None if ledger is None or ledgerurl.collected(ledger) else ledger,
            key_secret="",
            key_item="",
            service_account=pod["spec"].get("serviceAccountName"),
            pod=pod["metadata"]["name"],
            key=keys.unwrap_cell_key(key, handed.ledger_cell, handed.ledger_key),
            caps=(handed.max_cell_exchanges, handed.max_cell_bytes),
        )

    @classmethod
    def of(cls, pod: dict[str, Any]) -> Cell:
        meta = pod["metadata"]
        gateway = next(c for c in pod["spec"]["initContainers"] if c["name"] == "gateway")
        args = gateway["args"]
        key = next(v for v in pod["spec"]["volumes"] if v["name"] == "ledger-key")
        return cls(
            name=meta["name"],
            run=meta["ownerReferences"][0]["name"],
            test_id=meta["annotations"][manifests.ANNOTATION_TEST_ID],
            repeat=int(meta["labels"][manifests.LABEL_REPEAT]),
            attempt=int(args[args.index("--attempt") + 1]),
            ledger_cell=args[args.index("--cell") + 1],
            ledger=args[args.index("--ledger") + 1] if "--ledger" in args else None,
            key_secret=key["secret"]["secretName"],
            key_item=key["secret"]["items"][0]["key"],
            service_account=pod["spec"].get("serviceAccountName"),
            caps=(_int_arg(args, "--max-cell-exchanges"), _int_arg(args, "--max-cell-bytes")),
        )


def _int_arg(args: list[str], flag: str) -> int | None:
    return int(args[args.index(flag) + 1]) if flag in args else None


@dataclasses.dataclass
class Kubelet:
    """Drives pods to their end, event by event, from the emulator's own change stream."""

    cluster: Cluster
    tests: list[dict[str, Any]]
    ledger_url: str | None
    """Where cells record; ``None`` (or a template with ``{run}``): where each pod's gateway
    is told to (``--ledger``)."""
    outcome: Callable[[Cell], str] = lambda _cell: "passed"
    """A new cell → "passed", "failed", "evicted", "tampered" (a ledger sealed with another
    key), "log-cut" (its gateway's log lost its last lines: a logging ledger only),
    "flood" / "flood-failed" (its target calls its peer with 8 KiB paths until its gateway's
    caps are full, then its test passes / fails: a logging ledger only), "mcp-claimed" /
    "mcp-made" (its agent claims a call of its MCP peer's tool, which the gateway did not /
    did read: :func:`mcp_claim_records`), "hold"
    (keeps running until :meth:`release`), "never-starts" (no status ever),
    "crashloop:CONTAINER" (a sidecar restarting over and over) or a sidecar death."""
    mcp_tools: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """What a discovery pod's ``tools`` container prints per MCP peer: ``{"tools": [...]}``
    or ``{"error": "..."}`` (``agent-health mcp tools``)."""
    seen: list[str] = dataclasses.field(default_factory=list)
    held: dict[str, Cell] = dataclasses.field(default_factory=dict)
    cell_seconds: float = 0.0
    """How long each cell runs before it ends."""
    namespace: str = "default"
    spool: Path | None = None
    """Record each cell as its gateway does — its recorder, spooling the cell under this
    directory and writing it at its end, through a backend of its own (the scale
    benchmark); ``None``: append the whole cell in one batch."""
    created: list[float] = dataclasses.field(default_factory=list)
    """When each pod was first seen ungated, to be run (the loop's clock), in order."""
    started: list[str] = dataclasses.field(default_factory=list)
    """The pods run, by name, in the order the kubelet took them (once ungated)."""
    logs: dict[str, bytes] = dataclasses.field(default_factory=dict)
    assignments: dict[str, assignment.Assignment] = dataclasses.field(default_factory=dict)
    """Pooled pod name → the cell the operator handed it (each pod gets one at most)."""
    """Pod name → its gateway container's log (what ``pods/NAME/log`` serves)."""
    container_logs: dict[tuple[str, str], bytes] = dataclasses.field(default_factory=dict)
    """(pod, container) → another container's log."""
    _backends: dict[tuple[str, str], store.Backend] = dataclasses.field(default_factory=dict)
    _slots: asyncio.Semaphore = dataclasses.field(default_factory=lambda: asyncio.Semaphore(16))

    def backend(self, url: str | None = None, service_account: str | None = None) -> store.Backend:
        # A template ({run}) is filled in per run: the pod's --ledger says how.
        fixed = self.ledger_url if self.ledger_url and "{" not in self.ledger_url else None
        chosen = fixed or url
        assert chosen is not None, "a Kubelet without ledger_url needs the pod's --ledger"
        # It writes the ledger as the cell's gateway would: with the pod's ServiceAccount's
        # token (RBAC-checked by the emulator), or "gateway" for a pod that runs as none.
        token = (
            rbac.service_account_token(self.namespace, service_account)
            if service_account
            else "gateway"
        )
        if (chosen, token) not in self._backends:
            options = store.Options(kube_api_url=self.cluster.url, kube_token=token)
            self._backends[(chosen, token)] = backends.from_url(chosen, options)
        return self._backends[(chosen, token)]

    def log(self, namespace: str, name: str, params: dict[str, str]) -> bytes:
        """``GET pods/NAME/log`` as a kubelet answers it: the gateway container's output, or
        a discovery pod's ``tools`` container's."""
        if (name, params.get("container")) in self.container_logs:
            return self.container_logs[(name, str(params.get("container")))]
        if params.get("container") != "gateway" or name not in self.logs:
            raise kube_store.ApiError(
                400, "BadRequest", f"container {params.get('container')} of pod {name} has no log"
            )
        log = self.logs[name]
        limit = int(params.get("limitBytes") or 0)
        return log[:limit] if limit else log

    async def run(self) -> None:
        """Serve pod events until cancelled; each new pod is played in a task of its own."""
        self.cluster.emulator.logs = self.log
        store = self.cluster.emulator.store
        kind = store.kinds[("", "pods")]
        handled: set[tuple[str, str]] = set()
        playing: dict[tuple[str, str], asyncio.Task[None]] = {}
        try:
            async for event in store.watch(
                kind,
                self.namespace,
                lambda _l: True,
                since=None,
                initial_bookmark=False,
                timeout=None,
            ):
                body = event["object"]
                meta = body["metadata"]
                key = (meta["name"], meta.get("uid", ""))
                phase = body.get("status", {}).get("phase")
                if event["type"] == "DELETED" or meta.get("deletionTimestamp"):
                    # The pod is going: stop playing it (a kubelet kills its containers).
                    if (stopped := playing.pop(key, None)) is not None:
                        stopped.cancel()
                    self.held.pop(meta["name"], None)
                    continue
                if key in handled or phase:
                    continue
                if (body.get("spec") or {}).get("schedulingGates"):
                    continue  # the scheduler does not place a gated pod: wait for its gates
                handled.add(key)
                self.created.append(asyncio.get_running_loop().time())
                self.started.append(meta["name"])
                task = asyncio.ensure_future(self.play(body))
                playing[key] = task
                task.add_done_callback(lambda _t, key=key: playing.pop(key, None))  # type: ignore[misc]
        finally:
            for task in playing.values():
                task.cancel()

    async def play(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        component = meta.get("labels", {}).get(manifests.LABEL_COMPONENT)
        if component == "discovery":
            containers = [c["name"] for c in pod["spec"]["containers"]]
            tools = {"peers": self.mcp_tools} if "tools" in containers else None
            await self.finish(meta["name"], "Succeeded", message=json.dumps(self.tests),
                              tools=tools)  # fmt: skip
        elif component == "cell" and "--assignment" in _gateway_args(pod):
            await self.pooled(pod)
        elif component == "cell":
            await asyncio.sleep(self.cell_seconds)
            async with self._slots:
                await self.cell(pod)

    async def cell(self, pod: dict[str, Any]) -> None:
        cell = Cell.of(pod)
        await self.play_cell(cell)

    async def pooled(self, pod: dict[str, Any]) -> None:
        """A pooled sandbox's pod: ready at once (its target is up), then its cell once the
        operator wrote the assignment on it, with the key unwrapped as its gateway does."""
        name = pod["metadata"]["name"]
        ready = [{"type": "Ready", "status": "True"}]
        await self.status(name, {"phase": "Running", "podIP": "10.0.0.9", "conditions": ready})
        gateway = next(c for c in pod["spec"]["initContainers"] if c["name"] == "gateway")
        ref = next(
            v["valueFrom"]["secretKeyRef"]
            for v in gateway.get("env") or []
            if v["name"] == cellgateway.SANDBOX_KEY_ENV
        )
        while True:
            with contextlib.suppress(Exception):
                current = self.cluster.emulator.read("pods", self.namespace, name)
                text = (current["metadata"].get("annotations") or {}).get(assignment.ANNOTATION)
                if text:
                    break
            await asyncio.sleep(0.02)
        secret = self.cluster.emulator.read("secrets", self.namespace, ref["name"])
        key = base64.b64decode(secret["data"][ref["key"]])
        self.assignments[name] = assignment.Assignment.parse(text)
        await self.play_cell(Cell.assigned(current, self.assignments[name], key))

    async def play_cell(self, cell: Cell) -> None:
        self.seen.append(cell.name)
        outcome = self.outcome(cell)
        if outcome == "never-starts":  # e.g. a node that never runs it: no status at all
            self.held[cell.name] = cell
            return
        if outcome.startswith("crashloop:"):  # restarted 3 times, waiting in back-off
            name = outcome.removeprefix("crashloop:")
            phase = "Pending" if name == "gateway" else "Running"  # its startup probe failed
            looping = [_crash_loop(name)]
            await self.status(cell.pod_name, {"phase": phase, "initContainerStatuses": looping})
            self.held[cell.name] = cell
            return
        await self.status(cell.pod_name, {"phase": "Running"})
        if outcome == "hold":
            self.held[cell.name] = cell
        else:
            await self.end(cell, outcome)

    async def release(self, name: str, outcome: str = "passed") -> None:
        """End a held cell."""
        await self.end(self.held.pop(name), outcome)

    async def end(self, cell: Cell, outcome: str) -> None:
        if outcome == "evicted":
            evicted = {"phase": "Failed", "reason": "Evicted", "message": "node ran out of memory"}
            await self.status(cell.pod_name, evicted)
            return
        key = b"x" * 32 if outcome == "tampered" else cell.key or await self.ledger_key(cell)
        written = (
            mcp_claim_records(
                cell.test_id,
                cell.repeat,
                cell.name,
                made=outcome == "mcp-made",
                ledger_cell=cell.ledger_cell,
                attempt=cell.attempt,
            )
            if outcome.startswith("mcp-")
            else cell_records(
                cell.test_id,
                cell.repeat,
                cell.name,
                outcome not in ("failed", "flood-failed"),
                ledger_cell=cell.ledger_cell,
                attempt=cell.attempt,
            )
        )
        if outcome.startswith("flood"):
            assert cell.ledger is None, "a flooding cell records to its gateway's log"
            await self.gateway_log(cell, key, written, flood=True)
        elif cell.ledger is None:
            await self.gateway_log(cell, key, written, cut=outcome == "log-cut")
        elif self.spool is not None:
            await self.gateway(cell, key, written)
        else:
            backend = self.backend(cell.ledger, cell.service_account)
            await chain.Writer(backend, cell.ledger_cell, key).append(*written)
        phase = "Failed" if outcome == "failed" else "Succeeded"
        sidecars = SIDECAR_DEATHS.get(outcome, [])
        await self.finish(cell.pod_name, phase, exit_code=1, sidecars=sidecars)

    async def gateway(self, cell: Cell, key: bytes, written: list[records.Record]) -> None:
        """Record ``written`` as the cell's gateway does: open the cell with its meta, take
        each exchange as the proxy hands it over, then the controller's records."""
        assert self.spool is not None
        # Its own backend, as the cell's gateway has, speaking as the pod's ServiceAccount.
        fixed = self.ledger_url if self.ledger_url and "{" not in self.ledger_url else None
        token = (
            rbac.service_account_token(self.namespace, cell.service_account)
            if cell.service_account
            else "gateway"
        )
        options = store.Options(kube_api_url=self.cluster.url, kube_token=token)
        inner = backends.from_url(fixed or cell.ledger, options)
        backend = spool.SpooledBackend(inner, self.spool / cell.ledger_cell)
        recording = recorder.Recorder(backend, key, default_cell=cell.ledger_cell)
        meta, *rest = written
        assert isinstance(meta, records.CellMeta)
        await recording.open_cell(cell.ledger_cell, meta)
        for record in rest:
            if isinstance(record, records.Exchange):
                seen = ledger_support.seen_of(record)
                recording.start(record.run_id).finish(seen)
        await recording.append(cell.ledger_cell, *(r for r in rest if r.kind != "exchange"))
        await recording.close()
        assert not recording.failures, recording.failures

    async def gateway_log(
        self,
        cell: Cell,
        key: bytes,
        written: list[records.Record],
        *,
        cut: bool = False,
        flood: bool = False,
    ) -> None:
        """Record ``written`` as a ``--ledger-log`` gateway does (its recorder, writing to
        its log), and keep the log for ``pods/NAME/log`` (``cut``: without its last line;
        ``flood``: held to the pod's caps, the target's calls to its peer fill them first)."""
        sink = io.BytesIO()
        sink.write(b"2025-01-01 00:00:00,000 INFO gateway: controller -> target listening\n")
        caps = recorder.Caps(*cell.caps) if flood else None
        recording = recorder.Recorder(
            podlog.LogBackend(sink), key, default_cell=cell.ledger_cell, caps=caps
        )
        meta, *rest = written
        assert isinstance(meta, records.CellMeta)
        await recording.open_cell(cell.ledger_cell, meta)
        if caps is not None:
            most = caps.records if caps.bytes is None else caps.bytes // 8192
            assert most is not None, f"no caps to flood: {caps}"
            assert most < 1000, f"caps too large to flood: {caps}"
            for n in range(most + 10):
                # A flooding target's call to its peer, as the gateway observes it.
                flooding = ledger_support.seen(
                    principal="target", method="GET", path=f"/{n}" + "x" * 8192,
                    upstream="peer:logs",
                )  # fmt: skip
                recording.start(None).finish(flooding)
        for record in rest:
            if isinstance(record, records.Exchange):
                seen = ledger_support.seen_of(record)
                recording.start(record.run_id).finish(seen)
        await recording.append(cell.ledger_cell, *(r for r in rest if r.kind != "exchange"))
        await recording.close()
        assert not recording.failures, recording.failures
        log = sink.getvalue()
        self.logs[cell.pod_name] = log.rsplit(b"\n", 2)[0] + b"\n" if cut else log

    async def ledger_key(self, cell: Cell) -> bytes:
        """The key the cell's gateway has mounted: from the Secret its pod names, as the
        kubelet mounts it (waiting, as the kubelet does, until the Secret exists)."""
        for _ in range(600):
            with contextlib.suppress(Exception):
                secret = self.cluster.emulator.read("secrets", self.namespace, cell.key_secret)
                data = secret["data"][cell.key_item]
                return base64.b64decode(data)
            await asyncio.sleep(0.05)
        raise AssertionError(f"no Secret {cell.key_secret} for cell {cell.name}")

    async def status(self, name: str, status: dict[str, Any]) -> None:
        answer = await self.cluster.client.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code == 404:
            return  # deleted meanwhile (preempted, retried): nothing left to report on
        assert answer.status_code == 200, answer.text

    async def finish(
        self,
        name: str,
        phase: str,
        *,
        message: str = "",
        exit_code: int = 0,
        sidecars: list[dict[str, Any]] | None = None,
        tools: dict[str, Any] | None = None,
    ) -> None:
        container = "discover" if "-discover-" in name else "controller"
        terminated = {"exitCode": exit_code if phase == "Failed" else 0, "reason": "Completed"}
        if message:
            terminated["message"] = message
        status: dict[str, Any] = {
            "phase": phase,
            "containerStatuses": [{"name": container, "state": {"terminated": terminated}}],
        }
        if tools is not None:  # the mcp tools listing, as its log (no termination message)
            ended = {"exitCode": 0, "reason": "Completed"}
            status["containerStatuses"].append({"name": "tools", "state": {"terminated": ended}})
            self.container_logs[(name, "tools")] = json.dumps(tools).encode()
        if sidecars:
            status["initContainerStatuses"] = sidecars
        await self.status(name, status)

    async def close(self) -> None:
        for backend in self._backends.values():
            await backend.close()
        self._backends.clear()


@contextlib.asynccontextmanager
async def kubelet(kube: Kubelet) -> AsyncIterator[Kubelet]:
    task = asyncio.ensure_future(kube.run())
    try:
        yield kube
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kube.close()


def max_unfinished(emulator: Emulator, component: str = "cell") -> int:
    """The most cell pods that existed unfinished at once, replayed from the change history."""
    unfinished: set[str] = set()
    peak = 0
    for event in emulator.store.events:
        if event.kind.plural != "pods":
            continue
        meta = event.object["metadata"]
        if meta.get("labels", {}).get(manifests.LABEL_COMPONENT) != component:
            continue
        phase = event.object.get("status", {}).get("phase")
        if event.type == "DELETED" or phase in ("Succeeded", "Failed"):
            unfinished.discard(meta["name"])
        else:
            unfinished.add(meta["name"])
        peak = max(peak, len(unfinished))
    return peak


def pod_creations(emulator: Emulator) -> dict[str, int]:
    """How many times each cell pod was created (ADDED events)."""
    counts: dict[str, int] = {}
    for event in emulator.store.events:
        meta = event.object["metadata"]
        labels = meta.get("labels", {})
        if (
            event.kind.plural == "pods"
            and event.type == "ADDED"
            and labels.get(COMPONENT) == "cell"
        ):
            counts[meta["name"]] = counts.get(meta["name"], 0) + 1
    return counts
