"""Which Secrets a RunSpec may have the operator use: only those offered to runs, never ours.

The operator can read every Secret of the namespaces it serves and creates Pods there, so
whatever Secret a RunSpec names, the operator would fetch (``spec.judge.secretRef``: its
value then goes to the RunSpec's own ``baseUrl`` as an API key) or hand to a container
(``env[].valueFrom.secretKeyRef`` of the target, every agent of a matrix and the peers: the
kubelet resolves it for the Pod the operator made). A tenant who may create RunSpecs but not
read a Secret would read it through the operator — a confused deputy. So every Secret a
RunSpec names must be

* **offered**: labelled ``agenthealth.dev/usable-by-runs=true`` by someone who may label
  Secrets in that namespace (``kubectl label secret NAME agenthealth.dev/usable-by-runs=true``);
* **not agent-health's own**, whatever its labels: no Secret owned by an EvaluationRun or
  RunSpec or labelled ``app.kubernetes.io/managed-by: agent-health`` (cell tokens, ledger
  keys), none named like one (``<cell>-tokens``, ``<run>-tokens-N``, ``<run>-ledger-key``: a
  Secret squatting a future cell's or run's name), none of the operator's configured
  Secrets (ledger credentials, image pull Secrets) and nothing in the operator's own
  namespace, where its credentials live.

:func:`check` applies the rule to every reference of a RunSpec when a run starts (the run
fails with ``SecretNotOffered``, the message naming the field, the Secret and the label to
add); :func:`read` applies it each time the judge service reads a judge's key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import apigroup, errors, kube
from agent_health.cluster.api import meta, runspec
from agent_health.cluster.cells import cellsecrets, manifests

LABEL = f"{apigroup.GROUP}/usable-by-runs"
OFFERED = "true"


@dataclasses.dataclass(frozen=True)
class Own:
    """The operator's own Secrets: never offered to a run, whatever their labels say."""

    namespace: str | None = None
    """The operator's namespace: every Secret there is the operator's."""
    names: frozenset[str] = frozenset()
    """Secrets the operator uses in every namespace (ledger credentials, image pull)."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """One Secret a RunSpec names, and the field that names it."""

    field: str
    name: str
    key: str


def references(spec: runspec.RunSpec) -> list[Reference]:
    """Every Secret ``spec`` has the operator use, with the field naming it."""
    found: list[Reference] = []
    judge = spec.spec.judge
    if judge is not None and judge.secret_ref is not None:
        ref = judge.secret_ref
        found.append(Reference("spec.judge.secretRef", ref.name, ref.key))
    otlp = spec.spec.otlp
    if otlp is not None and otlp.headers_secret_ref is not None:
        ref = otlp.headers_secret_ref
        found.append(Reference("spec.otlp.headersSecretRef", ref.name, ref.key))
    for where, env in spec.environments():
        for var in env:
            ref_ = _secret_of(var)
            if ref_ is not None:
                field = f"{where}[{var.name}].valueFrom.secretKeyRef"
                found.append(Reference(field, ref_.name, ref_.key))
    return found


async def check(
    api: kube.Client, namespace: str, spec: runspec.RunSpec, own: Own, *, judged: bool = True
) -> None:
    """Every Secret ``spec`` names is offered and not ours; else a
    :class:`~agent_health.cluster.errors.SecretNotOffered` naming the first that is not.

    A run that skips judging (``skipJudge``) never reads the judge's Secret, so it need not
    exist: a keyless first run of a RunSpec that names one works."""
    for ref in references(spec):
        if judged or ref.field != "spec.judge.secretRef":
            await read(api, namespace, ref, own)


async def read(api: kube.Client, namespace: str, ref: Reference, own: Own) -> dict[str, Any]:
    """The Secret ``ref`` names, if the rule lets a run use it (see the module docstring).

    Raises :class:`~agent_health.cluster.errors.SecretNotOffered` (the tenant's to fix) or
    :class:`~agent_health.cluster.kube.ApiError` (the API server failed: try again)."""
    where = f"{ref.field} names Secret {namespace}/{ref.name}"
    why = _ours(namespace, ref.name, None, own)
    if why is not None:
        raise errors.SecretNotOffered(f"{where}, {why}; a run can never use it")
    try:
        body = await api.get(kube.SECRETS, namespace, ref.name)
    except kube.ApiError as err:
        if err.status == 404:
            raise errors.SecretNotOffered(f"{where}, which does not exist") from err
        raise
    why = _ours(namespace, ref.name, body, own)
    if why is not None:
        raise errors.SecretNotOffered(f"{where}, {why}; a run can never use it")
    labels = (body.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL) != OFFERED:
        raise errors.SecretNotOffered(
            f"{where}, which is not offered to runs: the operator uses a Secret for a RunSpec "
            f"only when it is labelled {LABEL}={OFFERED} (kubectl label secret {ref.name} "
            f"-n {namespace} {LABEL}={OFFERED})"
        )
    return body


def _ours(namespace: str, name: str, body: Mapping[str, Any] | None, own: Own) -> str | None:
    """Why the Secret is agent-health's own, or ``None``."""
    if own.namespace is not None and namespace == own.namespace:
        return "in the operator's own namespace, where its credentials live"
    if name in own.names:
        return "one the operator itself uses (ledger credentials or image pull)"
    if cellsecrets.OUR_NAMES.match(name):
        return "named like agent-health's own (cell tokens or a run's ledger key)"
    metadata = (body or {}).get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(manifests.LABEL_MANAGED_BY) == manifests.MANAGED_BY:
        return f"one of agent-health's own ({manifests.LABEL_MANAGED_BY}: {manifests.MANAGED_BY})"
    for owner in metadata.get("ownerReferences") or []:
        if str(owner.get("apiVersion", "")).startswith(f"{apigroup.GROUP}/"):
            return f"one of agent-health's own (owned by {owner.get('kind')} {owner.get('name')})"
    return None


def _secret_of(var: meta.EnvVar) -> meta.SecretKeyRef | None:
    return var.value_from.secret_key_ref if var.value_from is not None else None
