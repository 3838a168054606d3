"""``agent-health operator``: kopf, the judge service, metrics and probes in one process.

:func:`serve` logs in (in-cluster service account, else kubeconfig), pins the controller and
gateway images to digests, builds the parts (:class:`Operator`: the API client, the run
scheduler, the RunSpec reconciler, the judges, the status batcher and the metrics), starts
each server on its own port and runs kopf until stopped. The flags and their environment
variables are in :mod:`.options`. The judge service accepts exactly the controller tokens
of live cells and answers each with its own RunSpec's ``spec.judge`` (its key read from
``spec.judge.secretRef``; :mod:`.judges`), or with the operator's own model when the
RunSpec names none. ``/readyz`` answers 200 once kopf is watching.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import kopf
from aiohttp import web

from agent_health import judging
from agent_health.cluster import apigroup, kube, metrics
from agent_health.cluster import options as options_mod
from agent_health.cluster.cells import apiserver, manifests, netpol
from agent_health.cluster.judge_service import judges, limits
from agent_health.cluster.reconcile import (
    batcher,
    events,
    handlers,
    listing,
    policy,
    runs,
    secretrefs,
    specs,
)
from agent_health.cluster.registry import registry
from agent_health.judging import dispatch, service
from agent_health.ledger import store
from agent_health.sdk import config

log = logging.getLogger("agent_health.operator")


def kopf_settings(options: options_mod.Options) -> kopf.OperatorSettings:
    """Production kopf settings: annotations under our group, bounded watches, quiet events."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = f"{apigroup.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=apigroup.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=apigroup.GROUP)
    settings.posting.level = logging.WARNING
    # The API server ends a watch after server_timeout; the client gives up a bit later, so a
    # silently dropped connection is noticed within minutes, not hours.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.watching.reconnect_backoff = 1.0
    settings.networking.request_timeout = 60
    settings.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    # One named namespace (--namespace) needs no scanning of the cluster's namespaces: kopf
    # would list them cluster-wide only to learn that this one exists. CRDs (Agent Sandbox)
    # are then found once, at start.
    settings.scanning.disabled = options.namespace is not None
    return settings


async def _pinned(image: str, insecure: tuple[str, ...]) -> str:
    ref = registry.parse(image)
    if ref.digest is not None:
        return image
    digests = await registry.resolve_all([image], insecure=insecure)
    return ref.pinned(digests[image])


async def serve(
    options: options_mod.Options,
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
    info, token_file = await kube.login(connection)
    judge = options_mod.judge_config(environ, options.judge_cache)
    async with contextlib.AsyncExitStack() as stack:
        api = kube.Client.from_connection(info, token_file=token_file)
        stack.push_async_callback(api.aclose)
        settings = manifests.Settings(
            controller_image=await _pinned(options.controller_image, options.insecure_registries),
            gateway_image=await _pinned(options.gateway_image, options.insecure_registries),
            judge=_judge_service(options, judge),
            ledger_url=options.ledger_url,
            otlp_endpoint=options.otlp_endpoint,
            image_pull_secrets=options.image_pull_secrets,
            gateway_service_account=options.gateway_service_account,
            ledger_credentials_secret=options.ledger_credentials_secret,
            startup_seconds=options.startup_seconds,
            resources=options.cell_resources,
            runtime_class=options.cell_runtime_class,
            sandbox_runtime_class=options.sandbox_runtime_class,
            default_queue=options.default_queue,
            sandbox_queueing=options.sandbox_queueing,
            max_warm_replicas=options.max_warm_replicas,
        )
        backend = await stack.enter_async_context(judging.backend(judge, config.define_config()))
        ledgers = await asyncio.to_thread(kube.ledger_options, info, token_file)
        fence = await _fence(options, api, info.server if token_file is not None else None)
        operator = Operator.build(options, api, settings, backend, ledgers, fence)
        if options.history is not None:
            log.info(
                "history: each finished EvaluationRun is recorded in %s", options.history.shown
            )
        else:
            log.info(
                "history: off (--history, AGENT_HEALTH_HISTORY): a finished run's "
                "results last as long as its EvaluationRun"
            )
        await operator.runs.starting(options.namespace, warm_pools=options.warm_pools)
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
                identity=_identity(environ),
            )
        finally:
            stop.set()
            await flushing


def _identity(environ: Mapping[str, str]) -> Any:
    """kopf's peer identity, given so kopf never derives one: its default asks the password
    database for the user name, and the images' uid 65532 has no entry there (the operator
    would crash at start). A standalone operator never peers; any unique name will do."""
    return f"agent-health@{environ.get('POD_ID') or socket.gethostname()}/{os.getpid()}"


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
        options: options_mod.Options,
        api: kube.Client,
        settings: manifests.Settings,
        backend: dispatch.Judging | None,
        ledger_options: store.Options,
        fence: netpol.Fence | None = None,
    ) -> Operator:
        sink = metrics.OperatorMetrics()

        async def patch(ref: batcher.RunRef, body: dict[str, Any]) -> Mapping[str, Any]:
            return await api.patch(kube.EVALUATIONRUNS, ref.namespace, ref.name, body, status=True)

        status = batcher.StatusBatcher(patch, interval=options.status_interval)
        chosen = reconciling(options, ledger_options, fence)
        discoveries = listing.Discoveries(api)
        scheduler = runs.Runs(
            api=api,
            settings=settings,
            discoveries=discoveries,
            status=status,
            metrics=sink,
            recorder=events.EventRecorder(),
            policy=chosen,
            history=options.history,
            history_retry=options.history_retry,
        )
        reconciler = specs.SpecReconciler(api, settings, discoveries, policy=chosen)
        watch = {"sandboxes": options.sandboxes, "warm_pools": options.warm_pools}
        reconcilers = handlers.Reconcilers(reconciler, scheduler, discoveries, sink, **watch)
        judge = backend or dispatch.Judging(judge=None, provider=None)
        per_run = judges.RunJudges(
            api,
            scheduler,
            judge,
            cache_path=options.judge_cache,
            own_secrets=chosen.own_secrets,
            for_all=options.judge_for_all_runs,
            ceiling=options.judge_max_tokens,
        )
        return cls(api, sink, status, scheduler, reconcilers, judge, per_run)

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics.handle)
        return app

    def judge_app(self) -> web.Application:
        app = service.serving(self.judges.resolve, self.runs.judged)
        # After the service's authentication: a live cell's token, held to its RunSpec's limits.
        app.middlewares.append(limits.middleware(self.judges.limits))
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
        # A verdict and a simulated user's line both ask the judge's model.
        if request.path in limits.ASKING_PATHS and isinstance(response, web.Response):
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


def reconciling(
    options: options_mod.Options, ledger_options: store.Options, fence: netpol.Fence | None
) -> policy.Policy:
    """How the operator reconciles, from its flags: built once, handed to every part."""
    return policy.Policy(
        retry_delay=options.retry_delay,
        stuck_grace=options.stuck_grace,
        deadline_grace=options.deadline_grace,
        discovery_wait=options.discovery_wait,
        ledger_allowed=options.ledger_allowed,
        ledger_options=ledger_options,
        own_secrets=own_secrets(options),
        fence=fence,
        insecure_registries=options.insecure_registries,
    )


def own_secrets(options: options_mod.Options) -> secretrefs.Own:
    """The Secrets no RunSpec may name: everything in the operator's namespace, and the
    Secrets it uses in every namespace (ledger credentials, image pull Secrets)."""
    names = {*options.image_pull_secrets}
    if options.ledger_credentials_secret:
        names.add(options.ledger_credentials_secret)
    return secretrefs.Own(options.operator_namespace, frozenset(names))


def _judge_service(
    options: options_mod.Options, own: config.JudgeConfig | None
) -> manifests.JudgeService | None:
    if not options.judge_service_url:
        return None
    return manifests.JudgeService(
        url=options.judge_service_url,
        namespace=options.operator_namespace,
        pod_labels=dict(options.judge_pod_labels),
        port=_split(options.judge_addr)[1],
        offered_model=own.model if own is not None and options.judge_for_all_runs else None,
    )


async def _fence(
    options: options_mod.Options, api: kube.Client, service: str | None
) -> netpol.Fence | None:
    """The cells' fence (``--network-policy``), with the API server's addresses found now."""
    if not options.network_policy:
        return None
    return netpol.Fence(
        options.egress,
        options.dns_namespace,
        dict(options.dns_pod_labels),
        api_server=await apiserver.addresses(api, service),
    )


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


def run(chosen: options_mod.Options) -> int:
    """The command: serve until SIGTERM/SIGINT (kopf handles the signals)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(chosen))
    return 0


@contextlib.asynccontextmanager
async def running(
    options: options_mod.Options, connection: kopf.ConnectionInfo, **kwargs: Any
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
