"""Creating one cell: its object (Pod or Sandbox), with its tokens and ledger key.

Nothing is adopted by name alone: a Pod (or Sandbox) of the cell's name that another owner
holds is left alone and the cell fails; a Secret of its name that the cell (or, for a shared
one, the run) does not own is never read (its tokens and key would be someone else's) and
the cell is stopped.

Writes per cell: the cell alone, for a first attempt — its tokens and key are in the run's
shared Secret (:mod:`.keyring`, made before the first of its cells). A retried attempt (or a
cell the shared Secret lacks) is the cell, then its own token Secret owned by the cell — so
deleting the cell (``ttlSecondsAfterFinished``, a retry, the run's deletion) also collects
it. Cell names are deterministic (:func:`.manifests.cell_name`) and creation is idempotent
(409 AlreadyExists means "already there"), so an operator that restarts mid-creation creates
nothing twice. The attempt number rides on an annotation (:data:`.plan.ATTEMPT`).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import kube
from agent_health.cluster.cells import (
    cellpod,
    cellsecrets,
    manifests,
    observed,
    sandbox,
    warmpool,
)
from agent_health.cluster.reconcile import keyring, lifecycle, plan
from agent_health.ledger import keys


@dataclasses.dataclass
class Creator:
    """Makes the cells of started runs; see the module docstring."""

    board: lifecycle.Board
    keyring: keyring.Keyring

    async def create(self, run: plan.Run, cell: plan.Cell) -> observed.Failure | None:
        """Create the cell (and its own Secret, unless the run's shared one holds its items);
        why it could not be created, if it could not."""
        if not self.board.live(run):
            return None
        assert run.spec is not None
        assert run.settings is not None
        cell.state = "active"
        if run.spec.spec.isolation.warm_pool is not None:
            return await self._claim(run, cell)
        shared = await self.keyring.shared(run, cell)
        if isinstance(shared, tuple):
            return shared
        manifest = cellpod.cell(
            run.model,
            run.spec,
            test_id=cell.test.id,
            repeat=cell.repeat,
            digests=run.spec.status.image_digests if run.spec.status else {},
            settings=run.settings,
            attempt=cell.attempt,
            agent=cell.agent,
            place=shared.place if shared is not None else None,
        )
        counts = {plan.ATTEMPT: str(cell.attempt)}
        if cell.preempted:
            counts[plan.PREEMPTIONS] = str(cell.preempted)
        manifest["metadata"].setdefault("annotations", {}).update(counts)
        if manifest["kind"] == sandbox.KIND:
            template = manifest["spec"]["podTemplate"]["metadata"]
            template["annotations"].update(counts)
        stored = await self._ensure(run, cell, manifest)
        if isinstance(stored, tuple):
            return stored
        if shared is not None:
            self.allow(run, cell, shared.token)
            return None
        return await self.secret(run, cell, stored)

    async def _claim(self, run: plan.Run, cell: plan.Cell) -> observed.Failure | None:
        """A warm-pool cell: its claim on the pool. Its tokens are its sandbox's, read once
        the claim is bound (:meth:`.pools.Pools.assign`); it has no Secret of its own."""
        pool = run.pools[cell.agent]
        manifest = warmpool.claim(
            run.model, test_id=cell.test.id, repeat=cell.repeat, agent=cell.agent, pool=pool.name
        )
        manifest["metadata"]["annotations"][plan.ATTEMPT] = str(cell.attempt)
        stored = await self._ensure(run, cell, manifest)
        return stored if isinstance(stored, tuple) else None

    async def _ensure(
        self, run: plan.Run, cell: plan.Cell, manifest: dict[str, Any]
    ) -> dict[str, Any] | observed.Failure:
        """The cell's object, created or found; why not, if another owner holds its name."""
        resource = lifecycle.resource_of(run)
        try:
            stored, _ = await self.board.api.ensure(resource, run.ref.namespace, manifest)
        except kube.ApiError as err:
            return "other", f"cannot create cell {cell.name}: {err}"
        if not plan.owned_by(stored, run.uid):
            # Same name, another owner: someone made it before us. Not ours to use or delete.
            return "other", (
                f"a {stored.get('kind', 'Pod')} named {cell.name} already exists in namespace "
                f"{run.ref.namespace} and is not this run's (its owners: {_owners(stored)}); "
                "the operator will not adopt it: delete it and run again"
            )
        return stored

    def allow(self, run: plan.Run, cell: plan.Cell, token: str) -> None:
        """Let the judge service answer this live cell's controller ``token``."""
        if cell.state == "active":
            cell.token = token
            self.board.tokens[token] = run.ref

    async def secret(
        self, run: plan.Run, cell: plan.Cell, owner: Mapping[str, Any]
    ) -> observed.Failure | None:
        """The Secret of this attempt at the cell (tokens and its own ledger key), owned by
        the cell object itself; why it could not be made, if it could not."""
        assert run.spec is not None
        tokens = cellsecrets.new_tokens(run.spec)
        ledger_cell = manifests.ledger_cell(cell.name, cell.attempt)
        manifest = cellsecrets.token_secret(
            run.model,
            run.spec,
            test_id=cell.test.id,
            repeat=cell.repeat,
            tokens=tokens,
            ledger_key=keys.cell_key(run.key, ledger_cell),
            attempt=cell.attempt,
            agent=cell.agent,
        )
        metadata = owner["metadata"]
        manifest["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
            }
        ]
        name = manifest["metadata"]["name"]
        try:
            stored, _ = await self.board.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        except kube.ApiError as err:
            return "other", f"cannot create Secret {name} of cell {cell.name}: {err}"
        if not plan.owned_by(stored, metadata["uid"]):
            # A Secret of that name made by someone else holds tokens and a key they know:
            # the cell (ours) must not run with it. Stop the cell; never read the Secret.
            await self.board.api.delete(lifecycle.resource_of(run), run.ref.namespace, cell.name)
            return "other", (
                f"Secret {name} already exists in namespace {run.ref.namespace} and is not "
                f"cell {cell.name}'s (its owners: {_owners(stored)}); the operator will not use "
                "tokens or keys it did not make: delete the Secret and run again"
            )
        self.allow(run, cell, base64.b64decode(stored["data"][cellsecrets.CONTROLLER]).decode())
        return None


def _owners(body: Mapping[str, Any]) -> str:
    return keyring.owners(dict(body))
