"""Creating one cell: its object (Pod or Sandbox), then its token Secret owned by it.

Writes per cell: the cell, then its token Secret owned by the cell — so deleting the cell
(``ttlSecondsAfterFinished``, a retry, the run's deletion) also collects its Secret. Cell
names are deterministic (:func:`.manifests.cell_name`) and creation is idempotent (409
AlreadyExists means "already there"), so an operator that restarts mid-creation creates
nothing twice. The attempt number rides on an annotation (:data:`.plan.ATTEMPT`).
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import kube
from agent_health.cluster.cells import cellpod, cellsecrets, observed, sandbox
from agent_health.cluster.reconcile import lifecycle, plan


@dataclasses.dataclass
class Creator:
    """Makes the cells of started runs; see the module docstring."""

    board: lifecycle.Board

    async def create(self, run: plan.Run, cell: plan.Cell) -> observed.Failure | None:
        """Create the cell and its Secret; why it could not be created, if it could not."""
        if not self.board.live(run):
            return None
        assert run.spec is not None
        assert run.settings is not None
        cell.state = "active"
        manifest = cellpod.cell(
            run.model, run.spec, test_id=cell.test.id, repeat=cell.repeat,
            digests=run.spec.status.image_digests if run.spec.status else {},
            settings=run.settings, attempt=cell.attempt,
        )  # fmt: skip
        manifest["metadata"].setdefault("annotations", {})[plan.ATTEMPT] = str(cell.attempt)
        if manifest["kind"] == sandbox.KIND:
            template = manifest["spec"]["podTemplate"]["metadata"]
            template["annotations"][plan.ATTEMPT] = str(cell.attempt)
        try:
            resource = lifecycle.resource_of(run)
            stored, _ = await self.board.api.ensure(resource, run.ref.namespace, manifest)
            await self.secret(run, cell, stored)
        except kube.ApiError as err:
            return "other", f"cannot create cell {cell.name}: {err}"
        return None

    async def secret(self, run: plan.Run, cell: plan.Cell, owner: Mapping[str, Any]) -> None:
        """The cell's token Secret, owned by the cell object itself."""
        assert run.spec is not None
        tokens = {p: secrets.token_urlsafe(32) for p in cellsecrets.principals(run.spec)}
        manifest = cellsecrets.token_secret(
            run.model, run.spec, test_id=cell.test.id, repeat=cell.repeat, tokens=tokens
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
        stored, _ = await self.board.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        token = base64.b64decode(stored["data"][cellsecrets.CONTROLLER]).decode()
        if cell.state == "active":
            cell.token = token
            self.board.tokens[token] = run.ref
