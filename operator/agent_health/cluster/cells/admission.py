"""What the operator's own rules refuse in a RunSpec, before any pod of it is made.

A RunSpec that passes its CRD schema may still ask for what this operator's admin does not
allow; :func:`admit` refuses it with a :class:`~agent_health.cluster.errors.SpecError` that
names the field and the rule (the RunSpec's ``Resolved=False``, reason ``NotAllowed``,
before its discovery pod runs any of the suite's code; an EvaluationRun of it fails the same
way should the operator's rules change between the two):

* ``isolation.runtimeClassName`` other than the RuntimeClass every cell must use
  (``--cell-runtime-class``);
* target or peer ``resources`` beyond the operator's cap, or unreadable
  (:mod:`.resources`);
* a warm pool of more sandboxes than the operator keeps warm in a namespace
  (``--max-warm-replicas``).

Which Secrets a RunSpec may name is decided when a run starts, by the labels on them
(:mod:`..reconcile.secretrefs`); :func:`refuse_our_secrets` is the cell's last line, by
name alone, so that no pod is ever made that hands one of agent-health's own Secrets to a
target or peer.
"""

from __future__ import annotations

from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import cellsecrets, manifests, resources


def admit(spec: runspec.RunSpec, settings: manifests.Settings) -> None:
    """Refuse a RunSpec the operator's rules forbid (a SpecError naming the field and rule):
    a RuntimeClass other than the one every cell must use, resources beyond the cap."""
    name = f"RunSpec {spec.metadata.get('namespace', '?')}/{spec.metadata.get('name', '?')}"
    chosen = spec.spec.isolation.runtime_class_name
    if settings.runtime_class is not None and chosen not in (None, settings.runtime_class):
        raise errors.SpecError(
            f"{name} spec.isolation.runtimeClassName: {chosen!r} is not allowed: this operator "
            f"runs every cell with RuntimeClass {settings.runtime_class!r} "
            "(--cell-runtime-class); leave the field out or name that one"
        )
    resources_of(spec, settings, None)
    for peer in spec.spec.peers:
        resources_of(spec, settings, peer)
    for named in spec.spec.targets:  # an agent matrix's agents: each a target, the same cap
        where = f"{name} spec.targets[{named.name}].resources"
        cells = settings.resources
        resources.effective(cells.target, named.resources, cells.max, where=where)
    warm = spec.spec.isolation.warm_pool
    cap = settings.max_warm_replicas
    if warm is not None and cap is not None and warm.replicas > cap:
        raise errors.SpecError(
            f"{name} spec.isolation.warmPool.replicas: {warm.replicas} is more than this "
            f"operator keeps warm in one namespace ({cap}, --max-warm-replicas): ask for at "
            f"most {cap}"
        )


def resources_of(
    spec: runspec.RunSpec, settings: manifests.Settings, peer: runspec.Peer | None
) -> dict[str, Any]:
    """The target's (``peer`` None) or a peer's resources: the RunSpec's within the cap."""
    name = f"RunSpec {spec.metadata.get('namespace', '?')}/{spec.metadata.get('name', '?')}"
    cells = settings.resources
    if peer is None:
        where = f"{name} spec.target.resources"
        return resources.effective(cells.target, spec.spec.target.resources, cells.max, where=where)
    where = f"{name} spec.peers[{peer.name}].resources"
    return resources.effective(cells.peer, peer.resources, cells.max, where=where)


def refuse_our_secrets(spec: runspec.RunSpec, settings: manifests.Settings) -> None:
    """A target or peer that read our tokens or ledger key could speak as the controller."""
    for where, env in spec.environments():
        for var in env:
            ref = var.value_from.secret_key_ref if var.value_from is not None else None
            if ref is None:
                continue
            if (
                cellsecrets.OUR_NAMES.match(ref.name)
                or ref.name == settings.ledger_credentials_secret
            ):
                raise errors.SpecError(
                    f"RunSpec {spec.metadata.get('name', '?')}: {where}[{var.name}] reads "
                    f"Secret {ref.name!r}, one of agent-health's own (principal tokens, ledger "
                    "key or ledger credentials); the target and peers must never hold them"
                )
