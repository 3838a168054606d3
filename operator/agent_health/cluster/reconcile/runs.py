"""The per-run scheduler: plan cells, keep ``parallelism`` of them going, grade each once.

:meth:`Runs.start` (kopf's create and resume handlers) waits for the RunSpec to be resolved
and discovered, selects the tests, plans ``tests × repeats`` cells, makes sure the run's
ledger key Secret exists (a random key, kept in the Secret so a restarted operator reads it
back), creates the run's NetworkPolicy when the operator fences runs (``--network-policy``;
owned by the run, so it goes with it; 409 means it is there) and rebuilds what exists: the
run's cells are listed by label, so an operator that restarts mid-run adopts its pods and
creates none twice. Then it creates cells up to
``parallelism``; from there everything is driven by watch events (:meth:`Runs.cell_event`):
a cell that ends is graded from its ledger and the next one is created.

Writes per cell: the cell (Pod or Sandbox), then its token Secret owned by the cell — so
deleting the cell (``ttlSecondsAfterFinished``, a retry, the run's deletion) also collects
its Secret. Cell names are deterministic (:func:`.manifests.cell_name`) and creation is
idempotent (409 AlreadyExists means "already there").

An infrastructure failure (:mod:`.cells`) is graded by :func:`.grading.grade_failed_pod`;
when the run's retry policy allows, the cell is deleted and, once the deletion is seen,
recreated with the next ``agenthealth.dev/attempt``. A test that ran is never retried.
The status is written through :class:`.batcher.StatusBatcher` (≤ 1 patch/s per run).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import secrets
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import kopf

from agent_health.cluster import errors, kube, metrics
from agent_health.cluster.api import evaluationrun, meta, runspec
from agent_health.cluster.cells import cellpod, cellsecrets, manifests, netpol, observed, sandbox
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import batcher, events, plan, specs
from agent_health.cluster.reconcile import status as status_mod
from agent_health.ledger import backends, store

LEDGER_READS = 5


@dataclasses.dataclass
class Runs:
    """Every run this operator drives; see the module docstring."""

    api: kube.Client
    settings: manifests.Settings
    discoveries: specs.Discoveries
    status: batcher.StatusBatcher
    metrics: metrics.OperatorMetrics
    recorder: events.EventRecorder
    bulletin: plan.Bulletin = dataclasses.field(default_factory=plan.Bulletin)
    ledger_options: store.Options = dataclasses.field(default_factory=store.Options)
    stuck_grace: float = 120.0
    fence: netpol.Fence | None = None
    """Set (``--network-policy``): each run gets its NetworkPolicy before its first cell."""
    wait_seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    runs: dict[batcher.RunRef, plan.Run] = dataclasses.field(default_factory=dict)
    tokens: dict[str, batcher.RunRef] = dataclasses.field(default_factory=dict)
    """The controller token of each live cell → its run."""
    _tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def authorize(self, token: str | None) -> bool:
        """The judge service's check: the controller token of a live cell."""
        return token is not None and token in self.tokens

    def judge_of(self, token: str | None) -> tuple[batcher.RunRef, runspec.Judge | None] | None:
        """A live cell's run and its RunSpec's judge (``None``: not a live cell's token)."""
        ref = self.tokens.get(token) if token is not None else None
        run = self.runs.get(ref) if ref is not None else None
        if ref is None or run is None or run.spec is None:
            return None
        return ref, run.spec.spec.judge

    # -- starting a run --------------------------------------------------------------------

    async def start(self, body: Mapping[str, Any]) -> None:
        """Adopt or begin a run (idempotent; kopf's create and resume handlers)."""
        ref = batcher.RunRef.of(body)
        if ref in self.runs:
            return
        metadata = body.get("metadata") or {}
        what = f"EvaluationRun {ref.namespace}/{ref.name}"
        model = meta.parse(evaluationrun.EvaluationRun, dict(body), what=what)
        tally = status_mod.RunTally(
            repeats=model.spec.repeats, generation=metadata.get("generation"), previous=model.status
        )
        run = plan.Run(ref, str(metadata.get("uid")), model, tally, phase=tally.phase)
        self.status.seed(ref, body.get("status") or {})
        if tally.phase in status_mod.TERMINAL:
            self._finished(run)
            return
        self.runs[ref] = run
        try:
            await self._prepare(run)
        except BaseException:
            self.runs.pop(ref, None)
            raise

    async def _prepare(self, run: plan.Run) -> None:
        if run.tally.phase is None:
            run.tally.advance("Pending", reason="Accepted", message="waiting for the RunSpec")
            await self._changed(run)
        spec_body = await self._runspec(run)
        if spec_body is None:
            return
        try:
            spec = meta.parse(runspec.RunSpec, spec_body, what=f"RunSpec {run.runspec}")
            outcome = await self.discoveries.tests(spec)
            if outcome is None or outcome.error is not None:
                why = outcome.error if outcome else "its discovery pod is gone; edit the RunSpec"
                return await self._fail(run, "DiscoveryFailed", f"RunSpec {run.runspec}: {why}")
            chosen = plan.select(outcome.tests, run.model.spec.selection)
        except errors.SpecError as err:
            return await self._fail(run, "InvalidSpec", str(err))
        if not chosen:
            return await self._fail(run, "NoTestsSelected", "spec.selection matches no test")
        template = spec.spec.ledger.url if spec.spec.ledger else self.settings.ledger_url
        if template is None:
            return await self._fail(run, "NoLedger", "set spec.ledger.url on the RunSpec")
        url = plan.ledger_url(template, run.model)
        if spec.spec.ledger is not None:
            ledger = runspec.Ledger(url=url)
            spec = spec.model_copy(update={"spec": spec.spec.model_copy(update={"ledger": ledger})})
        run.spec, run.settings = spec, dataclasses.replace(self.settings, ledger_url=url)
        run.backend = backends.from_url(url, self.ledger_options)
        run.key = await self._ledger_key(run)
        if self.fence is not None:
            await self._network_policy(run, self.fence)
        for test in chosen:
            for repeat in range(run.model.spec.repeats):
                name = manifests.cell_name(run.ref.name, test.id, repeat)
                run.cells[name] = plan.Cell(name, test, repeat)
        run.tally.plan(run.cells)
        run.tally.advance("Running", reason="CellsPlanned", message=f"{len(run.cells)} cells")
        await self._adopt(run)
        run.started = True
        for event_type, body in run.buffered.values():
            self._apply(run, event_type, body)
        run.buffered.clear()
        self._fill(run)
        await self._changed(run)

    async def _runspec(self, run: plan.Run) -> dict[str, Any] | None:
        """The RunSpec once it is ready; ``None`` when the run failed for it."""
        key = (run.ref.namespace, run.runspec)
        try:
            body = await self.api.get(kube.RUNSPECS, *key)
        except kube.ApiError as err:
            if err.status != 404:
                raise kopf.TemporaryError(f"cannot read RunSpec {run.runspec}: {err}") from err
            message = f"RunSpec {run.runspec} does not exist in namespace {run.ref.namespace}"
            await self._fail(run, "RunSpecMissing", message)
            return None
        while True:
            state, reason, message = specs.readiness(body)
            if state == "ready":
                return body
            if state == "failed":
                await self._fail(run, reason, f"RunSpec {run.runspec}: {message}")
                return None
            if run.tally.advance("Resolving", reason="WaitingForRunSpec", message=message):
                await self._changed(run)
            await self.bulletin.wait(key, self.wait_seconds)
            posted = self.bulletin.bodies.pop(key, None)
            if posted is None:
                raise kopf.TemporaryError(f"RunSpec {run.runspec}: {message}", delay=5)
            if plan.generation(posted) >= plan.generation(body):  # an older body is a stale event
                body = posted

    async def _ledger_key(self, run: plan.Run) -> bytes:
        manifest = cellsecrets.ledger_key_secret(run.model, secrets.token_bytes(32))
        stored, _ = await self.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        return base64.b64decode(stored["data"][cellsecrets.LEDGER_KEY])

    async def _network_policy(self, run: plan.Run, fence: netpol.Fence) -> None:
        """The run's NetworkPolicy, owned by the run; one that exists already (409) is kept."""
        assert run.settings is not None
        manifest = fence.policy(run.model, run.settings)
        try:
            await self.api.create(kube.NETWORKPOLICIES, run.ref.namespace, manifest)
        except kube.ApiError as err:
            if err.status != 409:
                name = manifest["metadata"]["name"]
                message = f"cannot create NetworkPolicy {name}: {err}"
                raise kopf.TemporaryError(message, delay=10) from err

    async def _adopt(self, run: plan.Run) -> None:
        """Take over the cells that already exist (after a restart), with their tokens."""
        labels = manifests.run_labels(run.model, "cell")
        found = await self.api.list(self._resource(run), run.ref.namespace, labels)
        mine = [
            b for b in found if plan.owned_by(b, run.uid) and b["metadata"]["name"] in run.cells
        ]
        if not mine:
            run.queue.extend(run.cells)
            return
        stored = await self.api.list(kube.SECRETS, run.ref.namespace, labels)
        tokens = {s["metadata"]["name"]: s.get("data") or {} for s in stored}
        adopted = {b["metadata"]["name"] for b in mine}
        run.queue.extend(n for n in run.cells if n not in adopted)
        for body in mine:
            cell = run.cells[body["metadata"]["name"]]
            cell.attempt = plan.attempt(body)
            cell.state = "active"
            run.active.add(cell.name)
            data = tokens.get(cellsecrets.token_secret_name(cell.name), {})
            if cellsecrets.CONTROLLER in data:
                cell.token = base64.b64decode(data[cellsecrets.CONTROLLER]).decode()
                self.tokens[cell.token] = run.ref
            elif observed.state(body) in ("waiting", "running"):
                self._spawn(self._secret(run, cell, body))
            self._apply(run, "ADDED", body)

    # -- events ----------------------------------------------------------------------------

    def cell_event(self, event_type: str, body: Mapping[str, Any]) -> None:
        """A watch event of a cell (Pod or Sandbox) owned by an EvaluationRun."""
        owner = next(
            (
                o
                for o in body["metadata"].get("ownerReferences") or []
                if o.get("kind") == "EvaluationRun"
            ),
            None,
        )
        if owner is None:
            return
        run = self.runs.get(batcher.RunRef(str(body["metadata"].get("namespace")), owner["name"]))
        if run is None or owner.get("uid") != run.uid:
            return
        if not run.started:
            run.buffered[body["metadata"]["name"]] = (event_type, dict(body))
            return
        self._apply(run, event_type, dict(body))

    def forget(self, body: Mapping[str, Any]) -> None:
        """The run was deleted: stop scheduling it (its cells are garbage-collected)."""
        ref = batcher.RunRef.of(body)
        run = self.runs.pop(ref, None)
        if run is not None:
            self._drop_tokens(run)
        runspec_name = str(((body.get("spec") or {}).get("runSpecRef") or {}).get("name") or "")
        self.metrics.forget_run(ref.namespace, runspec_name, ref.name)
        self.status.forget(ref)

    def _apply(self, run: plan.Run, event_type: str, body: dict[str, Any]) -> None:
        cell = run.cells.get(body["metadata"]["name"])
        if cell is None or plan.attempt(body) < cell.attempt:
            if cell is not None and cell.state == "replacing" and event_type == "DELETED":
                self._spawn(self._create(run, cell))
            return
        if event_type == "DELETED":
            if cell.state == "replacing":
                self._spawn(self._create(run, cell))
            elif cell.state == "active":
                self._spawn(self._infra(run, cell, body, ("evicted", "the cell was deleted")))
            return
        if cell.state != "active":
            return
        cell.last = body
        state = observed.state(body)
        if state in ("succeeded", "failed"):
            cell.state = "ended"
            run.tally.ended(cell.name)
            self._spawn(self._grade(run, cell, body))
        elif state == "running":
            cell.stuck_since = None
            run.tally.started(cell.name)
            self._spawn(self._changed(run))
        elif (failure := observed.stuck(body)) is not None:
            now = self.clock()
            cell.stuck_since = cell.stuck_since if cell.stuck_since is not None else now
            left = cell.stuck_since + self.stuck_grace - now
            if left <= 0:
                cell.state = "ended"
                self._spawn(self._infra(run, cell, body, failure, delete=True))
            else:
                self._spawn(self._later(left, lambda: self._recheck(run, cell, body)))

    def _recheck(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        if cell.last is body:  # nothing newer came: it is still stuck
            self._apply(run, "MODIFIED", body)

    # -- grading ---------------------------------------------------------------------------

    async def _grade(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        failure = observed.infra_failure(body)
        if failure is not None:
            return await self._infra(run, cell, body, failure)
        assert run.backend is not None
        grade: grading.CellGrade | None = None
        for attempt in range(LEDGER_READS):
            try:
                grade = await grading.grade_cell(
                    run.backend,
                    cell.name,
                    run.key,
                    plan.expected(cell),
                    ledger_cell=manifests.ledger_cell(cell.name, cell.attempt),
                )
                break
            except errors.LedgerUnavailable as err:
                if attempt + 1 == LEDGER_READS:
                    grade = plan.unreadable(cell, str(err), run.model.spec.retry)
                else:
                    await asyncio.sleep(min(2**attempt, 30))
            except Exception as err:  # a bug or a broken backend must not leave the cell hanging
                grade = plan.unreadable(cell, f"{type(err).__name__}: {err}", run.model.spec.retry)
                break
        assert grade is not None
        await self._record(run, cell, grade)

    async def _infra(
        self,
        run: plan.Run,
        cell: plan.Cell,
        body: Mapping[str, Any],
        failure: observed.Failure,
        *,
        delete: bool = False,
    ) -> None:
        cause, reason = failure
        cell.state = "ended"
        run.tally.ended(cell.name)
        grade = grading.grade_failed_pod(
            cell.name, plan.expected(cell), reason, cause=cause, attempt=cell.attempt,
            policy=run.model.spec.retry,
        )  # fmt: skip
        if delete and not grade.retryable:
            await self.api.delete(self._resource(run), run.ref.namespace, cell.name)
        await self._record(run, cell, grade)

    async def _record(self, run: plan.Run, cell: plan.Cell, grade: grading.CellGrade) -> None:
        if self.runs.get(run.ref) is not run:
            return  # deleted meanwhile
        run.tally.record(grade)
        self.metrics.observe_grade(run.ref.namespace, run.runspec, run.ref.name, grade)
        emit = self.recorder.cell_errored(run.involved, grade)
        if emit is not None:
            self._spawn(self._event(emit))
        if cell.token is not None:
            self.tokens.pop(cell.token, None)
            cell.token = None
        if grade.retryable:
            cell.state, cell.attempt = "replacing", cell.attempt + 1
            self._spawn(self._retry(run, cell, grade.retry_after_seconds or 0.0))
        else:
            cell.state = "done"
            run.active.discard(cell.name)
            self._fill(run)
        await self._changed(run)

    async def _retry(self, run: plan.Run, cell: plan.Cell, delay: float) -> None:
        await asyncio.sleep(delay)
        if not await self.api.delete(self._resource(run), run.ref.namespace, cell.name):
            await self._create(run, cell)  # already gone: no DELETED event will come

    # -- creating cells --------------------------------------------------------------------

    def _fill(self, run: plan.Run) -> None:
        while run.queue and len(run.active) < run.model.spec.parallelism:
            cell = run.cells[run.queue.popleft()]
            cell.state = "active"
            run.active.add(cell.name)
            self._spawn(self._create(run, cell))
        self.metrics.set_queue_depth("cells", sum(len(r.queue) for r in self.runs.values()))

    async def _create(self, run: plan.Run, cell: plan.Cell) -> None:
        if self.runs.get(run.ref) is not run:
            return
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
            stored, _ = await self.api.ensure(self._resource(run), run.ref.namespace, manifest)
            await self._secret(run, cell, stored)
        except kube.ApiError as err:
            await self._infra(run, cell, {}, ("other", f"cannot create cell {cell.name}: {err}"))

    async def _secret(self, run: plan.Run, cell: plan.Cell, owner: Mapping[str, Any]) -> None:
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
        stored, _ = await self.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        token = base64.b64decode(stored["data"][cellsecrets.CONTROLLER]).decode()
        if cell.state == "active":
            cell.token = token
            self.tokens[token] = run.ref

    # -- status, events, the end -----------------------------------------------------------

    async def _changed(self, run: plan.Run) -> None:
        if run.phase != run.tally.phase and run.tally.phase is not None:
            emit = self.recorder.phase_changed(run.involved, run.phase, run.tally.phase)
            run.phase = run.tally.phase
            self._spawn(self._event(emit))
        if run.tally.phase in status_mod.TERMINAL:
            await self.status.flush(run.ref, lambda: self._snapshot(run))
            self._finished(run)
        else:
            await self.status.update(run.ref, lambda: self._snapshot(run))

    def _snapshot(self, run: plan.Run) -> dict[str, Any]:
        current = run.tally.status()
        self.metrics.observe_run(run.ref.namespace, run.runspec, run.ref.name, current)
        return current.wire()

    async def _fail(self, run: plan.Run, reason: str, message: str) -> None:
        run.tally.fail(plan.reason(reason), message)
        await self._changed(run)

    def _finished(self, run: plan.Run) -> None:
        """The run is over: nothing more to schedule; its cells wait for the TTL, if any."""
        if self.runs.get(run.ref) is run:
            del self.runs[run.ref]
        self._drop_tokens(run)
        if run.backend is not None:
            self._spawn(run.backend.close())
            run.backend = None
        ttl = run.model.spec.ttl_seconds_after_finished
        if ttl is not None:
            done = run.tally.completion_time or status_mod.utcnow()
            left = (done - status_mod.utcnow()).total_seconds() + ttl
            self._spawn(self._later(max(left, 0.0), lambda: self._spawn(self._expire(run))))

    async def _expire(self, run: plan.Run) -> None:
        """``ttlSecondsAfterFinished``: delete the cells (their token Secrets go with them)."""
        labels = manifests.run_labels(run.model, "cell")
        resource = kube.SANDBOXES if self._sandboxed(run) else kube.PODS
        for body in await self.api.list(resource, run.ref.namespace, labels):
            if plan.owned_by(body, run.uid):
                await self.api.delete(resource, run.ref.namespace, body["metadata"]["name"])

    def _drop_tokens(self, run: plan.Run) -> None:
        for cell in run.cells.values():
            if cell.token is not None:
                self.tokens.pop(cell.token, None)
                cell.token = None

    async def _event(self, emit: events.Emit) -> None:
        try:
            if emit.action == "bump" and emit.patch is not None:
                try:
                    await self.api.patch(kube.EVENTS, emit.namespace, emit.name, emit.patch)
                    return
                except kube.ApiError as err:
                    if err.status != 404:
                        raise
            await self.api.create(kube.EVENTS, emit.namespace, emit.body)
        except kube.ApiError:
            self.metrics.reconcile_error("event")

    def _resource(self, run: plan.Run) -> kube.Resource:
        return kube.SANDBOXES if self._sandboxed(run) else kube.PODS

    @staticmethod
    def _sandboxed(run: plan.Run) -> bool:
        return run.spec is not None and run.spec.spec.isolation.mode == "agentSandbox"

    async def _later(self, delay: float, then: Callable[[], None]) -> None:
        await asyncio.sleep(delay)
        then()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.metrics.reconcile_error("runs")

    async def close(self) -> None:
        """Cancel every pending task (the operator stops)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for run in self.runs.values():
            if run.backend is not None:
                await run.backend.close()
