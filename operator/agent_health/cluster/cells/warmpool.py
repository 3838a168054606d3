"""Warm cells: a pool of ready sandboxes per RunSpec generation, one claimed per cell.

With ``spec.isolation.warmPool`` (mode ``agentSandbox``) the operator keeps, per RunSpec
generation (and agent of a matrix), an Agent Sandbox ``SandboxTemplate`` of a *pooled* cell
pod (:func:`pooled_pod`) and a ``SandboxWarmPool`` of ``replicas`` sandboxes made from it
(``extensions.agents.x-k8s.io/v1beta1``), both owned by the RunSpec. A pooled pod is a cell
without its cell: the gateway listens, the target and peers start and become ready, the
controller waits for its assignment. Each cell is then a ``SandboxClaim`` (:func:`claim`,
named and labelled as the cell, owned by the EvaluationRun) on that pool; the sandbox
controller binds it to a ready sandbox (``launch-type: warm``) or, when the pool is empty,
starts one cold from the template (``cold``). Once bound, the operator writes the cell's
:class:`~agent_health.ledger.assignment.Assignment` on the sandbox's pod
(:func:`assignment`), which the pod's gateway and controller read from a downward-API file.

What every cell keeps:

* **one cell per sandbox**: a claimed sandbox leaves the pool (the claim owns it), serves its
  cell and is deleted with its claim (``shutdownPolicy: Delete``); nothing of one cell is
  left in the next, which gets another sandbox;
* **per-cell tokens**: each sandbox's tokens are a Secret the sandbox controller generates for
  it alone (``generatedSecrets``), reaching each principal's container and the gateway as env
  variables; the operator reads them once the sandbox is bound (the judge service's
  allow-list). The cell's ledger key is the one derived from the run key, sent wrapped for
  that sandbox (:func:`agent_health.ledger.keys.wrap_cell_key`);
* **images pinned by digest**, as in every cell; the template is per RunSpec generation, so a
  changed RunSpec never gets an old pool's sandboxes;
* **the fence**: the pooled pods carry the pool's label, which a NetworkPolicy of the same
  rules as a run's selects (:func:`network_policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    cellenv,
    cellgateway,
    cellparts,
    manifests,
    netpol,
    podsecurity,
)
from agent_health.ledger import assignment as assignment_mod
from agent_health.ledger import keys

GROUP, VERSION = "extensions.agents.x-k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
LABEL_POOL = "agenthealth.dev/pool"
ANNOTATION_KEEP = "agenthealth.dev/keep-seconds"
"""On a pool: its RunSpec's ``keepSeconds``, for an operator that starts with the pool up."""
DEFAULT_KEEP_SECONDS: int = runspec.WarmPool.model_fields["keep_seconds"].default
LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type"
GENERATED_SECRETS = "extensions.agents.x-k8s.io/generated-secrets"
CLAIM_TTL_SECONDS = 3600
"""How long a finished claim (and its sandbox, and the pod's logs) is kept when the run sets
no ``ttlSecondsAfterFinished`` of its own."""


def pool_name(spec: runspec.RunSpec, agent: str | None = None) -> str:
    """``<runspec>[-<agent>]-g<generation>``: the template's and the pool's name."""
    name = str(spec.metadata.get("name") or "")
    generation = int(spec.metadata.get("generation") or 0)
    suffix = f"-g{generation}"
    base = name if agent is None else f"{name}-{agent}"
    return manifests.fit(base, manifests.DNS_LABEL_MAX - len(suffix)) + suffix


def _owner(spec: runspec.RunSpec) -> dict[str, Any]:
    return manifests.owner_reference(spec)


def _object(kind: str, spec: runspec.RunSpec, name: str) -> dict[str, Any]:
    """An Agent Sandbox object of the pool ``name``, owned by the RunSpec."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": spec.metadata["namespace"],
            "labels": _pool_labels(spec, name),
            "ownerReferences": [_owner(spec)],
        },
    }


def _pool_labels(spec: runspec.RunSpec, pool: str) -> dict[str, str]:
    return {
        manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
        manifests.LABEL_RUNSPEC: manifests.label_value(str(spec.metadata.get("name") or "")),
        manifests.LABEL_COMPONENT: "cell",
        LABEL_POOL: pool,
    }


def pooled_pod(
    spec: runspec.RunSpec,
    *,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    agent: str | None = None,
) -> dict[str, Any]:
    """The pod template of a pooled cell of ``spec`` (``for_agent(agent)`` of a matrix):
    every container of a cold cell, none told its cell (module docstring)."""
    pool = pool_name(spec, agent)
    spec = spec.for_agent(agent)
    cellparts.check(spec, settings)
    controller_image, volumes, suite_mounts = manifests.suite_source(spec, digests, settings)
    tokens = cellparts.Tokens.generated(spec)
    volumes += [
        cellgateway.socket_volume(),
        cellparts.assignment_volume(),
        *cellgateway.account_volumes(settings),
    ]
    # Whether a run judges is the run's: the judge's listener is there for the runs that do.
    judged = settings.judge is not None
    plan, routes = cellparts.routes_of(spec, settings, judged=judged)
    scratch = cellparts.scratch_of(spec, settings, volumes)
    sidecars = [
        cellgateway.container(
            identity=cellgateway.Pooled(
                cellparts.images_of(spec, digests, controller_image),
                cellparts.assignment_mount(),
            ),
            routes=routes,
            tokens=tokens.gateway,
            ledger=cellenv.ledger_url(spec, settings),
            scratch=scratch[cellgateway.NAME],
            settings=settings,
            otlp=plan.otlp,
        ),
        *cellparts.members(spec, digests, settings, plan, scratch, tokens),
    ]
    env = [*cellparts.controller_env(spec), *tokens.own(cellparts.CONTROLLER)[0]]
    if judged:
        env += cellparts.judge_env()
    env.extend(cellenv.otlp_env(spec, settings))
    controller = cellparts.controller_container(
        controller_image,
        ["cell", "--assignment", assignment_mod.FILE, "--suite", spec.spec.suite.path],
        env,
        [
            scratch[cellparts.CONTROLLER],
            cellgateway.socket_mount(),
            cellparts.assignment_mount(),
            *suite_mounts,
        ],
        settings,
    )
    # No activeDeadlineSeconds: a pooled pod waits for its cell; the operator times the
    # cell from its claim's creation, as it times a cold pod from its own.
    pod_spec = cellparts.pod_spec_of(settings, sidecars, controller, volumes)
    chosen = spec.spec.isolation.runtime_class_name or settings.sandbox_runtime_class
    if chosen or settings.runtime_class:
        pod_spec["runtimeClassName"] = chosen or settings.runtime_class
    return {
        "metadata": {
            "labels": _pool_labels(spec, pool),
            "annotations": podsecurity.skip_cloud_identity(pod_spec, keep=cellgateway.NAME),
        },
        "spec": pod_spec,
    }


def template(
    spec: runspec.RunSpec,
    *,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    agent: str | None = None,
) -> dict[str, Any]:
    """The ``SandboxTemplate`` of the pool (:func:`pool_name`), owned by the RunSpec."""
    return {
        **_object("SandboxTemplate", spec, pool_name(spec, agent)),
        "spec": {
            "podTemplate": pooled_pod(spec, digests=digests, settings=settings, agent=agent),
            "generatedSecrets": [cellparts.generated_secret(spec.for_agent(agent))],
            # A claim never changes a pooled cell: no env, no volumes of its own.
            "envVarsInjectionPolicy": "Disallowed",
        },
    }


def pool(spec: runspec.RunSpec, replicas: int, agent: str | None = None) -> dict[str, Any]:
    """The ``SandboxWarmPool`` of ``replicas`` sandboxes from :func:`template`."""
    name = pool_name(spec, agent)
    body = _object("SandboxWarmPool", spec, name)
    warm_pool = spec.spec.isolation.warm_pool
    keep = warm_pool.keep_seconds if warm_pool is not None else 0
    body["metadata"]["annotations"] = {ANNOTATION_KEEP: str(keep)}
    return {**body, "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": name}}}


def keep_seconds(pool_body: Mapping[str, Any]) -> int:
    """How long a pool stays up after its last run (its annotation; the default without)."""
    found = (pool_body["metadata"].get("annotations") or {}).get(ANNOTATION_KEEP)
    try:
        return max(0, int(found)) if found is not None else DEFAULT_KEEP_SECONDS
    except ValueError:
        return DEFAULT_KEEP_SECONDS


def claim(
    run: evaluationrun.EvaluationRun,
    spec: runspec.RunSpec,
    *,
    test_id: str,
    repeat: int,
    agent: str | None = None,
) -> dict[str, Any]:
    """The ``SandboxClaim`` of one cell: the cell's name and labels, owned by the run."""
    namespace, run_name, _ = manifests.identity(run)
    ttl = run.spec.ttl_seconds_after_finished
    return {
        "apiVersion": API_VERSION,
        "kind": "SandboxClaim",
        "metadata": {
            "name": manifests.cell_name(run_name, test_id, repeat, agent),
            "namespace": namespace,
            "labels": manifests.cell_labels(run, test_id, repeat, agent),
            "annotations": {
                manifests.ANNOTATION_TEST_ID: test_id,
                manifests.ANNOTATION_RUNSPEC: run.spec.run_spec_ref.name,
            },
            "ownerReferences": [manifests.owner_reference(run)],
        },
        "spec": {
            "warmPoolRef": {"name": pool_name(spec, agent)},
            "lifecycle": {
                "shutdownPolicy": "Delete",
                "ttlSecondsAfterFinished": CLAIM_TTL_SECONDS if ttl is None else ttl,
            },
        },
    }


def assignment(
    run: evaluationrun.EvaluationRun,
    spec: runspec.RunSpec,
    settings: manifests.Settings,
    *,
    cell: str,
    test_id: str,
    repeat: int,
    attempt: int,
    agent: str | None,
    run_key: bytes,
    sandbox_key: bytes,
) -> assignment_mod.Assignment:
    """What the bound sandbox's gateway and controller start ``cell`` from; its ledger key
    derived from ``run_key`` and wrapped for ``sandbox_key``."""
    ledger_cell = manifests.ledger_cell(cell, attempt)
    cell_key = keys.cell_key(run_key, ledger_cell)
    exchanges, size = settings.cell_caps
    return assignment_mod.Assignment(
        cell=cell,
        ledger_cell=ledger_cell,
        test_id=test_id,
        repeat=repeat,
        attempt=attempt,
        evaluation_run=manifests.identity(run)[1],
        timeout=run.spec.timeout_seconds or spec.spec.timeout_seconds,
        ledger_key=keys.wrap_cell_key(sandbox_key, ledger_cell, cell_key),
        agent=agent,
        judge_model=manifests.judge_model(run, spec, settings),
        skip_judge=run.spec.skip_judge,
        skip_simulate=run.spec.skip_simulate,
        ledger=cellenv.ledger_url(spec, settings),
        max_cell_exchanges=exchanges,
        max_cell_bytes=size,
    )


def network_policy(
    spec: runspec.RunSpec, fence: netpol.Fence, settings: manifests.Settings, pool: str
) -> dict[str, Any]:
    """The pool's NetworkPolicy: a run's rules (nothing in; DNS, the judge and the declared
    egress out) for the pods of ``pool``, owned by the RunSpec."""
    body = fence.rules(settings)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": manifests.fit(pool, manifests.DNS_LABEL_MAX - 5) + "-pool",
            "namespace": spec.metadata["namespace"],
            "labels": {**_pool_labels(spec, pool), manifests.LABEL_COMPONENT: "network-policy"},
            "ownerReferences": [_owner(spec)],
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_POOL: pool}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": body,
        },
    }
