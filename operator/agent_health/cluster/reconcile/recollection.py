"""A finished run's grades, made again after a restart, for the history that is still owed it.

An operator that stops while a finished run waits for its recording (``Recorded=False``,
reason ``HistoryUnavailable``: the history was out of reach and a try was still to come)
took the run's grades with it: they were in its memory. The next operator finds the run
finished and owed; :meth:`Recollection.regrade` grades it again from what is left of it, as
an operator that restarted mid-run grades the cells it takes over:

* the plan — the RunSpec's discovered tests, the run's selection, repeats and agents — names
  every cell;
* a cell whose last pod (or Sandbox) is still there and ended as the infrastructure failed
  it is graded that failure again (:func:`.observed.infra_failure`), as the operator did;
* every other cell is graded from its last attempt's ledger, verified with the run's key
  (:func:`.grading.grade_cell`: the grade the operator made of it, the judge's verdicts
  being in the ledger);
* cells with neither a pod nor a record are the ones a budget skipped, when the status
  counts as many skipped; else they cannot be graded again.

The run's status is the reference: when the grades made again count what its status
counts, the history gets exactly the status's run; when they do not (cells gone with the
run's ``ttlSecondsAfterFinished`` whose ledger holds nothing of them), :attr:`Regraded.gap`
says how, and the run is recorded with what was graded again, marked incomplete — never
with grades made up. Nothing here writes the run's status or touches a cell.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any

from agent_health import ledger
from agent_health.cluster import errors, kube
from agent_health.cluster.api import evaluationrun, meta, runspec
from agent_health.cluster.cells import cellsecrets, manifests, observed
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import lifecycle, listing, plan
from agent_health.engine import budget
from agent_health.ledger import backends, keys, store

_ATTEMPT = re.compile(r"\.a(\d+)$")


@dataclasses.dataclass(frozen=True)
class Regraded:
    """What grading a finished run again gave (its grades are in the run's tally)."""

    cells: int
    """The cells its plan names."""
    gap: str | None = None
    """Why the grades made again do not count what the run's status counts (``None``: they
    do, every one)."""


@dataclasses.dataclass
class Recollection:
    """Grades finished runs again; see the module docstring."""

    board: lifecycle.Board
    settings: manifests.Settings
    discoveries: listing.Discoveries
    ledger_options: store.Options = dataclasses.field(default_factory=store.Options)

    async def regrade(self, run: plan.Run) -> Regraded:
        """Grade the finished ``run`` again into its tally (which holds none yet); raises
        :class:`~agent_health.cluster.errors.ClusterError` when nothing can say which cells
        it ran or how (its RunSpec, its tests or its ledger key are gone)."""
        api = self.board.api
        namespace = run.ref.namespace
        try:
            body = await api.get(kube.RUNSPECS, namespace, run.runspec)
        except kube.ApiError as err:
            if err.status != 404:
                raise
            raise errors.ClusterError(
                f"its RunSpec {run.runspec} is gone: nothing says which tests it ran"
            ) from err
        spec = meta.parse(runspec.RunSpec, body, what=f"RunSpec {run.runspec}")
        found = await self.discoveries.tests(spec)
        if found is None or found.error is not None:
            why = found.error if found is not None else "its discovery pod is gone"
            raise errors.ClusterError(f"the tests of RunSpec {run.runspec} are not known: {why}")
        template = spec.spec.ledger.url if spec.spec.ledger else self.settings.ledger_url
        if template is None:
            raise errors.ClusterError(f"RunSpec {run.runspec} names no ledger")
        url = plan.ledger_url(template, run.model)
        run.spec = spec
        run.settings = dataclasses.replace(self.settings, ledger_url=url)
        key = await self._key(run)
        for test in plan.select(found.tests, run.model.spec.selection):
            for repeat in range(run.model.spec.repeats):
                for agent in plan.agents(run.model, spec):
                    name = manifests.cell_name(run.ref.name, test.id, repeat, agent)
                    run.cells[name] = plan.Cell(name, test, repeat, agent)
        labels = manifests.run_labels(run.model, "cell")
        listed = await api.list(lifecycle.resource_of(run), namespace, labels)
        objects = {b["metadata"]["name"]: b for b in listed if plan.owned_by(b, run.uid)}
        try:
            backend = backends.from_url(url, self.ledger_options)
        except ledger.LedgerError as err:
            raise errors.ClusterError(f"its ledger {url}: {err}") from err
        try:
            written = set(await backend.cells())
            unknown = await self._grade(run, backend, key, objects, written)
        except ledger.BackendError as err:
            raise errors.ClusterError(f"cannot read its ledger {url}: {err}") from err
        finally:
            await backend.close()
        return self._checked(run, unknown)

    async def _key(self, run: plan.Run) -> bytes:
        """The run's ledger key, from the Secret the operator made it (never another's)."""
        name = cellsecrets.ledger_key_secret_name(run.ref.name)
        try:
            secret = await self.board.api.get(kube.SECRETS, run.ref.namespace, name)
        except kube.ApiError as err:
            if err.status != 404:
                raise
            raise errors.ClusterError(f"its ledger key Secret {name} is gone") from err
        if not plan.owned_by(secret, run.uid):
            raise errors.ClusterError(f"Secret {name} is not the run's: its ledger is not read")
        return base64.b64decode((secret.get("data") or {})[cellsecrets.LEDGER_KEY])

    async def _grade(
        self,
        run: plan.Run,
        ledger: store.Backend,
        key: bytes,
        objects: dict[str, dict[str, Any]],
        written: set[str],
    ) -> list[plan.Cell]:
        """Grade each cell of the plan into the run's tally, as the operator graded it; the
        cells that can be graded neither from an object nor from a record."""
        unknown = []
        tools = plan.peer_tools(run.spec)
        newest = _attempts(written)
        for cell in run.cells.values():
            body = objects.get(cell.name)
            if body is not None:  # its last attempt's object says which attempt that was
                cell.attempt = plan.attempt(body)
                cell.preempted = min(plan.preemptions(body), cell.attempt)
            else:
                cell.attempt = newest.get(cell.name, 0)
            failure = observed.infra_failure(body) if body is not None else None
            ledger_cell = manifests.ledger_cell(cell.name, cell.attempt)
            if failure is not None:
                grade = grading.grade_failed_pod(
                    cell.name,
                    plan.expected(cell),
                    failure[1],
                    cause=failure[0],
                    attempt=cell.retries,
                    policy=run.model.spec.retry,
                )
            elif ledger_cell in written:
                grade = await grading.grade_cell(
                    ledger,
                    cell.name,
                    keys.cell_key(key, ledger_cell),
                    plan.expected(cell, tools),
                    ledger_cell=ledger_cell,
                )
            else:  # skipped by a budget, or gone (its TTL) with no record of its attempt
                unknown.append(cell)
                continue
            cell.state = "done"
            # Its last attempt: the run ended, so no retry of it is to come.
            run.tally.record(grade.model_copy(update={"retryable": False}))
        return unknown

    def _checked(self, run: plan.Run, unknown: list[plan.Cell]) -> Regraded:
        """The grades made again against the counts of the run's status: cells with no
        record are the budget's skipped when the status counts that many; any other
        difference is the gap the history is told of."""
        stored = (run.model.status.counts if run.model.status else None) or evaluationrun.Counts()
        made = run.tally.counts()
        if unknown and stored.skipped - made.skipped == len(unknown):
            for cell in unknown:
                run.tally.record(plan.skipped(cell, budget.SKIP_REASON))
            unknown = []
            made = run.tally.counts()
        names = ("passed", "failed", "errored", "skipped")
        wanted = {n: getattr(stored, n) for n in names}
        got = {n: getattr(made, n) for n in names}
        if got == wanted and not unknown:
            return Regraded(cells=len(run.cells))
        said = ", ".join(f"{got[n]} {n} of {wanted[n]}" for n in names if got[n] != wanted[n])
        lost = f"; {len(unknown)} cells left no pod and no record" if unknown else ""
        return Regraded(
            cells=len(run.cells),
            gap=f"graded again after an operator restart, not as its status counts ({said}"
            f"{lost}): what was graded again is recorded, marked incomplete",
        )


def _attempts(cells: set[str]) -> dict[str, int]:
    """Each cell's newest attempt with records in the ledger (``CELL``, ``CELL.aN``)."""
    newest: dict[str, int] = {}
    for name in cells:
        found = _ATTEMPT.search(name)
        cell, attempt = (name[: found.start()], int(found.group(1))) if found else (name, 0)
        newest[cell] = max(newest.get(cell, 0), attempt)
    return newest
