"""Taking over the cells of a run that already exist (the operator restarted mid-run).

The run's cells are listed by label; those owned by this run (by uid) and in its plan are
adopted: marked active with their attempt, their controller token read back from where
their pod mounts it (:func:`.cellsecrets.place_of`) — the run's shared Secret if the run
owns it, the cell's own if that very pod owns it — or that Secret made if the cell is still
waiting or running without it (:mod:`.keyring` and :meth:`.creation.Creator.secret` refuse
one of that name that another owner holds, and stop the cell), and their current state
applied as an event. Planned cells that do not exist are queued.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from agent_health.cluster import kube
from agent_health.cluster.cells import cellsecrets, manifests, observed
from agent_health.cluster.reconcile import creation, handoff, keyring, lifecycle, plan, reactions


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
        of_run = {k: v for k, v in labels.items() if k != manifests.LABEL_COMPONENT}
        stored = await api.list(kube.SECRETS, run.ref.namespace, of_run)
        secrets = {s["metadata"]["name"]: s for s in stored}
        adopted = {b["metadata"]["name"] for b in mine}
        run.queue.extend(n for n in run.cells if n not in adopted)
        for body in mine:
            cell = run.cells[body["metadata"]["name"]]
            cell.attempt = plan.attempt(body)
            cell.preempted = min(plan.preemptions(body), cell.attempt)
            cell.state = "active"
            run.active.add(cell.name)
            if observed.is_claim(body):
                # A warm cell's tokens are its sandbox's: handed again as its claim is applied.
                self._adopted(run, cell, body)
                continue
            place = cellsecrets.place_of(body) or cellsecrets.Place.own(cell.name, cell.attempt)
            secret = secrets.get(place.secret, {})
            # Only a Secret the run (shared) or this very pod (its own) owns holds tokens the
            # operator made for it.
            owner = run.uid if place.prefix else body["metadata"]["uid"]
            owned = bool(secret) and plan.owned_by(secret, owner)
            data = (secret.get("data") or {}) if owned else {}
            if place.item(cellsecrets.CONTROLLER) in data:
                token = base64.b64decode(data[place.item(cellsecrets.CONTROLLER)]).decode()
                self.creator.allow(run, cell, token)
            elif observed.state(body) in ("waiting", "running"):
                self.board.spawn(self._secret(run, cell, body, place))
            self._adopted(run, cell, body)

    def _adopted(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        if not plan.queued(run):  # a queued cell's deadline starts once Kueue admits it
            self.handoff.keep_deadline(run, cell, plan.created_at(body))
        self.reactions.apply(run, "ADDED", body)

    async def _secret(
        self, run: plan.Run, cell: plan.Cell, body: dict[str, Any], place: cellsecrets.Place
    ) -> None:
        """Make the Secret a live cell lacks; one that cannot be made fails the cell."""
        failure: observed.Failure | None
        if place.prefix:
            found = await self.creator.keyring.shared(run, cell)
            if isinstance(found, keyring.Shared) and found.place == place:
                self.creator.allow(run, cell, found.token)
                return
            missing = f"the run's token Secret {place.secret} lacks cell {cell.name}'s items"
            failure = found if isinstance(found, tuple) else ("other", missing)
        else:
            failure = await self.creator.secret(run, cell, body)
        if failure is not None:
            await self.handoff.infra(run, cell, body, failure)
