"""Starting a run: wait for its RunSpec, plan its cells, prepare what they share, adopt.

:meth:`Intake.start` (kopf's create and resume handlers) waits for the RunSpec to be
resolved and discovered (woken by RunSpec watch events through :class:`.plan.Bulletin`),
selects the tests, checks that every Secret the RunSpec names is offered to runs
(:mod:`.secretrefs`), plans ``tests × repeats`` cells, makes a ConfigMap ledger the run's
(:mod:`.ledgers`; the operator alone writes it, collecting the cells' records from their
gateways' logs: :mod:`.collector`), makes sure the run's ledger key Secret exists
(a random key, kept in the Secret so a restarted operator reads it back), creates the run's
NetworkPolicy when the operator fences runs (``--network-policy``; owned by the run,
so it goes with it; 409 means it is there) and rebuilds what exists (:mod:`.adoption`).
Then it creates cells up to ``parallelism``; from there everything is driven by watch
events (:mod:`.reactions`).

Every run ends. Its ``activeDeadlineSeconds`` timer starts here (:class:`.lifecycle.Board`).
Waiting for a RunSpec is not an error (kopf calls again); any other failure to start a run —
an API error, a bug — sets ``Reconciled=False`` with the error and is retried with a growing
delay, at most :data:`MAX_ATTEMPTS` times; then the run fails with ``ReconcileError``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from agent_health import ledger
from agent_health.cluster import errors, kube
from agent_health.cluster.api import evaluationrun, meta, runspec
from agent_health.cluster.cells import (
    admission,
    cellsecrets,
    kueue,
    ledgerurl,
    manifests,
    netpol,
)
from agent_health.cluster.reconcile import (
    adoption,
    batcher,
    collector,
    handoff,
    ledgers,
    lifecycle,
    listing,
    plan,
    policy,
    reactions,
    refusals,
    secretrefs,
    specs,
    status,
)
from agent_health.ledger import backends, configmap

RECONCILED = "Reconciled"
MAX_ATTEMPTS = 6


@dataclasses.dataclass
class Intake:
    """Starts (or adopts) runs; see the module docstring."""

    board: lifecycle.Board
    settings: manifests.Settings
    discoveries: listing.Discoveries
    handoff: handoff.Handoff
    reactions: reactions.Reactions
    adoption: adoption.Adoption
    policy: policy.Policy = dataclasses.field(default_factory=policy.Policy)
    bulletin: plan.Bulletin = dataclasses.field(default_factory=plan.Bulletin)
    failures: dict[str, int] = dataclasses.field(default_factory=dict)
    """Failed attempts to start each run (by uid), until one succeeds."""

    async def start(self, body: Mapping[str, Any]) -> None:
        """Adopt or begin a run (idempotent; kopf's create and resume handlers)."""
        board = self.board
        ref = batcher.RunRef.of(body)
        if ref in board.runs:
            return
        metadata = body.get("metadata") or {}
        what = f"EvaluationRun {ref.namespace}/{ref.name}"
        model = meta.parse(evaluationrun.EvaluationRun, dict(body), what=what)
        tally = status.RunTally(
            repeats=model.spec.repeats,
            generation=metadata.get("generation"),
            previous=model.status,
            budget=model.spec.budget,
        )
        run = plan.Run(ref, str(metadata.get("uid")), model, tally, phase=tally.phase)
        board.status.seed(ref, body.get("status") or {})
        if tally.phase in status.TERMINAL:
            board.finished(run)
            return
        board.runs[ref] = run
        if not model.spec.suspend:  # a run created suspended: its deadline starts at resume
            board.keep_deadline(run, plan.created_at(body))
        try:
            await self._prepare(run)
        except (kopf.TemporaryError, kopf.PermanentError, asyncio.CancelledError):
            self._drop(run)
            raise  # waiting for the RunSpec, or stopping: not an error of this run
        except Exception as err:
            self._drop(run)
            await self._failed(run, err)
            return
        if self.failures.pop(run.uid, None) is not None and board.live(run):
            run.tally.note(RECONCILED, "True", "Recovered", "the run started after errors")
            await board.changed(run)

    def _drop(self, run: plan.Run) -> None:
        if self.board.live(run):
            del self.board.runs[run.ref]

    async def _failed(self, run: plan.Run, err: Exception) -> None:
        """An error starting the run: a ``Reconciled=False`` condition naming it and a retry
        after a backoff, at most :data:`MAX_ATTEMPTS` times; then the run fails."""
        attempt = self.failures[run.uid] = self.failures.get(run.uid, 0) + 1
        why = f"{type(err).__name__}: {err}"
        why += refusals.advice(err, run.ref.namespace)
        if run.tally.phase in status.TERMINAL:
            self.failures.pop(run.uid, None)
            return
        if attempt >= MAX_ATTEMPTS:
            self.failures.pop(run.uid, None)
            message = f"the operator could not start the run ({attempt} attempts): {why}"
            await self.board.fail(run, "ReconcileError", message)
            return
        delay = self.policy.backoff(attempt)
        message = f"attempt {attempt} of {MAX_ATTEMPTS} failed, next in {delay:.0f} s: {why}"
        run.tally.note(RECONCILED, "False", plan.reason(type(err).__name__), message)
        with contextlib.suppress(Exception):  # the API may be what failed: retry regardless
            await self.board.status.flush(run.ref, run.tally.wire)
        raise kopf.TemporaryError(message, delay=delay) from err

    async def _prepare(self, run: plan.Run) -> None:
        board = self.board
        if run.tally.phase is None:
            run.tally.advance("Pending", reason="Accepted", message="waiting for the RunSpec")
            await board.changed(run)
        spec_body = await self._runspec(run)
        if spec_body is None or not board.live(run):
            return
        try:
            spec = meta.parse(runspec.RunSpec, spec_body, what=f"RunSpec {run.runspec}")
            admission.admit(spec, self.settings)
            outcome = await self.discoveries.tests(spec)
            if outcome is None or outcome.error is not None:
                why = outcome.error if outcome else "its discovery pod is gone; edit the RunSpec"
                return await board.fail(run, "DiscoveryFailed", f"RunSpec {run.runspec}: {why}")
            chosen = plan.select(outcome.tests, run.model.spec.selection)
            agents = plan.agents(run.model, spec)  # an agent matrix: each a declared target
            kueue.refuse(
                spec, run.model, self.settings.default_queue, self.settings.sandbox_queueing
            )
        except errors.SpecError as err:
            return await board.fail(run, "InvalidSpec", str(err))
        if not chosen:
            return await board.fail(run, "NoTestsSelected", "spec.selection matches no test")
        try:
            await secretrefs.check(
                board.api,
                run.ref.namespace,
                spec,
                self.policy.own_secrets,
                judged=not run.model.spec.skip_judge,
            )
        except errors.SecretNotOffered as err:
            return await board.fail(run, "SecretNotOffered", f"RunSpec {run.runspec}: {err}")
        template = spec.spec.ledger.url if spec.spec.ledger else self.settings.ledger_url
        if template is None:
            return await board.fail(run, "NoLedger", "set spec.ledger.url on the RunSpec")
        url = plan.ledger_url(template, run.model)
        where = (
            f"RunSpec {run.runspec} spec.ledger.url"
            if spec.spec.ledger
            else "the operator's --ledger-url (AGENT_HEALTH_LEDGER_URL)"
        )
        wrong = (
            ledgerurl.refused(url, namespace=run.ref.namespace, allowed=self.policy.ledger_allowed)
            if spec.spec.ledger
            else ledgerurl.namespace_problem(url, run.ref.namespace)
        )
        if wrong is not None:
            return await board.fail(run, "InvalidLedgerUrl", f"{where}: {wrong}")
        try:
            run.backend = backends.from_url(url, self.policy.ledger_options)
        except ledger.LedgerError as err:
            return await board.fail(run, "InvalidLedgerUrl", f"{where}: {err}")
        if spec.spec.ledger is not None:
            filled = runspec.Ledger(url=url)
            spec = spec.model_copy(update={"spec": spec.spec.model_copy(update={"ledger": filled})})
        try:
            await ledgers.prepare(board.api, run, url)
        except errors.SpecError as err:
            return await board.fail(run, "LedgerNotOwned", str(err))
        settings = dataclasses.replace(self.settings, ledger_url=url)
        if ledgerurl.collected(url):
            # The operator stores what the gateways log: they need no identity at all.
            assert isinstance(run.backend, configmap.ConfigMapBackend)
            run.collector = collector.Collector(run.backend, active=lambda: len(run.active))
            settings = dataclasses.replace(settings, gateway_service_account=None)
        run.spec, run.settings = spec, settings
        try:
            run.key = await self._ledger_key(run)
        except errors.SpecError as err:
            return await board.fail(run, "LedgerKeyNotOwned", str(err))
        if self.policy.fence is not None:
            await self._network_policy(run, self.policy.fence)
        if spec.spec.isolation.warm_pool is not None:
            try:
                await self.handoff.pools.ensure(run, agents)
            except errors.SpecError as err:
                return await board.fail(run, "WarmPoolNotOwned", str(err))
        if not board.live(run):  # its deadline passed meanwhile
            return
        spec_run = run.model.spec
        attempts = len(chosen) * spec_run.repeats * (1 + spec_run.retry.infra_retries)
        run.settings = ledgers.share(
            run.settings, url, attempts, self.policy.ledger_options.configmap_max_bytes
        )
        for test in chosen:
            for repeat in range(run.model.spec.repeats):
                for agent in agents:  # interleaved: a budget leaves the agents the same tests
                    name = manifests.cell_name(run.ref.name, test.id, repeat, agent)
                    run.cells[name] = plan.Cell(name, test, repeat, agent)
        run.tally.plan(run.cells)
        board.status.pace(run.ref, batcher.interval_for(run.model.spec.parallelism))
        run.tally.advance("Running", reason="CellsPlanned", message=f"{len(run.cells)} cells")
        await self.adoption.adopt(run)
        if not board.live(run):
            return
        run.started = True
        if run.model.spec.suspend:
            message = "spec.suspend: no cell starts until it is false"
            run.tally.note("Suspended", "True", "Suspended", message)
        for event_type, body in run.buffered.values():
            self.reactions.apply(run, event_type, body)
        run.buffered.clear()
        self.handoff.fill(run)
        await board.changed(run)

    async def _runspec(self, run: plan.Run) -> dict[str, Any] | None:
        """The RunSpec once it is ready; ``None`` when the run failed for it.

        Any number of runs may wait for one RunSpec, and a RunSpec already resolved (for
        this generation) is used at once: it is resolved once, not once per run.
        """
        key = (run.ref.namespace, run.runspec)
        seen = self.bulletin.serial(key)  # taken before the read: no event falls in between
        try:
            body: dict[str, Any] | None = await self.board.api.get(kube.RUNSPECS, *key)
        except kube.ApiError as err:
            if err.status != 404:
                raise
            body = None
        while True:
            if not self.board.live(run):
                return None  # its deadline passed while it waited
            if body is None:
                message = f"RunSpec {run.runspec} does not exist in namespace {run.ref.namespace}"
                await self.board.fail(run, "RunSpecMissing", message)
                return None
            state, reason, message = specs.readiness(body)
            if state == "ready":
                return body
            if state == "failed":
                await self.board.fail(run, reason, f"RunSpec {run.runspec}: {message}")
                return None
            if run.tally.advance("Resolving", reason="WaitingForRunSpec", message=message):
                await self.board.changed(run)
            newer, posted = await self.bulletin.wait(key, seen, self.policy.spec_wait)
            if newer == seen:  # nothing came: kopf calls again (bounded by the run's deadline)
                raise kopf.TemporaryError(f"RunSpec {run.runspec}: {message}", delay=5)
            seen = newer
            if posted is None or plan.generation(posted) >= plan.generation(body):
                body = posted  # None: deleted; an older generation is a stale event

    async def _ledger_key(self, run: plan.Run) -> bytes:
        manifest = cellsecrets.ledger_key_secret(run.model, cellsecrets.new_ledger_key())
        stored, _ = await self.board.api.ensure(kube.SECRETS, run.ref.namespace, manifest)
        if not plan.owned_by(stored, run.uid):
            # A key someone else made could seal any ledger of this run: never use it.
            name = manifest["metadata"]["name"]
            raise errors.SpecError(
                f"Secret {name} already exists in namespace {run.ref.namespace} and is not "
                f"EvaluationRun {run.ref.name}'s; the operator will not use a ledger key it did "
                "not make: delete the Secret and create the run again"
            )
        return base64.b64decode(stored["data"][cellsecrets.LEDGER_KEY])

    async def _network_policy(self, run: plan.Run, fence: netpol.Fence) -> None:
        """The run's NetworkPolicy, owned by the run; one that exists already (409) is kept."""
        assert run.settings is not None
        assert run.spec is not None
        settings = run.settings
        if manifests.judge_model(run.model, run.spec, settings) is None:
            settings = dataclasses.replace(settings, judge=None)  # no judge: no way to it
        manifest = fence.policy(run.model, settings)
        try:
            await self.board.api.create(kube.NETWORKPOLICIES, run.ref.namespace, manifest)
        except kube.ApiError as err:
            if err.status != 409:
                name = manifest["metadata"]["name"]
                raise errors.ClusterError(f"cannot create NetworkPolicy {name}: {err}") from err
