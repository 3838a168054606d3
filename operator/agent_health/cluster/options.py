"""``agent-health operator``'s flags: each one, its environment variable and its default.

Flags win over environment variables; the Helm chart sets the environment. Every flag's
``--help`` text names its variable and default (:func:`add_arguments`); :func:`from_args`
turns the parsed flags into :class:`Options`, what :mod:`.operator` serves with.

The judge service's own model is configured by environment only (:func:`judge_config`):
``AGENT_HEALTH_JUDGE_PROVIDER`` (openai, anthropic, bedrock), ``AGENT_HEALTH_JUDGE_MODEL``
(unset: every verdict is a neutral skip), ``AGENT_HEALTH_JUDGE_BASE_URL``,
``AGENT_HEALTH_JUDGE_API_KEY_ENV`` (the name of the variable holding the key) and
``AGENT_HEALTH_JUDGE_REGION``. It answers RunSpecs that name no ``spec.judge`` only when
``--judge-for-all-runs`` offers it to them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Literal

from agent_health import history
from agent_health.cluster.api import meta
from agent_health.cluster.cells import ledgerurl, netpol, resources
from agent_health.cluster.reconcile import historian
from agent_health.sdk import config

DESCRIPTION = (
    "The Kubernetes operator of agent-health: kopf reconciling RunSpecs and EvaluationRuns, "
    "the judge service cells call, Prometheus metrics and health probes, in one process. "
    "Each flag falls back to the environment variable named in its help (the Helm chart "
    "sets those)."
)
EPILOG = (
    "The judge service's own model (for RunSpecs without spec.judge, with "
    "--judge-for-all-runs) comes from the "
    "environment: AGENT_HEALTH_JUDGE_PROVIDER (openai, anthropic, bedrock), "
    "AGENT_HEALTH_JUDGE_MODEL (unset: verdicts are neutral skips), AGENT_HEALTH_JUDGE_BASE_URL, "
    "AGENT_HEALTH_JUDGE_API_KEY_ENV (the variable holding the key), AGENT_HEALTH_JUDGE_REGION."
)


@dataclasses.dataclass(frozen=True)
class Options:
    """The operator's configuration (each flag's help says what it is)."""

    controller_image: str
    gateway_image: str
    metrics_addr: str = "0.0.0.0:9090"
    judge_addr: str = "0.0.0.0:8090"
    health_addr: str = "0.0.0.0:8080"
    judge_service_url: str | None = None
    ledger_url: str | None = None
    otlp_endpoint: str | None = None
    ledger_allowed: tuple[str, ...] = ledgerurl.DEFAULT_ALLOWED
    """URL prefixes a RunSpec's ``spec.ledger.url`` must start with."""
    judge_cache: str | None = None
    namespace: str | None = None
    operator_namespace: str = "agent-health"
    judge_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"app.kubernetes.io/name": "agent-health"}
    )
    image_pull_secrets: tuple[str, ...] = ()
    insecure_registries: tuple[str, ...] = ()
    sandboxes: bool = False
    warm_pools: bool = False
    gateway_service_account: str | None = None
    ledger_credentials_secret: str | None = None
    network_policy: bool = False
    egress: tuple[netpol.Egress, ...] = ()
    dns_namespace: str = "kube-system"
    dns_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"k8s-app": "kube-dns"}
    )
    cell_resources: resources.CellResources = dataclasses.field(
        default_factory=resources.CellResources
    )
    cell_runtime_class: str | None = None
    sandbox_runtime_class: str | None = None
    default_queue: str | None = None
    """The Kueue LocalQueue of cells and discovery pods whose run and RunSpec name none."""
    sandbox_queueing: Literal["refuse", "admit"] = "refuse"
    """Refuse a run of sandboxed cells that a queue applies to, or admit them through it."""
    max_warm_replicas: int | None = 100
    """The most warm sandboxes kept at once in one namespace; ``None``: no cap."""
    judge_for_all_runs: bool = False
    """Whether the operator's own judge answers cells of RunSpecs that name none."""
    judge_max_tokens: int = 4096
    """The most output tokens any judge call through the service may ask for."""
    history: history.Location | None = None
    """The history every finished run is recorded in (``None``: none)."""
    history_retry: tuple[float, ...] = historian.RETRY_DELAYS
    """Seconds before each new try of a recording that failed (not a flag)."""
    stuck_grace: float = 120.0
    """Seconds a cell may stay unschedulable or unable to pull before it is errored."""
    deadline_grace: float = 60.0
    """Seconds past a cell's deadline before the operator ends it itself."""
    startup_seconds: int = 180
    """A cell's slack on top of its test timeout (its ``activeDeadlineSeconds``)."""
    retry_delay: float = 5.0
    """The first delay before a failed reconcile is tried again (it doubles, up to 5 min)."""
    status_interval: float = 1.0
    discovery_wait: float = 120.0


@dataclasses.dataclass(frozen=True)
class _Flag:
    name: str
    env: str
    help: str
    default: str | None = None
    kind: str = "value"  # "value", "list" (repeatable; comma-separated in env), "switch"
    metavar: str | None = None


FLAGS = (
    _Flag(
        "--metrics-addr",
        "AGENT_HEALTH_METRICS_ADDR",
        "where /metrics listens",
        "0.0.0.0:9090",
        metavar="HOST:PORT",
    ),
    _Flag(
        "--judge-addr",
        "AGENT_HEALTH_JUDGE_ADDR",
        "where the judge service (/api/judge) listens",
        "0.0.0.0:8090",
        metavar="HOST:PORT",
    ),
    _Flag(
        "--health-addr",
        "AGENT_HEALTH_HEALTH_ADDR",
        "where /healthz and /readyz listen",
        "0.0.0.0:8080",
        metavar="HOST:PORT",
    ),
    _Flag(
        "--controller-image",
        "AGENT_HEALTH_CONTROLLER_IMAGE",
        "required: the stock controller image cells run (a tag is pinned to its digest at start)",
        metavar="IMAGE",
    ),
    _Flag(
        "--gateway-image",
        "AGENT_HEALTH_GATEWAY_IMAGE",
        "required: the gateway sidecar image (pinned to its digest at start)",
        metavar="IMAGE",
    ),
    _Flag(
        "--judge-service-url",
        "AGENT_HEALTH_JUDGE_SERVICE_URL",
        "the judge service URL "
        "cells call, e.g. http://agent-health-judge.agent-health.svc:8090; unset: cells "
        "skip judge()",
        metavar="URL",
    ),
    _Flag(
        "--ledger-url",
        "AGENT_HEALTH_LEDGER_URL",
        "the ledger of RunSpecs that name none, "
        "e.g. configmap://{namespace}/agent-health-ledger-{run}, s3://BUCKET/PREFIX, "
        "gs://BUCKET/PREFIX; {namespace}, {run} and {runspec} are filled in per run; a "
        "malformed URL stops the operator at start; unset: such runs fail with NoLedger",
        metavar="URL",
    ),
    _Flag(
        "--otlp-endpoint",
        "AGENT_HEALTH_OTLP_ENDPOINT",
        "the OTLP/HTTP receiver cells of "
        "RunSpecs that name no spec.otlp export their tests to, e.g. "
        "http://otel-collector.observability.svc:4318 (cells must be able to reach it: "
        "--egress); unset: such cells export nothing",
        metavar="URL",
    ),
    _Flag(
        "--ledger-allow",
        "AGENT_HEALTH_LEDGER_ALLOW",
        "a URL prefix a RunSpec's "
        "spec.ledger.url may start with, ending in '/', {namespace} filled in per run, e.g. "
        "s3://evals-ledgers/{namespace}/ (repeatable; comma-separated in the environment); "
        "unset: configmap://{namespace}/ only. RunSpec ledger URLs never carry query "
        "options, credentials or another namespace",
        kind="list",
        metavar="PREFIX",
    ),
    _Flag(
        "--judge-for-all-runs",
        "AGENT_HEALTH_JUDGE_FOR_ALL_RUNS",
        "offer the operator's "
        "own judge (AGENT_HEALTH_JUDGE_*) to cells of RunSpecs that name no spec.judge; off, "
        "those cells skip judge() and the judge service refuses them (403), so no tenant "
        "spends the operator's key unless it is offered; the variable is on when 1",
        kind="switch",
    ),
    _Flag(
        "--judge-max-tokens",
        "AGENT_HEALTH_JUDGE_MAX_TOKENS",
        "the most output tokens one "
        "model call through the judge service may ask for, whatever a RunSpec's "
        "spec.judge.maxTokens says",
        "4096",
        metavar="N",
    ),
    _Flag(
        "--judge-cache",
        "AGENT_HEALTH_JUDGE_CACHE",
        "the persistent judge cache shared by "
        "every judge of the operator: a SQLite file, or a directory (a mounted volume) to "
        "keep judge.sqlite in; unset: no cache across restarts",
        metavar="PATH",
    ),
    _Flag(
        "--namespace",
        "AGENT_HEALTH_WATCH_NAMESPACE",
        "watch one namespace only (the "
        "cluster is then not scanned: install the Agent Sandbox CRD before the operator); "
        "unset: cluster-wide",
        metavar="NAMESPACE",
    ),
    _Flag(
        "--operator-namespace",
        "AGENT_HEALTH_NAMESPACE",
        "where the operator runs (the "
        "cells' NetworkPolicy lets them reach its judge service there)",
        "agent-health",
        metavar="NAMESPACE",
    ),
    _Flag(
        "--judge-pod-labels",
        "AGENT_HEALTH_JUDGE_POD_LABELS",
        "labels of the operator's pods, for the cells' NetworkPolicy",
        "app.kubernetes.io/name=agent-health",
        metavar="K=V,...",
    ),
    _Flag(
        "--image-pull-secret",
        "AGENT_HEALTH_IMAGE_PULL_SECRETS",
        "a pull Secret, read in "
        "each RunSpec's namespace to resolve digests and set on its cells (repeatable; "
        "comma-separated in the environment)",
        kind="list",
        metavar="NAME",
    ),
    _Flag(
        "--insecure-registry",
        "AGENT_HEALTH_INSECURE_REGISTRIES",
        "a registry spoken to over plain HTTP (repeatable; comma-separated in the environment)",
        kind="list",
        metavar="HOST[:PORT]",
    ),
    _Flag(
        "--sandboxes",
        "AGENT_HEALTH_SANDBOXES",
        "also watch Agent Sandboxes "
        "(agents.x-k8s.io; the CRD must be installed); the variable is on when 1",
        kind="switch",
    ),
    _Flag(
        "--warm-pools",
        "AGENT_HEALTH_WARM_POOLS",
        "also watch SandboxClaims, for runs "
        "whose RunSpec sets isolation.warmPool (Agent Sandbox's extensions.agents.x-k8s.io "
        "CRDs must be installed); the variable is on when 1",
        kind="switch",
    ),
    _Flag(
        "--gateway-service-account",
        "AGENT_HEALTH_GATEWAY_SERVICE_ACCOUNT",
        "the "
        "ServiceAccount cells run as; its token is projected into the gateway container "
        "only, which writes the ledger; unset: the namespace's default, no token",
        metavar="NAME",
    ),
    _Flag(
        "--ledger-credentials-secret",
        "AGENT_HEALTH_LEDGER_CREDENTIALS_SECRET",
        "a Secret "
        "in each run's namespace given to the gateway only (envFrom; object-store "
        "credentials)",
        metavar="NAME",
    ),
    _Flag(
        "--network-policy",
        "AGENT_HEALTH_NETWORK_POLICY",
        "fence each run with its own "
        "NetworkPolicy, created before its first cell: no ingress; egress only to DNS, the "
        "judge service and --egress; the variable is on when 1",
        kind="switch",
    ),
    _Flag(
        "--egress",
        "AGENT_HEALTH_EGRESS",
        "declared egress of fenced cells, "
        "CIDR[~EXCEPT...][:PORT[+PORT...]], e.g. 172.18.0.0/16:6443 for the API server of "
        "a ConfigMap ledger (repeatable; comma-separated in the environment)",
        kind="list",
        metavar="RULE",
    ),
    _Flag(
        "--dns-namespace",
        "AGENT_HEALTH_DNS_NAMESPACE",
        "where cluster DNS runs (the fence lets cells reach it)",
        "kube-system",
        metavar="NAMESPACE",
    ),
    _Flag(
        "--dns-pod-labels",
        "AGENT_HEALTH_DNS_POD_LABELS",
        "labels of the cluster DNS pods",
        "k8s-app=kube-dns",
        metavar="K=V,...",
    ),
    _Flag(
        "--cell-resources",
        "AGENT_HEALTH_CELL_RESOURCES",
        "CPU and memory of cell and "
        "discovery containers as JSON: requests and limits for controller, gateway, target "
        "and peer (the target's and peers' when their RunSpec names none), and max, the "
        'highest limit a RunSpec may ask for, e.g. {"max": {"cpu": "4", "memory": "8Gi"}}; '
        "keys left out keep their defaults",
        "{}",
        metavar="JSON",
    ),
    _Flag(
        "--cell-runtime-class",
        "AGENT_HEALTH_CELL_RUNTIME_CLASS",
        "the RuntimeClass every "
        "cell and discovery pod runs with (e.g. gvisor); a RunSpec naming another is refused; "
        "unset: the cluster's default (runc), sandboxed cells as below",
        metavar="NAME",
    ),
    _Flag(
        "--sandbox-runtime-class",
        "AGENT_HEALTH_SANDBOX_RUNTIME_CLASS",
        "the RuntimeClass "
        "of sandboxed cells (isolation.mode agentSandbox) whose RunSpec names none",
        metavar="NAME",
    ),
    _Flag(
        "--history",
        "AGENT_HEALTH_HISTORY",
        "the history every finished EvaluationRun is "
        "recorded in (docs/operator.md, The history): postgresql://USER@HOST:PORT/DATABASE "
        "for a team (the password from AGENT_HEALTH_HISTORY_PASSWORD_FILE, PGPASSWORD or "
        "PGPASSFILE, never the URL you log), or sqlite:////ABSOLUTE/PATH.db on a persistent "
        "volume; a malformed URL stops the operator at start; unset: no history, a run's "
        "results last as long as its EvaluationRun",
        metavar="URL",
    ),
    _Flag(
        "--default-queue",
        "AGENT_HEALTH_DEFAULT_QUEUE",
        "the Kueue LocalQueue (in each "
        "run's namespace) that cells and discovery pods wait in when neither the run nor its "
        "RunSpec sets spec.queue; unset: those are not queued",
        metavar="NAME",
    ),
    _Flag(
        "--sandbox-queueing",
        "AGENT_HEALTH_SANDBOX_QUEUEING",
        "what a queue (the run's, "
        "its RunSpec's or --default-queue) does to cells with isolation.mode agentSandbox: "
        "refuse fails such a run (InvalidSpec), so no sandbox runs outside the queue's "
        "quota; admit labels each Sandbox's pod, and each warm pool's, with the queue, so "
        "Kueue's pod integration admits them (an idle warm sandbox holds quota too)",
        "refuse",
        metavar="refuse|admit",
    ),
    _Flag(
        "--max-warm-replicas",
        "AGENT_HEALTH_MAX_WARM_REPLICAS",
        "the most warm sandboxes "
        "the operator keeps up at once in one namespace, over all its warm pools: a RunSpec "
        "asking for more is refused (NotAllowed), a pool that would pass the cap gets what "
        "is left (Event WarmPoolCapped; its run's other cells start cold); 0 refuses warm "
        "pools, none lifts the cap",
        "100",
        metavar="N|none",
    ),
)


def add_arguments(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None
) -> None:
    """Every operator flag, its default read from ``environ`` (the process environment)."""
    env = os.environ if environ is None else environ
    for flag in FLAGS:
        where = f"env {flag.env}"
        if flag.kind == "switch":
            on = env.get(flag.env) == "1"
            parser.add_argument(
                flag.name,
                action="store_true",
                default=on,
                help=f"{flag.help} ({where}; default off)",
            )
            continue
        default = f"default {flag.default}" if flag.default is not None else "no default"
        text = f"{flag.help} ({where}; {default})"
        if flag.kind == "list":
            parser.add_argument(
                flag.name,
                action="append",
                default=_csv(env.get(flag.env)),
                metavar=flag.metavar,
                help=text,
            )
        else:
            parser.add_argument(
                flag.name,
                default=env.get(flag.env, flag.default),
                metavar=flag.metavar,
                help=text,
            )


def from_args(args: argparse.Namespace) -> Options:
    """:class:`Options` from parsed flags; a missing image is a usage error (ValueError)."""
    for flag in ("controller_image", "gateway_image"):
        if not getattr(args, flag):
            name = flag.replace("_", "-")
            raise ValueError(f"--{name} (or AGENT_HEALTH_{flag.upper()}) is required")
    if args.ledger_url and (wrong := ledgerurl.problem(args.ledger_url)) is not None:
        raise ValueError(f"--ledger-url (or AGENT_HEALTH_LEDGER_URL): {wrong}")
    allowed = tuple(args.ledger_allow) or ledgerurl.DEFAULT_ALLOWED
    for prefix in allowed:
        if (wrong := ledgerurl.prefix_problem(prefix)) is not None:
            raise ValueError(f"--ledger-allow (or AGENT_HEALTH_LEDGER_ALLOW): {wrong}")
    required, sandboxed = args.cell_runtime_class or None, args.sandbox_runtime_class or None
    if required is not None and sandboxed not in (None, required):
        raise ValueError(
            f"--sandbox-runtime-class {sandboxed} differs from --cell-runtime-class {required}, "
            "which every cell must use: set one, or both to the same RuntimeClass"
        )
    try:
        max_tokens = int(args.judge_max_tokens)
        if max_tokens < 1:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"--judge-max-tokens (or AGENT_HEALTH_JUDGE_MAX_TOKENS) must be a positive "
            f"integer, got {args.judge_max_tokens!r}"
        ) from None
    if args.sandbox_queueing not in ("refuse", "admit"):
        raise ValueError(
            "--sandbox-queueing (or AGENT_HEALTH_SANDBOX_QUEUEING) must be refuse or admit, "
            f"got {args.sandbox_queueing!r}"
        )
    return Options(
        controller_image=args.controller_image,
        gateway_image=args.gateway_image,
        metrics_addr=args.metrics_addr,
        judge_addr=args.judge_addr,
        health_addr=args.health_addr,
        judge_service_url=args.judge_service_url,
        ledger_url=args.ledger_url,
        otlp_endpoint=_otlp_endpoint(args.otlp_endpoint),
        ledger_allowed=allowed,
        judge_cache=args.judge_cache,
        judge_for_all_runs=args.judge_for_all_runs,
        judge_max_tokens=max_tokens,
        namespace=args.namespace,
        operator_namespace=args.operator_namespace,
        judge_pod_labels=labels(args.judge_pod_labels),
        image_pull_secrets=tuple(args.image_pull_secret),
        insecure_registries=tuple(args.insecure_registry),
        sandboxes=args.sandboxes,
        warm_pools=args.warm_pools,
        gateway_service_account=args.gateway_service_account or None,
        ledger_credentials_secret=args.ledger_credentials_secret or None,
        network_policy=args.network_policy,
        egress=tuple(netpol.egress(e) for e in args.egress),
        dns_namespace=args.dns_namespace,
        dns_pod_labels=labels(args.dns_pod_labels),
        cell_resources=resources.parse(args.cell_resources or ""),
        cell_runtime_class=required,
        sandbox_runtime_class=sandboxed,
        default_queue=_queue(args.default_queue),
        sandbox_queueing=args.sandbox_queueing,
        max_warm_replicas=_warm_cap(args.max_warm_replicas),
        history=_history(args.history),
    )


def _warm_cap(value: str | None) -> int | None:
    """``--max-warm-replicas``: a count (0 refuses warm pools), or ``none`` (no cap)."""
    text = (value or "").strip().lower()
    if text == "none":
        return None
    try:
        cap = int(text)
        if cap < 0:
            raise ValueError
    except ValueError:
        raise ValueError(
            "--max-warm-replicas (or AGENT_HEALTH_MAX_WARM_REPLICAS) must be a count of "
            f"sandboxes (0 or more) or none, got {value!r}"
        ) from None
    return cap


def _history(url: str | None) -> history.Location | None:
    """``--history`` checked at start: a history URL whose database this image can reach."""
    if not url:
        return None
    origin = "--history (or AGENT_HEALTH_HISTORY)"
    try:
        where = history.parse(url, origin=origin)
    except history.LocationError as err:
        raise ValueError(str(err)) from None
    if where.kind == "postgresql" and importlib.util.find_spec("psycopg") is None:
        raise ValueError(
            f"{origin}: {where.shown} is on PostgreSQL, which needs the postgresql extra "
            "(psycopg 3): pip install 'agent-health[postgresql]'"
        )
    return where


def _queue(name: str | None) -> str | None:
    """``--default-queue`` checked as a label value and object name (a LocalQueue's)."""
    if not name:
        return None
    if len(name) > 63 or not re.match(meta.DNS_LABEL_PATTERN, name):
        raise ValueError(
            f"--default-queue (or AGENT_HEALTH_DEFAULT_QUEUE) {name!r} is not a LocalQueue "
            "name: lowercase letters, digits and '-', at most 63 characters"
        )
    return name


def judge_config(environ: Mapping[str, str], cache: str | None) -> config.JudgeConfig | None:
    """The judge service's model from ``AGENT_HEALTH_JUDGE_*``; ``None`` when no model is set."""
    model = environ.get("AGENT_HEALTH_JUDGE_MODEL")
    if not model:
        return None
    return config.JudgeConfig(
        provider=environ.get("AGENT_HEALTH_JUDGE_PROVIDER", "openai"),  # type: ignore[arg-type]
        model=model,
        base_url=environ.get("AGENT_HEALTH_JUDGE_BASE_URL") or None,
        api_key_env=environ.get("AGENT_HEALTH_JUDGE_API_KEY_ENV") or None,
        region=environ.get("AGENT_HEALTH_JUDGE_REGION") or None,
        cache_path=cache,
    )


def labels(value: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` as a mapping (parts without ``=`` are ignored)."""
    return dict(p.split("=", 1) for p in _csv(value) if "=" in p)


def _csv(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def _otlp_endpoint(value: str | None) -> str | None:
    """``--otlp-endpoint`` checked at start: an http(s) URL, or unset."""
    if not value:
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError(
            f"--otlp-endpoint (or AGENT_HEALTH_OTLP_ENDPOINT) {value!r} is not an http(s) URL "
            "of an OTLP/HTTP receiver, e.g. http://otel-collector.observability.svc:4318"
        )
    return value
