"""A run's ConfigMap ledger made the run's own before its first cell (:mod:`..cells.ledgerwriter`).

:func:`prepare` creates the ledger ConfigMap, owned by the run; the operator alone writes it
(:mod:`.collector`: the cells' gateways write their records to their logs).
:func:`share` gives each cell of a ConfigMap ledger its share of the ConfigMap: a quarter
is kept for the controller's records, the rest split over every attempt the run may make
(tests × repeats × (1 + infra retries)), so a target that floods its gateway with calls
fills its own share and no other cell's.

It is created once: after a restart the stored object is read back (409) and used only if
the run owns it. One that another owner holds — a ConfigMap another run records into —
fails the run (``LedgerNotOwned``): the operator never records a run into an object it did
not make for that run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors, kube
from agent_health.cluster.cells import ledgerurl, ledgerwriter, manifests
from agent_health.cluster.reconcile import plan


async def prepare(api: kube.Client, run: plan.Run, url: str) -> None:
    """Make ``url``'s ConfigMap the run's (nothing to make for any other ledger)."""
    if not ledgerurl.collected(url):
        return
    _, _, name = url.partition("://")[2].strip("/").partition("/")
    manifest = ledgerwriter.configmap(run.model, name)
    stored, _ = await api.ensure(kube.CONFIGMAPS, run.ref.namespace, manifest)
    _check_owned(run, manifest, stored)


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
    why = "another run records into it"
    raise errors.SpecError(
        f"{kind} {name} already exists in namespace {run.ref.namespace} and is not "
        f"EvaluationRun {run.ref.name}'s ({why}); the operator will not record a run into a "
        "ledger object it did not make for that run: put {run} in the "
        "ledger URL's name, or delete the object and create the run again"
    )
