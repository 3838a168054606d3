"""A run's ConfigMap ledger made the run's own before its first cell (:mod:`..cells.ledgerwriter`).

:func:`prepare` creates the ledger ConfigMap, the ServiceAccount the run's cells run as, its
Role (``get``/``update`` on that ConfigMap only) and RoleBinding, each owned by the run.
:func:`share` gives each cell of a ConfigMap ledger its share of the ConfigMap: a quarter
is kept for the controller's records, the rest split over every attempt the run may make
(tests × repeats × (1 + infra retries)), so a target that floods its gateway with calls
fills its own share and no other cell's.

Each is created once: after a restart the stored object is read back (409) and used only
if the run owns it. One that another owner holds — a ConfigMap another run records into, a
Role someone made with that name — fails the run (``LedgerNotOwned``): the operator never
points a run's gateways at an object, or an identity, it did not make for that run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors, kube
from agent_health.cluster.cells import ledgerwriter, manifests
from agent_health.cluster.reconcile import plan


async def prepare(api: kube.Client, run: plan.Run, url: str) -> str | None:
    """Make ``url``'s ConfigMap and its writer the run's; the ServiceAccount its cells run
    as, or ``None`` when ``url`` names no ConfigMap ledger (cells keep the operator's
    ``--gateway-service-account``: an object store is reached with that identity)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() != "configmap":
        return None
    _, _, name = rest.strip("/").partition("/")
    model = run.model
    for resource, manifest in (
        (kube.CONFIGMAPS, ledgerwriter.configmap(model, name)),
        (kube.SERVICEACCOUNTS, ledgerwriter.service_account(model)),
        (kube.ROLES, ledgerwriter.role(model, name)),
        (kube.ROLEBINDINGS, ledgerwriter.role_binding(model)),
    ):
        stored, _ = await api.ensure(resource, run.ref.namespace, manifest)
        _check_owned(run, manifest, stored)
    return ledgerwriter.writer_name(model)


EXCHANGE_SHARE = 0.75
"""Of a ConfigMap ledger's bytes, what the exchanges of all cells may take together."""
MIN_CELL_BYTES = 1024
"""The smallest per-cell cap the gateway takes; a run with more attempts than a ConfigMap
can hold at that is better off with an object-store ledger (its append then fails)."""


def share(
    settings: manifests.Settings, url: str, attempts: int, configmap_bytes: int
) -> manifests.Settings:
    """``settings`` with each cell's byte cap no more than its share of a ConfigMap ledger
    (``attempts`` cells at most write into it); unchanged for any other ledger."""
    if url.partition("://")[0].lower() != "configmap":
        return settings
    fair = max(int(configmap_bytes * EXCHANGE_SHARE) // max(attempts, 1), MIN_CELL_BYTES)
    exchanges, current = settings.cell_caps
    capped = fair if current is None else min(current, fair)
    return dataclasses.replace(settings, cell_caps=(exchanges, capped))


def _check_owned(run: plan.Run, manifest: Mapping[str, Any], stored: Mapping[str, Any]) -> None:
    if plan.owned_by(stored, run.uid):
        return
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    why = "another run records into it" if kind == "ConfigMap" else "someone else made it"
    raise errors.SpecError(
        f"{kind} {name} already exists in namespace {run.ref.namespace} and is not "
        f"EvaluationRun {run.ref.name}'s ({why}); the operator will not have a run's gateways "
        "use a ledger object or identity it did not make for that run: put {run} in the "
        "ledger URL's name, or delete the object and create the run again"
    )
