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
* **the target holds none of them**: the sandbox controller rewrites *every* env reference to
  the template's logical name of that Secret, in every container, so the name is one no
  tenant can predict (``cell-keys-<random>``, made with the template, :func:`new_secret_name`)
  and reserved besides (a RunSpec naming anything ``cell-keys`` is refused); :func:`leak`
  finds a container that would reach more of it than its own token, in the template the
  operator makes and in each bound sandbox before it is handed a cell;
* **only what the operator made**: the template's and pool's name ends in a digest of the
  template the operator generates (:func:`pool_name`: a changed RunSpec or operator setting is
  a new pool, never an old pool's sandboxes), the digest is recorded on both
  (:data:`ANNOTATION_DIGEST`), and a stored template or pool that differs from what the
  operator would make — a field, the pool's ``sandboxTemplateRef`` — is refused
  (:func:`difference`); so is, at the hand-over, a bound sandbox whose pod runs other
  containers than the template's (:func:`drift`);
* **within quota**: with ``--sandbox-queueing admit`` each pooled pod carries the RunSpec's
  queue (else the operator's default), so an idle warm sandbox holds Kueue quota as a running
  cell does; and the operator keeps at most ``--max-warm-replicas`` warm sandboxes up in
  one namespace, over all its pools (:mod:`..reconcile.pools`);
* **images pinned by digest**, as in every cell;
* **the fence**: the pooled pods carry the pool's label, which a NetworkPolicy of the same
  rules as a run's selects (:func:`network_policy`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
from collections.abc import Collection, Mapping
from typing import Any

from agent_health.cluster import apigroup, errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    cellenv,
    cellgateway,
    cellparts,
    cellsecrets,
    kueue,
    manifests,
    netpol,
    podsecurity,
)
from agent_health.ledger import assignment as assignment_mod
from agent_health.ledger import keys

GROUP, VERSION = "extensions.agents.x-k8s.io", "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
LABEL_POOL = f"{apigroup.GROUP}/pool"
ANNOTATION_KEEP = f"{apigroup.GROUP}/keep-seconds"
"""On a pool: its RunSpec's ``keepSeconds``, for an operator that starts with the pool up."""
ANNOTATION_DIGEST = f"{apigroup.GROUP}/spec-digest"
"""On a template and its pool: the sha256 of the ``spec`` the operator generated for it."""
DIGEST_CHARS = 10
"""Of the template's digest, in the pool's name."""
_PLACEHOLDER = "pool"
"""The pool's name and Secret's logical name while the template is digested for its name."""
DEFAULT_KEEP_SECONDS: int = runspec.WarmPool.model_fields["keep_seconds"].default
LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type"
GENERATED_SECRETS = "extensions.agents.x-k8s.io/generated-secrets"
CLAIM_TTL_SECONDS = 3600
"""How long a finished claim (and its sandbox, and the pod's logs) is kept when the run sets
no ``ttlSecondsAfterFinished`` of its own."""


def pool_name(spec: runspec.RunSpec, agent: str | None, digest: str) -> str:
    """``<runspec>[-<agent>]-g<generation>-<digest>``: the template's and the pool's name,
    ``digest`` being the template's (:func:`template`): what the operator would make for the
    RunSpec generation, with its settings (images, resources, RuntimeClass, queue)."""
    name = str(spec.metadata.get("name") or "")
    generation = int(spec.metadata.get("generation") or 0)
    suffix = f"-g{generation}-{digest[:DIGEST_CHARS]}"
    base = name if agent is None else f"{name}-{agent}"
    return manifests.fit(base, manifests.DNS_LABEL_MAX - len(suffix)) + suffix


def new_secret_name() -> str:
    """A logical name for a new template's generated Secret that no tenant can predict."""
    return f"{cellsecrets.POOLED_SECRET}-{secrets.token_hex(8)}"


def digest(spec_body: Mapping[str, Any]) -> str:
    """The sha256 of an object's ``spec`` as canonical JSON."""
    text = json.dumps(spec_body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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
    pool: str,
    secret: str,
) -> dict[str, Any]:
    """The pod template of a pooled cell of ``spec`` (``for_agent(agent)`` of a matrix) in
    ``pool``, its tokens from the generated Secret ``secret``: every container of a cold
    cell, none told its cell (module docstring)."""
    spec = spec.for_agent(agent)
    cellparts.check(spec, settings)
    controller_image, volumes, suite_mounts = manifests.suite_source(spec, digests, settings)
    tokens = cellparts.Tokens.generated(spec, secret)
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
                secret,
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
    found = leak(pod_spec, spec, {secret})
    if found is not None:  # whatever the RunSpec says, no pod of ours gives one away
        raise errors.SpecError(
            f"RunSpec {spec.metadata.get('name', '?')}: the pooled pod's {found}; the "
            "operator makes no sandbox whose target holds another principal's key or token"
        )
    # With --sandbox-queueing admit, each pooled pod is a Kueue workload of the RunSpec's
    # queue: a warm sandbox holds quota while it waits, as a running cell does.
    queue = kueue.queue_of(spec, None, settings.default_queue) if admitted(settings) else None
    return {
        "metadata": {
            "labels": {**_pool_labels(spec, pool), **kueue.labels(queue)},
            "annotations": podsecurity.skip_cloud_identity(pod_spec, keep=cellgateway.NAME),
        },
        "spec": pod_spec,
    }


def admitted(settings: manifests.Settings) -> bool:
    """Whether Kueue admits sandboxes' pods (``--sandbox-queueing admit``)."""
    return settings.sandbox_queueing == "admit"


def template(
    spec: runspec.RunSpec,
    *,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    agent: str | None = None,
    secret: str,
) -> dict[str, Any]:
    """The ``SandboxTemplate`` of the pool, owned by the RunSpec: named by
    :func:`pool_name` after the digest of what it holds (its generated Secret's logical name,
    ``secret``, and its own name left out, so that the name is the same whatever ``secret``
    is), the full digest recorded in :data:`ANNOTATION_DIGEST`."""

    def spec_of(pool: str, secret: str) -> dict[str, Any]:
        pod = pooled_pod(
            spec, digests=digests, settings=settings, agent=agent, pool=pool, secret=secret
        )
        return {
            "podTemplate": pod,
            "generatedSecrets": [cellparts.generated_secret(spec.for_agent(agent), secret)],
            # A claim never changes a pooled cell: no env, no volumes of its own.
            "envVarsInjectionPolicy": "Disallowed",
        }

    name = pool_name(spec, agent, digest(spec_of(_PLACEHOLDER, _PLACEHOLDER)))
    body = {**_object("SandboxTemplate", spec, name), "spec": spec_of(name, secret)}
    body["metadata"]["annotations"] = {ANNOTATION_DIGEST: digest(body["spec"])}
    return body


def secret_of(stored: Mapping[str, Any]) -> str | None:
    """The logical name of a stored template's generated Secret, when it is one the operator
    would have made (:func:`new_secret_name`); ``None`` otherwise."""
    declared = (stored.get("spec") or {}).get("generatedSecrets")
    if not isinstance(declared, list) or len(declared) != 1 or not isinstance(declared[0], dict):
        return None
    name = declared[0].get("name")
    prefix = f"{cellsecrets.POOLED_SECRET}-"
    if not isinstance(name, str) or not name.startswith(prefix):
        return None
    rest = name.removeprefix(prefix)
    return name if len(rest) == 16 and all(c in "0123456789abcdef" for c in rest) else None


def pool(
    spec: runspec.RunSpec, replicas: int, *, name: str, agent: str | None = None
) -> dict[str, Any]:
    """The ``SandboxWarmPool`` ``name`` (its template's) of ``replicas`` sandboxes, the digest
    of its ``spec`` but ``replicas`` (which the operator scales) recorded on it."""
    body = _object("SandboxWarmPool", spec, name)
    warm_pool = spec.spec.isolation.warm_pool
    keep = warm_pool.keep_seconds if warm_pool is not None else 0
    fixed = {"sandboxTemplateRef": {"name": name}}
    body["metadata"]["annotations"] = {ANNOTATION_KEEP: str(keep), ANNOTATION_DIGEST: digest(fixed)}
    return {**body, "spec": {"replicas": replicas, **fixed}}


def difference(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """The first field where a stored template or pool is not what the operator makes
    (``wanted``: :func:`template` or :func:`pool`), ``None`` when it is. A pool's
    ``replicas`` is the operator's to scale; everything else of the ``spec`` must be equal,
    and so must the recorded digest."""
    have = dict(stored.get("spec") or {})
    want = dict(wanted["spec"])
    if wanted.get("kind") == "SandboxWarmPool":
        have.pop("replicas", None)
        want.pop("replicas", None)
    field = _first_difference("spec", have, want)
    if field is not None:
        return field
    recorded = (stored["metadata"].get("annotations") or {}).get(ANNOTATION_DIGEST)
    if recorded != wanted["metadata"]["annotations"][ANNOTATION_DIGEST]:
        return f"metadata.annotations[{ANNOTATION_DIGEST}]"
    return None


def _first_difference(where: str, have: Any, want: Any) -> str | None:
    if isinstance(want, dict) and isinstance(have, dict):
        for key in sorted(set(want) | set(have)):
            if key not in want or key not in have:
                return f"{where}.{key}"
            found = _first_difference(f"{where}.{key}", have[key], want[key])
            if found is not None:
                return found
        return None
    if isinstance(want, list) and isinstance(have, list):
        if len(want) != len(have):
            return where
        for n, (one, other) in enumerate(zip(have, want, strict=True)):
            found = _first_difference(f"{where}[{n}]", one, other)
            if found is not None:
                return found
        return None
    return None if have == want and type(have) is type(want) else where


_CONTAINER_FIELDS = (
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "volumeMounts",
    "securityContext",
    "resources",
)
_POD_FIELDS = (
    "volumes",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "runtimeClassName",
    "serviceAccountName",
    "automountServiceAccountToken",
    "securityContext",
    "ephemeralContainers",
)


def drift(
    pod_spec: Mapping[str, Any], made: Mapping[str, Any], renamed: Mapping[str, str]
) -> str | None:
    """The first field where a bound sandbox's pod spec runs something other than the pod the
    operator made for its pool (``made``: the template's), ``None`` when it runs that.

    Compared: the containers (names and order, and each one's image, command, arguments,
    env, mounts, security context and resources) and the pod's volumes, host namespaces,
    identity and RuntimeClass — what decides what runs and what it may reach; metadata, and
    fields the sandbox controller or the API server may add elsewhere, are not. ``renamed``
    maps a sandbox's own generated Secret to the template's logical name for it (the
    controller rewrites env references from one to the other)."""

    def env_of(container: Mapping[str, Any]) -> Any:
        env = copy.deepcopy(container.get("env"))
        for var in env or []:
            ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref.get("name") in renamed:
                ref["name"] = renamed[ref["name"]]
        return env

    for kind in ("initContainers", "containers"):
        have, want = pod_spec.get(kind) or [], made.get(kind) or []
        if [c.get("name") for c in have] != [c.get("name") for c in want]:
            return kind
        for n, (one, other) in enumerate(zip(have, want, strict=True)):
            for field in _CONTAINER_FIELDS:
                found = env_of(one) if field == "env" else one.get(field)
                if found != other.get(field):
                    return f"{kind}[{n}] ({other.get('name')}).{field}"
    for field in _POD_FIELDS:
        if pod_spec.get(field) != made.get(field):
            return field
    return None


def leak(pod_spec: Mapping[str, Any], spec: runspec.RunSpec, names: Collection[str]) -> str | None:
    """Where ``pod_spec`` gives a container more of a pooled sandbox's generated Secret than
    its own share, ``None`` when no container does. The Secret is any of ``names`` (its
    logical name in the template, a sandbox's own) or any name with ``cell-keys`` in it.

    The gateway may read every item; the controller and each peer (``spec``'s, as the cell's
    agent sees it) their own token; the target, and any other container, nothing. No
    ``envFrom`` and no volume may name the Secret at all."""

    def generated(name: object) -> bool:
        return isinstance(name, str) and (name in names or cellsecrets.POOLED_SECRET in name)

    own: dict[str, set[str] | None] = {
        cellgateway.NAME: None,  # every item
        cellparts.CONTROLLER: {cellsecrets.secret_key(cellparts.CONTROLLER)},
    }
    for peer in spec.spec.peers:
        principal = cellsecrets.secret_key(f"peer:{peer.name}")
        own[cellparts.peer_container_name(peer.name)] = {principal}
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for n, container in enumerate(pod_spec.get(kind) or []):
            name = container.get("name")
            where = f"{kind}[{n}] ({name})"
            allowed = own.get(str(name), set())
            for m, source in enumerate(container.get("envFrom") or []):
                ref = (source.get("secretRef") or {}).get("name")
                if generated(ref):
                    return f"{where}.envFrom[{m}] takes every item of Secret {ref}"
            for m, var in enumerate(container.get("env") or []):
                ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
                mine = allowed is None or ref.get("key") in allowed
                if generated(ref.get("name")) and not mine:
                    return (
                        f"{where}.env[{m}] ({var.get('name')}) reads item "
                        f"{ref.get('key')!r} of Secret {ref.get('name')}"
                    )
    for n, volume in enumerate(pod_spec.get("volumes") or []):
        sources = [(volume.get("secret") or {}).get("secretName")]
        for source in (volume.get("projected") or {}).get("sources") or []:
            sources.append((source.get("secret") or {}).get("name"))
        found = next((ref for ref in sources if generated(ref)), None)
        if found is not None:
            return f"volumes[{n}] ({volume.get('name')}) mounts Secret {found}"
    return None


def keep_seconds(pool_body: Mapping[str, Any]) -> int:
    """How long a pool stays up after its last run (its annotation; the default without)."""
    found = (pool_body["metadata"].get("annotations") or {}).get(ANNOTATION_KEEP)
    try:
        return max(0, int(found)) if found is not None else DEFAULT_KEEP_SECONDS
    except ValueError:
        return DEFAULT_KEEP_SECONDS


def claim(
    run: evaluationrun.EvaluationRun,
    *,
    test_id: str,
    repeat: int,
    agent: str | None = None,
    pool: str,
) -> dict[str, Any]:
    """The ``SandboxClaim`` of one cell on ``pool``: the cell's name and labels, owned by the
    run."""
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
            "warmPoolRef": {"name": pool},
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
