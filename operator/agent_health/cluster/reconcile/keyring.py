"""The tokens and ledger keys of a run's cells: a few shared Secrets per run, not one per cell.

Every attempt at a cell needs a token per trusted principal and a ledger key of its own
(:mod:`.cellsecrets`). A Secret per cell would be one API write per cell, as many as the
cells' pods; so the first attempts of a run's planned cells share Secrets:
``<run>-tokens-N`` holds the items of the cells at plan positions ``N·k … N·k+k-1``
(``k`` = :func:`.cellsecrets.cells_per_secret`: as many as fit in half a MiB), owned by the
run. :meth:`Keyring.shared` makes Secret ``N`` when the first of its cells is created — with
fresh tokens and the derived ledger keys of every cell it covers — or reads it back when it
exists (the operator restarted), and gives the cell its :class:`.cellsecrets.Place` there and
its controller token (for the judge service's allow-list).

What does not change: a pod mounts its own items and no others, one volume per container
(``secret.items``), so no container sees another cell's token or key, nor the target any.
A Secret of that name that another owner holds is never read (its tokens and keys would be
someone else's): the cell fails with the reason. A retried attempt needs a new token and key
(the last attempt's may be known to whatever broke it), and a cell the Secret does not list
(the plan changed since it was made) needs its own: for both :meth:`Keyring.shared` answers
``None`` and the cell gets a Secret of its own, owned by its pod, as before.

What the shared Secrets cost: one write per ~1,000 cells (with one peer) instead of one per
cell. What they give away: whoever may read Secrets in the namespace — and, through the node
authorizer, the kubelet of a node running any cell of the batch — reads the whole batch's
tokens and keys, where a Secret per cell exposed one cell's to the node that ran it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

from agent_health.cluster import kube
from agent_health.cluster.cells import cellsecrets, manifests, observed
from agent_health.cluster.reconcile import lifecycle, plan
from agent_health.ledger import keys

Data = dict[str, str]
"""A stored Secret's ``data``: item → base64 value."""


@dataclasses.dataclass(frozen=True)
class Shared:
    """A cell's place in its run's shared Secret, and its controller token."""

    place: cellsecrets.Place
    token: str


@dataclasses.dataclass
class Keyring:
    """Makes and reads the runs' shared token Secrets; see the module docstring."""

    board: lifecycle.Board

    async def shared(self, run: plan.Run, cell: plan.Cell) -> Shared | observed.Failure | None:
        """The cell's items in its run's shared Secret (made or read now); ``None`` when the
        cell needs a Secret of its own; why it cannot have either, if it cannot."""
        if cell.attempt != 0 or run.spec is None:
            return None
        per = cellsecrets.cells_per_secret(run.spec)
        index = run.position(cell.name) // per
        pending = run.keyring.get(index)
        if pending is None:
            pending = run.keyring[index] = asyncio.ensure_future(self._secret(run, index, per))
        try:
            found: Data | observed.Failure = await asyncio.shield(pending)
        except Exception:
            self._forget(run, index, pending)
            raise
        if isinstance(found, tuple):
            self._forget(run, index, pending)
            return found
        place = cellsecrets.Place.shared(run.ref.name, index, cell.name)
        wanted = [cellsecrets.secret_key(p) for p in cellsecrets.principals(run.spec)]
        if not all(place.item(k) in found for k in [*wanted, cellsecrets.CELL_LEDGER_KEY]):
            return None
        token = base64.b64decode(found[place.item(cellsecrets.CONTROLLER)]).decode()
        return Shared(place, token)

    @staticmethod
    def _forget(run: plan.Run, index: int, pending: asyncio.Future[Any]) -> None:
        """A Secret that could not be made or read: the next cell of its batch tries again."""
        if run.keyring.get(index) is pending:
            del run.keyring[index]

    async def _secret(self, run: plan.Run, index: int, per: int) -> Data | observed.Failure:
        assert run.spec is not None
        names = run.planned()[index * per : (index + 1) * per]
        items = {
            name: (
                cellsecrets.new_tokens(run.spec),
                keys.cell_key(run.key, manifests.ledger_cell(name, 0)),
            )
            for name in names
        }
        manifest = cellsecrets.shared_secret(run.model, index, items)
        name = manifest["metadata"]["name"]
        try:
            stored, _ = await self.board.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        except kube.ApiError as err:
            return "other", f"cannot create the run's token Secret {name}: {err}"
        if not plan.owned_by(stored, run.uid):
            return "other", (
                f"Secret {name} already exists in namespace {run.ref.namespace} and is not "
                f"EvaluationRun {run.ref.name}'s (its owners: {owners(stored)}); the operator "
                "will not use tokens or keys it did not make: delete the Secret and run again"
            )
        data: Data = stored.get("data") or {}
        return data


def owners(body: dict[str, Any]) -> str:
    """An object's owners, for a message."""
    found = body.get("metadata", {}).get("ownerReferences") or []
    return ", ".join(f"{o.get('kind')}/{o.get('name')} uid {o.get('uid')}" for o in found) or "none"
