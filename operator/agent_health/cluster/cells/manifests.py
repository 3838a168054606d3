"""What every object the operator creates shares: names, labels, owners, security, the suite.

The manifests are pure functions from the CRD models (and digests the operator resolved)
to plain dicts ready for the API server; nothing here talks to Kubernetes. The pieces:

* :mod:`.cellpod` — one Pod per (test, repeat), with :mod:`.cellgateway` (its gateway
  sidecar) and :mod:`.cellsecrets` (the tokens and ledger key it mounts);
* :mod:`.discovery` — the short-lived Pod that lists a suite's tests;
* :mod:`.sandbox` — the same Pod wrapped in an Agent Sandbox;
* :mod:`.netpol` — the NetworkPolicy fencing a run's cells.

Every container runs under the *restricted* Pod Security Standard: non-root with a fixed
non-zero uid, no privilege escalation, all capabilities dropped, the runtime's default
seccomp profile and a read-only root filesystem with its own ``emptyDir`` at ``/tmp``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal

from agent_health.cluster import apigroup, errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import resources as resources_mod
from agent_health.cluster.registry import registry

LABEL_RUN = f"{apigroup.GROUP}/run"
LABEL_RUNSPEC = f"{apigroup.GROUP}/runspec"
LABEL_TEST_HASH = f"{apigroup.GROUP}/test-hash"
LABEL_REPEAT = f"{apigroup.GROUP}/repeat"
LABEL_COMPONENT = f"{apigroup.GROUP}/component"
LABEL_AGENT = f"{apigroup.GROUP}/agent"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "agent-health"
ANNOTATION_TEST_ID = f"{apigroup.GROUP}/test-id"
ANNOTATION_RUNSPEC = f"{apigroup.GROUP}/runspec"
SKIP_CONTAINERS = "eks.amazonaws.com/skip-containers"

COMMAND = ("agent-health",)
SCRATCH = "/tmp"
DNS_LABEL_MAX = 63
SUBDOMAIN_MAX = 253
HASH_CHARS = 10
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

Owner = evaluationrun.EvaluationRun | runspec.RunSpec


@dataclasses.dataclass(frozen=True)
class JudgeService:
    """The operator's judge service, as cells reach it (through their gateway)."""

    url: str
    """Base URL of the Service, e.g. ``http://agent-health-judge.agent-health.svc:8080``."""
    namespace: str
    """The operator's namespace (NetworkPolicy egress is allowed only there)."""
    pod_labels: Mapping[str, str]
    """Labels of the operator pods serving the judge."""
    port: int
    """The *pod* port the judge listens on (a NetworkPolicy sees pod ports, not Service ports)."""
    offered_model: str | None = None
    """The operator's own judge model when it is offered to all runs (``--judge-for-all-runs``):
    cells of RunSpecs without ``spec.judge`` are judged with it; ``None``, they skip judge()."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the operator's own deployment decides for every cell (not the user's RunSpec).

    ``gateway_service_account`` names a ServiceAccount for the *gateway's* object-store
    credentials (IRSA, GKE Workload Identity, Azure Workload Identity): the pod runs as it,
    its token is projected into the gateway container only, and the pod carries
    ``eks.amazonaws.com/skip-containers`` naming every other container, so EKS's webhook
    (IRSA and Pod Identity) gives the role to the gateway alone. GKE's metadata server
    cannot be limited per container: with Workload Identity it gives the account's token
    to any container of the pod that reaches it (the cells' NetworkPolicy denies it unless
    the admin declares it), so there, prefer ``ledger_credentials_secret`` (an ``envFrom``
    Secret on the gateway alone) or a ConfigMap ledger.
    """

    controller_image: str
    """The stock controller image (``agent-health``), by digest; runs ConfigMap suites."""
    gateway_image: str
    """The gateway sidecar image, by digest."""
    judge: JudgeService | None = None
    ledger_url: str | None = None
    """The ledger for RunSpecs that name none."""
    otlp_endpoint: str | None = None
    """Where cells of RunSpecs that name no ``spec.otlp`` export their tests (OTLP/HTTP)."""
    gateway_service_account: str | None = None
    ledger_credentials_secret: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    run_as_user: int = 65532
    run_as_group: int = 65532
    scratch_size: str = "256Mi"
    startup_seconds: int = 180
    """Slack on top of the test timeout for pulls and sidecar starts (activeDeadlineSeconds)."""
    resources: resources_mod.CellResources = dataclasses.field(
        default_factory=resources_mod.CellResources
    )
    """Each container's CPU and memory defaults, and the cap on a RunSpec's own."""
    runtime_class: str | None = None
    """Every cell and discovery pod runs with this RuntimeClass; a RunSpec naming another is
    refused (``--cell-runtime-class``)."""
    sandbox_runtime_class: str | None = None
    """The RuntimeClass of sandboxed cells whose RunSpec names none
    (``--sandbox-runtime-class``)."""
    cell_caps: tuple[int | None, int | None] = (10_000, 64 * 1024 * 1024)
    """A cell's exchanges and their bytes at most (its gateway's ``--max-cell-*``)."""
    default_queue: str | None = None
    """The Kueue LocalQueue of runs and RunSpecs that name none (``--default-queue``)."""
    sandbox_queueing: Literal["refuse", "admit"] = "refuse"
    """What a queue does to sandboxed cells (``--sandbox-queueing``): ``refuse`` a run of
    them that a queue applies to; ``admit`` their pods, and a warm pool's, through it."""
    max_warm_replicas: int | None = 100
    """The most warm sandboxes kept at once in one namespace, over all the operator's pools
    (``--max-warm-replicas``); ``None``: no cap."""

    def __post_init__(self) -> None:
        for field in ("controller_image", "gateway_image"):
            if registry.parse(getattr(self, field)).digest is None:
                raise ValueError(f"operator setting {field} must be pinned (name@sha256:...)")
        if self.run_as_user <= 0 or self.run_as_group <= 0:
            raise ValueError("operator settings run_as_user and run_as_group must be non-zero")
        if self.runtime_class is not None and self.sandbox_runtime_class not in (
            None,
            self.runtime_class,
        ):
            raise ValueError(
                f"--sandbox-runtime-class {self.sandbox_runtime_class} differs from "
                f"--cell-runtime-class {self.runtime_class}, which every cell must use"
            )


def judge_model(
    run: evaluationrun.EvaluationRun, spec: runspec.RunSpec, settings: Settings
) -> str | None:
    """The model a run's cells are judged with, or ``None`` when they are not judged: the
    operator serves no judge, the run skips judging, or the RunSpec names no judge and the
    operator's own is not offered to all runs. Only judged cells get a route to the judge
    service (and, fenced, may reach it)."""
    if settings.judge is None or run.spec.skip_judge:
        return None
    if spec.spec.judge is not None:
        return spec.spec.judge.model
    return settings.judge.offered_model


def short_hash(text: str, chars: int = HASH_CHARS) -> str:
    """A stable lowercase hex prefix of the sha256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def fit(name: str, limit: int) -> str:
    """``name`` as a DNS-1123 label prefix of at most ``limit`` characters.

    A name that is already valid and short enough is kept; otherwise it is cleaned,
    truncated and given a hash of the original, so distinct names stay distinct.
    """
    if len(name) <= limit and _DNS_LABEL.match(name):
        return name
    tag = short_hash(name, 8)
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    head = cleaned[: max(limit - len(tag) - 1, 0)].rstrip("-")
    return f"{head}-{tag}" if head else tag[:limit]


def label_value(text: str) -> str:
    """``text`` as a label value (≤63 characters), hashed when it does not fit as it is."""
    if len(text) <= DNS_LABEL_MAX and _LABEL_VALUE.match(text):
        return text
    return fit(text, DNS_LABEL_MAX)


def identity(obj: Owner) -> tuple[str, str, str]:
    """``(namespace, name, uid)`` of a stored object; all three are needed to own children."""
    found = tuple(str(obj.metadata.get(k) or "") for k in ("namespace", "name", "uid"))
    if not all(found):
        missing = [k for k, v in zip(("namespace", "name", "uid"), found, strict=True) if not v]
        raise errors.SpecError(
            f"{obj.kind} {obj.metadata.get('name', '?')}: metadata lacks {', '.join(missing)}; "
            "pass the object as read from the API server"
        )
    return found[0], found[1], found[2]


def owner_reference(obj: Owner) -> dict[str, Any]:
    """A controller ownerReference: children are garbage-collected with ``obj``."""
    _, name, uid = identity(obj)
    return {
        "apiVersion": obj.api_version,
        "kind": obj.kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def cell_name(run_name: str, test_id: str, repeat: int, agent: str | None = None) -> str:
    """``<run>-<hash of test id>-r<repeat>``: a DNS-1123 label, ≤63 characters, stable. In an
    agent matrix the hash covers the agent too (its name is the cell's ``agent`` label)."""
    suffix = f"-{short_hash(test_id if agent is None else f'{agent}/{test_id}')}-r{repeat}"
    return fit(run_name, DNS_LABEL_MAX - len(suffix)) + suffix


def ledger_cell(cell: str, attempt: int) -> str:
    """The ledger cell of one attempt at a cell: a retried cell records into a fresh chain,
    so a pod evicted mid-test leaves its partial ledger behind instead of in the way."""
    return cell if attempt == 0 else f"{cell}.a{attempt}"


def cell_labels(
    run: evaluationrun.EvaluationRun, test_id: str, repeat: int, agent: str | None = None
) -> dict[str, str]:
    """The labels of one cell's Pod (or Sandbox) and its token Secret."""
    return {
        **run_labels(run, "cell"),
        LABEL_TEST_HASH: short_hash(test_id),
        LABEL_REPEAT: str(repeat),
        **({LABEL_AGENT: agent} if agent is not None else {}),
    }


def run_labels(run: evaluationrun.EvaluationRun, component: str) -> dict[str, str]:
    """Labels shared by every object of one run (NetworkPolicies select on these)."""
    _, name, _ = identity(run)
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_RUN: label_value(name),
        LABEL_RUNSPEC: label_value(run.spec.run_spec_ref.name),
        LABEL_COMPONENT: component,
    }


def pinned(image: str, digests: Mapping[str, str]) -> str:
    """``image`` by its resolved digest; an image nobody resolved is a bug in the caller."""
    ref = registry.parse(image)
    if ref.digest is not None:
        return ref.pinned(ref.digest)
    digest = digests.get(image)
    if digest is None:
        raise errors.SpecError(f"image {image} has no resolved digest; resolve the RunSpec first")
    return ref.pinned(digest)


def scratch_volume(container: str, settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """A container's own ``/tmp`` (volume, mount): writable scratch under a read-only root."""
    name = fit(f"tmp-{container}", DNS_LABEL_MAX)
    volume = {"name": name, "emptyDir": {"sizeLimit": settings.scratch_size}}
    return volume, {"name": name, "mountPath": SCRATCH}


def suite_source(
    spec: runspec.RunSpec, digests: Mapping[str, str], settings: Settings
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(controller image, volumes, controller mounts) for the RunSpec's suite.

    A suite image *is* the controller image; a ConfigMap suite is mounted read-only at
    ``suite.path`` in the stock controller image.
    """
    suite = spec.spec.suite
    if suite.image is not None:
        return pinned(suite.image, digests), [], []
    assert suite.config_map is not None  # the model guarantees exactly one source
    volume = {"name": "suite", "configMap": {"name": suite.config_map.name, "defaultMode": 0o444}}
    mount = {"name": "suite", "mountPath": suite.path, "readOnly": True}
    return settings.controller_image, [volume], [mount]


def python_env() -> list[dict[str, Any]]:
    """Environment for a Python container on a read-only root: scratch HOME, no bytecode."""
    return [
        {"name": "HOME", "value": SCRATCH},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
    ]


def secret(
    name: str,
    namespace: str,
    owner: dict[str, Any],
    labels: Mapping[str, str],
    data: Mapping[str, bytes],
) -> dict[str, Any]:
    """An immutable Opaque Secret owned by ``owner``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        "immutable": True,
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
