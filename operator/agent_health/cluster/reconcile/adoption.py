"""Taking over the cells of a run that already exist (the operator restarted mid-run).

The run's cells are listed by label; those owned by this run (by uid) and in its plan are
adopted: marked active with their attempt, their controller token read back from their
Secret — only one that pod owns (by uid) — or the Secret created if the cell is still
waiting or running without one (:meth:`.creation.Creator.secret` refuses one of that name
that another owner holds, and stops the cell), and
their current state applied as an event. Planned cells that do not exist are queued.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from agent_health.cluster import kube
from agent_health.cluster.cells import cellsecrets, manifests, observed
from agent_health.cluster.reconcile import creation, handoff, lifecycle, plan, reactions


@dataclasses.dataclass
class Adoption:
    """Rebuilds a run's state from the cells that exist; see the module docstring."""

    board: lifecycle.Board
    creator: creation.Creator
    reactions: reactions.Reactions
    handoff: handoff.Handoff

    async def adopt(self, run: plan.Run) -> None:
        """Take over the cells that already exist, with their tokens; queue the rest."""
        api = self.board.api
        labels = manifests.run_labels(run.model, "cell")
        found = await api.list(lifecycle.resource_of(run), run.ref.namespace, labels)
        mine = [
            b for b in found if plan.owned_by(b, run.uid) and b["metadata"]["name"] in run.cells
        ]
        if not mine:
            run.queue.extend(run.cells)
            return
        stored = await api.list(kube.SECRETS, run.ref.namespace, labels)
        secrets = {s["metadata"]["name"]: s for s in stored}
        adopted = {b["metadata"]["name"] for b in mine}
        run.queue.extend(n for n in run.cells if n not in adopted)
        for body in mine:
            cell = run.cells[body["metadata"]["name"]]
            cell.attempt = plan.attempt(body)
            cell.state = "active"
            run.active.add(cell.name)
            secret = secrets.get(cellsecrets.token_secret_name(cell.name, cell.attempt), {})
            # Only a Secret this very pod owns holds tokens the operator made for it.
            owned = bool(secret) and plan.owned_by(secret, body["metadata"]["uid"])
            data = (secret.get("data") or {}) if owned else {}
            if cellsecrets.CONTROLLER in data:
                cell.token = base64.b64decode(data[cellsecrets.CONTROLLER]).decode()
                self.board.tokens[cell.token] = run.ref
            elif observed.state(body) in ("waiting", "running"):
                self.board.spawn(self._secret(run, cell, body))
            self.handoff.keep_deadline(run, cell, plan.created_at(body))
            self.reactions.apply(run, "ADDED", body)

    async def _secret(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        """Make the Secret a live cell lacks; one that cannot be made fails the cell."""
        failure = await self.creator.secret(run, cell, body)
        if failure is not None:
            await self.handoff.infra(run, cell, body, failure)
