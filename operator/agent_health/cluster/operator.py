"""``agent-health operator``: kopf, the judge service, metrics and probes in one process.

Each server listens on its own port. Flags win over environment variables; the Helm chart
sets these names:

=========================  ====================================  ============================
flag                       environment                           default / meaning
=========================  ====================================  ============================
``--metrics-addr``         ``AGENT_HEALTH_METRICS_ADDR``         ``0.0.0.0:9090`` (``/metrics``)
``--judge-addr``           ``AGENT_HEALTH_JUDGE_ADDR``           ``0.0.0.0:8090`` (``/api/judge``)
``--health-addr``          ``AGENT_HEALTH_HEALTH_ADDR``          ``0.0.0.0:8080`` (``/healthz``,
                                                                 ``/readyz``)
``--controller-image``     ``AGENT_HEALTH_CONTROLLER_IMAGE``     required; the stock controller
                                                                 image (a tag is pinned at start)
``--gateway-image``        ``AGENT_HEALTH_GATEWAY_IMAGE``        required; the gateway sidecar
``--judge-service-url``    ``AGENT_HEALTH_JUDGE_SERVICE_URL``    the URL cells call, e.g.
                                                                 ``http://agent-health-judge.
                                                                 agent-health.svc:8090``; unset:
                                                                 cells skip ``judge()``
``--ledger-url``           ``AGENT_HEALTH_LEDGER_URL``           ledger of RunSpecs naming none;
                                                                 ``{namespace}``, ``{run}``,
                                                                 ``{runspec}`` are filled in
``--judge-cache``          ``AGENT_HEALTH_JUDGE_CACHE``          the persistent judge cache path
``--namespace``            ``AGENT_HEALTH_WATCH_NAMESPACE``      watch one namespace (default:
                                                                 cluster-wide)
``--operator-namespace``   ``AGENT_HEALTH_NAMESPACE``            where the operator runs
                                                                 (default ``agent-health``; the
                                                                 cells' NetworkPolicy egress)
``--judge-pod-labels``     ``AGENT_HEALTH_JUDGE_POD_LABELS``     ``k=v,...`` of the operator pods
                                                                 (default ``app.kubernetes.io/
                                                                 name=agent-health``)
``--image-pull-secret``    ``AGENT_HEALTH_IMAGE_PULL_SECRETS``   pull Secrets (comma-separated in
                                                                 env) read in each RunSpec's
                                                                 namespace and set on cells
``--insecure-registry``    ``AGENT_HEALTH_INSECURE_REGISTRIES``  registries spoken to over HTTP
``--sandboxes``            ``AGENT_HEALTH_SANDBOXES=1``          also watch Agent Sandboxes
=========================  ====================================  ============================

The cells' identity and fence (their flags are too long for the table):

* ``--gateway-service-account`` (``AGENT_HEALTH_GATEWAY_SERVICE_ACCOUNT``): the
  ServiceAccount cells run as; its token is projected into the gateway container only,
  which writes the ledger (a ConfigMap ledger needs configmaps get/create/update in the
  run's namespace; IRSA or Workload Identity for an object store).
* ``--ledger-credentials-secret`` (``AGENT_HEALTH_LEDGER_CREDENTIALS_SECRET``): a Secret in
  each run's namespace, ``envFrom`` on the gateway only (object-store credentials).
* ``--network-policy`` (``AGENT_HEALTH_NETWORK_POLICY=1``): one NetworkPolicy per run, owned
  by it, created before its first cell: no ingress; egress only to DNS, the judge pods and
  what ``--egress`` declares.
* ``--egress`` (``AGENT_HEALTH_EGRESS``, comma-separated; the flag repeats): declared
  egress, ``CIDR[~EXCEPT...][:PORT[+PORT...]]``, e.g. ``172.18.0.0/16:6443`` for the API
  server of a ConfigMap ledger; also the object store and what the target calls.
* ``--dns-namespace`` (``AGENT_HEALTH_DNS_NAMESPACE``, default ``kube-system``) and
  ``--dns-pod-labels`` (``AGENT_HEALTH_DNS_POD_LABELS``, default ``k8s-app=kube-dns``):
  where cluster DNS runs.

The judge service's model comes from ``AGENT_HEALTH_JUDGE_PROVIDER`` (openai, anthropic,
bedrock), ``AGENT_HEALTH_JUDGE_MODEL`` (unset: every verdict is a neutral skip),
``AGENT_HEALTH_JUDGE_BASE_URL``, ``AGENT_HEALTH_JUDGE_API_KEY_ENV`` (the name of the
variable holding the key) and ``AGENT_HEALTH_JUDGE_REGION``. It accepts exactly the
controller tokens of live cells, and answers each with its own RunSpec's ``spec.judge``
(its key read from ``spec.judge.secretRef``; :mod:`.judges`), or with this model when
the RunSpec names none. ``/readyz`` answers 200 once kopf is watching.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import kopf
from aiohttp import web

from agent_health import judging
from agent_health.cluster import kube, metrics
from agent_health.cluster.cells import manifests, netpol
from agent_health.cluster.judge_service import judges
from agent_health.cluster.reconcile import batcher, events, handlers, runs, specs
from agent_health.cluster.registry import registry
from agent_health.judging import dispatch, service
from agent_health.ledger import store
from agent_health.sdk import config as config_mod

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
log = logging.getLogger("agent_health.operator")


@dataclasses.dataclass(frozen=True)
class Options:
    """The operator's configuration (see the module docstring for each)."""

    controller_image: str
    gateway_image: str
    metrics_addr: str = "0.0.0.0:9090"
    judge_addr: str = "0.0.0.0:8090"
    health_addr: str = "0.0.0.0:8080"
    judge_service_url: str | None = None
    ledger_url: str | None = None
    judge_cache: str | None = None
    namespace: str | None = None
    operator_namespace: str = "agent-health"
    judge_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"app.kubernetes.io/name": "agent-health"}
    )
    image_pull_secrets: tuple[str, ...] = ()
    insecure_registries: tuple[str, ...] = ()
    sandboxes: bool = False
    gateway_service_account: str | None = None
    ledger_credentials_secret: str | None = None
    network_policy: bool = False
    egress: tuple[netpol.Egress, ...] = ()
    dns_namespace: str = "kube-system"
    dns_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"k8s-app": "kube-dns"}
    )
    stuck_grace: float = 120.0
    status_interval: float = 1.0
    discovery_wait: float = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    add = parser.add_argument
    add("--metrics-addr", default=env("AGENT_HEALTH_METRICS_ADDR", "0.0.0.0:9090"))
    add("--judge-addr", default=env("AGENT_HEALTH_JUDGE_ADDR", "0.0.0.0:8090"))
    add("--health-addr", default=env("AGENT_HEALTH_HEALTH_ADDR", "0.0.0.0:8080"))
    add("--controller-image", default=env("AGENT_HEALTH_CONTROLLER_IMAGE"))
    add("--gateway-image", default=env("AGENT_HEALTH_GATEWAY_IMAGE"))
    add("--judge-service-url", default=env("AGENT_HEALTH_JUDGE_SERVICE_URL"))
    add("--ledger-url", default=env("AGENT_HEALTH_LEDGER_URL"))
    add("--judge-cache", default=env("AGENT_HEALTH_JUDGE_CACHE"))
    add("--namespace", default=env("AGENT_HEALTH_WATCH_NAMESPACE"))
    add("--operator-namespace", default=env("AGENT_HEALTH_NAMESPACE", "agent-health"))
    add(
        "--judge-pod-labels",
        default=env("AGENT_HEALTH_JUDGE_POD_LABELS", "app.kubernetes.io/name=agent-health"),
    )
    add(
        "--image-pull-secret", action="append", default=_csv(env("AGENT_HEALTH_IMAGE_PULL_SECRETS"))
    )
    add(
        "--insecure-registry",
        action="append",
        default=_csv(env("AGENT_HEALTH_INSECURE_REGISTRIES")),
    )
    add("--sandboxes", action="store_true", default=env("AGENT_HEALTH_SANDBOXES") == "1")
    add("--gateway-service-account", default=env("AGENT_HEALTH_GATEWAY_SERVICE_ACCOUNT"))
    add("--ledger-credentials-secret", default=env("AGENT_HEALTH_LEDGER_CREDENTIALS_SECRET"))
    add(
        "--network-policy",
        action="store_true",
        default=env("AGENT_HEALTH_NETWORK_POLICY") == "1",
    )
    add("--egress", action="append", default=_csv(env("AGENT_HEALTH_EGRESS")))
    add("--dns-namespace", default=env("AGENT_HEALTH_DNS_NAMESPACE", "kube-system"))
    add("--dns-pod-labels", default=env("AGENT_HEALTH_DNS_POD_LABELS", "k8s-app=kube-dns"))


def options(args: argparse.Namespace) -> Options:
    """:class:`Options` from parsed flags; a missing image is a usage error (ValueError)."""
    for flag in ("controller_image", "gateway_image"):
        if not getattr(args, flag):
            name = flag.replace("_", "-")
            raise ValueError(f"--{name} (or AGENT_HEALTH_{flag.upper()}) is required")
    labels = _labels(args.judge_pod_labels)
    return Options(
        controller_image=args.controller_image,
        gateway_image=args.gateway_image,
        metrics_addr=args.metrics_addr,
        judge_addr=args.judge_addr,
        health_addr=args.health_addr,
        judge_service_url=args.judge_service_url,
        ledger_url=args.ledger_url,
        judge_cache=args.judge_cache,
        namespace=args.namespace,
        operator_namespace=args.operator_namespace,
        judge_pod_labels=labels,
        image_pull_secrets=tuple(args.image_pull_secret),
        insecure_registries=tuple(args.insecure_registry),
        sandboxes=args.sandboxes,
        gateway_service_account=args.gateway_service_account or None,
        ledger_credentials_secret=args.ledger_credentials_secret or None,
        network_policy=args.network_policy,
        egress=tuple(netpol.egress(e) for e in args.egress),
        dns_namespace=args.dns_namespace,
        dns_pod_labels=_labels(args.dns_pod_labels),
    )


def judge_config(environ: Mapping[str, str], cache: str | None) -> config_mod.JudgeConfig | None:
    """The judge service's model from ``AGENT_HEALTH_JUDGE_*``; ``None`` when no model is set."""
    model = environ.get("AGENT_HEALTH_JUDGE_MODEL")
    if not model:
        return None
    return config_mod.JudgeConfig(
        provider=environ.get("AGENT_HEALTH_JUDGE_PROVIDER", "openai"),  # type: ignore[arg-type]
        model=model,
        base_url=environ.get("AGENT_HEALTH_JUDGE_BASE_URL") or None,
        api_key_env=environ.get("AGENT_HEALTH_JUDGE_API_KEY_ENV") or None,
        region=environ.get("AGENT_HEALTH_JUDGE_REGION") or None,
        cache_path=cache,
    )


def kopf_settings(options: Options) -> kopf.OperatorSettings:
    """Production kopf settings: annotations under our group, bounded watches, quiet events."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = f"{handlers.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=handlers.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=handlers.GROUP)
    settings.posting.level = logging.WARNING
    # The API server ends a watch after server_timeout; the client gives up a bit later, so a
    # silently dropped connection is noticed within minutes, not hours.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    return settings


async def _login(given: kopf.ConnectionInfo | None) -> tuple[kopf.ConnectionInfo, str | None]:
    if given is not None:
        return given, None
    settings = kopf.OperatorSettings()
    info = await asyncio.to_thread(kopf.login_with_service_account, settings=settings)
    if info is not None:
        return info, SERVICE_ACCOUNT_TOKEN
    info = await asyncio.to_thread(kopf.login_with_kubeconfig, settings=settings)
    if info is None:
        raise kopf.LoginError("no in-cluster service account and no kubeconfig to log in with")
    return info, None


async def _pinned(image: str, insecure: tuple[str, ...]) -> str:
    ref = registry.parse(image)
    if ref.digest is not None:
        return image
    digests = await registry.resolve_all([image], insecure=insecure)
    return ref.pinned(digests[image])


async def serve(
    options: Options,
    *,
    connection: kopf.ConnectionInfo | None = None,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    environ: Mapping[str, str] | None = None,
    on_started: Callable[[Operator], None] | None = None,
) -> None:
    """Run until ``stop`` is set (or kopf exits on a signal)."""
    stop = stop or asyncio.Event()
    ready = ready or asyncio.Event()
    environ = os.environ if environ is None else environ
    info, token_file = await _login(connection)
    judge = judge_config(environ, options.judge_cache)
    async with contextlib.AsyncExitStack() as stack:
        api = kube.Client.from_connection(info, token_file=token_file)
        stack.push_async_callback(api.aclose)
        settings = manifests.Settings(
            controller_image=await _pinned(options.controller_image, options.insecure_registries),
            gateway_image=await _pinned(options.gateway_image, options.insecure_registries),
            judge=_judge_service(options),
            ledger_url=options.ledger_url,
            image_pull_secrets=options.image_pull_secrets,
            gateway_service_account=options.gateway_service_account,
            ledger_credentials_secret=options.ledger_credentials_secret,
        )
        backend = await stack.enter_async_context(
            judging.backend(judge, config_mod.define_config())
        )
        operator = Operator.build(options, api, settings, backend, info, token_file)
        stack.push_async_callback(operator.runs.close)
        stack.push_async_callback(operator.judges.close)
        for server, addr, app in (
            ("metrics", options.metrics_addr, operator.metrics_app()),
            ("judge", options.judge_addr, operator.judge_app()),
            ("health", options.health_addr, operator.health_app(ready)),
        ):
            operator.ports[server] = await _listen(stack, app, addr)
        if on_started is not None:
            on_started(operator)
        registry_ = handlers.registry(operator.reconcilers)

        @kopf.on.login(registry=registry_)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return info

        namespaces = [options.namespace] if options.namespace else []
        flushing = asyncio.ensure_future(operator.status.run(stop))
        try:
            await kopf.operator(
                registry=registry_,
                settings=kopf_settings(options),
                clusterwide=not namespaces,
                namespaces=namespaces,
                standalone=True,
                stop_flag=stop,
                ready_flag=ready,
            )
        finally:
            stop.set()
            await flushing


@dataclasses.dataclass
class Operator:
    """The parts of a running operator (tests and benchmarks look inside)."""

    api: kube.Client
    metrics: metrics.OperatorMetrics
    status: batcher.StatusBatcher
    runs: runs.Runs
    reconcilers: handlers.Reconcilers
    judging: dispatch.Judging
    """The operator's own judge (``AGENT_HEALTH_JUDGE_*``): RunSpecs without ``spec.judge``."""
    judges: judges.RunJudges
    ports: dict[str, int] = dataclasses.field(default_factory=dict)
    """The port each server listens on (``metrics``, ``judge``, ``health``)."""

    @classmethod
    def build(
        cls,
        options: Options,
        api: kube.Client,
        settings: manifests.Settings,
        backend: dispatch.Judging | None,
        info: kopf.ConnectionInfo,
        token_file: str | None,
    ) -> Operator:
        sink = metrics.OperatorMetrics()

        async def patch(ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
            return await api.patch(kube.EVALUATIONRUNS, ref.namespace, ref.name, body, status=True)

        status = batcher.StatusBatcher(patch, interval=options.status_interval)
        discoveries = specs.Discoveries(api)
        ledger_options = store.Options(
            kube_api_url=info.server if token_file is None else None, kube_token=info.token
        )
        scheduler = runs.Runs(
            api=api, settings=settings, discoveries=discoveries, status=status, metrics=sink,
            recorder=events.EventRecorder(), ledger_options=ledger_options,
            stuck_grace=options.stuck_grace, fence=_fence(options),
        )  # fmt: skip
        reconciler = specs.SpecReconciler(
            api, settings, discoveries, options.insecure_registries,
            wait_seconds=options.discovery_wait,
        )  # fmt: skip
        reconcilers = handlers.Reconcilers(
            reconciler, scheduler, discoveries, sink, sandboxes=options.sandboxes
        )
        judge = backend or dispatch.Judging(judge=None, provider=None)
        per_run = judges.RunJudges(api, scheduler, judge, cache_path=options.judge_cache)
        return cls(api, sink, status, scheduler, reconcilers, judge, per_run)

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics.handle)
        return app

    def judge_app(self) -> web.Application:
        app = service.serving(self.judges.resolve)
        app.middlewares.append(self._judge_metrics)
        return app

    def health_app(self, ready: asyncio.Event) -> web.Application:
        async def healthz(_: web.Request) -> web.Response:
            return web.json_response({"ok": True})

        async def readyz(_: web.Request) -> web.Response:
            ok = ready.is_set()
            return web.json_response({"ready": ok}, status=200 if ok else 503)

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        return app

    @web.middleware
    async def _judge_metrics(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        started = time.monotonic()
        response: web.StreamResponse = await handler(request)
        if request.path == "/api/judge" and isinstance(response, web.Response):
            judge = service.judging_of(request).judge
            model = judge.model if judge else "none"
            outcome: metrics.JudgeOutcome = "errored" if response.status != 200 else "ok"
            text = response.text or ""
            if '"cached":true' in text.replace(" ", ""):
                outcome = "cached"
            elif '"errored":true' in text.replace(" ", ""):
                outcome = "errored"
            self.metrics.observe_judge(model, outcome, time.monotonic() - started)
        return response


def _judge_service(options: Options) -> manifests.JudgeService | None:
    if not options.judge_service_url:
        return None
    return manifests.JudgeService(
        url=options.judge_service_url,
        namespace=options.operator_namespace,
        pod_labels=dict(options.judge_pod_labels),
        port=_split(options.judge_addr)[1],
    )


def _fence(options: Options) -> netpol.Fence | None:
    if not options.network_policy:
        return None
    return netpol.Fence(options.egress, options.dns_namespace, dict(options.dns_pod_labels))


async def _listen(stack: contextlib.AsyncExitStack, app: web.Application, addr: str) -> int:
    """Serve ``app`` on ``host:port`` (port 0: any free one); the port it listens on."""
    host, port = _split(addr)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, host, port).start()
    bound: int = runner.addresses[0][1]
    return bound


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


def _labels(value: str | None) -> dict[str, str]:
    return dict(p.split("=", 1) for p in _csv(value) if "=" in p)


def _csv(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def run(chosen: Options) -> int:
    """The command: serve until SIGTERM/SIGINT (kopf handles the signals)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(chosen))
    return 0


@contextlib.asynccontextmanager
async def running(
    options: Options, connection: kopf.ConnectionInfo, **kwargs: Any
) -> AsyncIterator[Operator]:
    """Run an operator in the background of a test or benchmark; yield its parts once ready."""
    stop, ready = asyncio.Event(), asyncio.Event()
    parts: list[Operator] = []
    task = asyncio.ensure_future(
        serve(
            options,
            connection=connection,
            stop=stop,
            ready=ready,
            on_started=parts.append,
            **kwargs,
        )
    )
    try:
        waiting = asyncio.ensure_future(ready.wait())
        done, _ = await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiting.cancel()
            task.result()
        yield parts[0]
    finally:
        stop.set()
        await task
