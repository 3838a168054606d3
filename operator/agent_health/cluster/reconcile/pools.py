"""A warm-pool run's pools, and the hand-over of a claimed sandbox to its cell.

For a run whose RunSpec sets ``spec.isolation.warmPool`` (:mod:`.warmpool` says what is made
and why every cell's guarantees hold):

* :meth:`Pools.ensure` (the run starts): the RunSpec generation's ``SandboxTemplate`` and
  ``SandboxWarmPool`` per agent, and the pool's NetworkPolicy when the operator fences runs —
  created, or found (409), held to what the operator makes (a stored one that the RunSpec
  does not own or that differs in any field fails the run, ``WarmPoolNotOwned``, naming the
  field) and scaled back to ``replicas`` if a finished run left it at zero. The operator's
  pools of a namespace hold at most ``--max-warm-replicas`` sandboxes together: a pool that
  would pass the cap gets what is left (a ``WarmPoolCapped`` Event; the run's cells beyond
  it start cold), decided one run at a time per namespace;
* :meth:`Pools.assign` (a cell's claim is bound): reads the bound Sandbox (its launch type, the
  name of its generated Secret) and that Secret (the sandbox's tokens and key), checks that
  the sandbox's pod gives no container more of that Secret than its own share
  (:func:`.warmpool.leak`) and runs the containers of the pool's template as the operator
  made it (:func:`.warmpool.drift`), lets the judge service answer the cell's controller token, and
  writes the cell's assignment on the sandbox's pod — one merge patch, which the pod's
  gateway and controller read through their downward-API file. Reads: 2; writes: 1 (the
  claim itself is the cell's other write);
* :meth:`Pools.release` (a run is over): a pool no live run of the operator needs once its
  ``keepSeconds`` passed is scaled to zero; its template stays for the next run of that
  generation;
* :meth:`Pools.sweep` (the operator starts): each pool still up is released so too — the
  operator before it may have stopped within a pool's ``keepSeconds``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from agent_health.cluster import errors, kube
from agent_health.cluster.cells import (
    cellgateway,
    cellsecrets,
    manifests,
    netpol,
    observed,
    warmpool,
)
from agent_health.cluster.reconcile import lifecycle, plan
from agent_health.ledger import assignment

TEMPLATES, POOLS = kube.SANDBOX_TEMPLATES, kube.SANDBOX_WARMPOOLS


def warm(run: plan.Run) -> bool:
    """Whether the run's cells come from a warm pool."""
    return run.spec is not None and run.spec.spec.isolation.warm_pool is not None


def bound_sandbox(claim: Mapping[str, Any]) -> str | None:
    """The Sandbox a claim is bound to (its status), ``None`` while it is not."""
    name = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
    return str(name) if name else None


def rejected(claim: Mapping[str, Any]) -> observed.Failure | None:
    """A claim the sandbox controller will not bind (a template or metadata it refuses)."""
    for condition in (claim.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("reason") in (
            "EnvVarsInjectionRejected",
            "InvalidMetadata",
        ):
            return "other", f"the sandbox controller refused the claim: {condition.get('message')}"
    return None


@dataclasses.dataclass
class Pools:
    """See the module docstring."""

    board: lifecycle.Board
    fence: netpol.Fence | None = None
    _sizing: dict[str, asyncio.Lock] = dataclasses.field(default_factory=dict)
    """Per namespace: one run at a time sizes its pools against the cap."""

    async def ensure(self, run: plan.Run, agents: list[str | None]) -> None:
        """The run's pools (one per agent), at the RunSpec's ``replicas`` within the cap."""
        lock = self._sizing.setdefault(run.ref.namespace, asyncio.Lock())
        async with lock:
            await self._ensure(run, agents)

    async def _ensure(self, run: plan.Run, agents: list[str | None]) -> None:
        assert run.spec is not None
        assert run.settings is not None
        warm_pool = run.spec.spec.isolation.warm_pool
        assert warm_pool is not None
        namespace = run.ref.namespace
        left = await self._left(run, run.settings.max_warm_replicas)
        digests = run.spec.status.image_digests if run.spec.status else {}
        owner = str(run.spec.metadata.get("uid") or "")
        for agent in agents:
            secret = warmpool.new_secret_name()
            template = warmpool.template(
                run.spec, digests=digests, settings=run.settings, agent=agent, secret=secret
            )
            name = template["metadata"]["name"]
            stored, created = await self.board.api.ensure(TEMPLATES, namespace, template)
            if not created:
                # Made before (by this operator for an earlier run, or by someone else): the
                # same template has the Secret's name it was made with; any other is not ours.
                secret = warmpool.secret_of(stored) or secret
                template = warmpool.template(
                    run.spec, digests=digests, settings=run.settings, agent=agent, secret=secret
                )
                _check_owned(stored, template, owner, run)
            if self.fence is not None:
                policy = warmpool.network_policy(run.spec, self.fence, run.settings, name)
                try:
                    await self.board.api.create(kube.NETWORKPOLICIES, namespace, policy)
                except kube.ApiError as err:
                    if err.status != 409:  # there already: the RunSpec's, from an earlier run
                        raise
            replicas = warm_pool.replicas
            if left is not None:
                own = left.pop(name, 0)
                replicas = min(replicas, max(0, own + left[""]))
                left[""] -= replicas - own
            manifest = warmpool.pool(run.spec, replicas, name=name, agent=agent)
            stored, created = await self.board.api.ensure(POOLS, namespace, manifest)
            if not created:
                _check_owned(stored, manifest, owner, run)
            if not created and (stored.get("spec") or {}).get("replicas") != replicas:
                patch = {"spec": {"replicas": replicas}}
                await self.board.api.patch(POOLS, namespace, name, patch)
            pod = template["spec"]["podTemplate"]["spec"]
            run.pools[agent] = plan.Pool(name, secret, pod)
            cap = run.settings.max_warm_replicas
            if replicas < warm_pool.replicas and cap is not None:
                recorder = self.board.recorder
                emit = recorder.warm_pool_capped(
                    run.involved, name, warm_pool.replicas, replicas, cap
                )
                self.board.spawn(self.board.event(emit))

    async def _left(self, run: plan.Run, cap: int | None) -> dict[str, int] | None:
        """What the namespace's pools may still hold under ``cap``: key ``""`` the sandboxes
        not held by any pool, and each pool's own replicas by its name (a run scaling a pool
        up again may reuse what it holds); ``None`` without a cap."""
        if cap is None:
            return None
        labels = {manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY}
        held = {
            body["metadata"]["name"]: _replicas(body)
            for body in await self.board.api.list(POOLS, run.ref.namespace, labels)
        }
        return {"": cap - sum(held.values()), **held}

    async def release(self, run: plan.Run) -> None:
        """After the pool's ``keepSeconds``, scale to zero each of the run's pools that no
        live run uses by then (a run started meanwhile keeps it up, warm)."""
        assert run.spec is not None
        warm_pool = run.spec.spec.isolation.warm_pool
        keep = warm_pool.keep_seconds if warm_pool is not None else 0
        names = {p.name for p in run.pools.values()}
        await self._scale_down(run.ref.namespace, names, keep, but=run)

    async def sweep(self, namespace: str | None) -> None:
        """At the operator's start: every pool of its RunSpecs still up is released as if a
        run of it had just ended (the operator that was to scale it down may have stopped
        first) — scaled to zero after its ``keepSeconds``, unless a run uses it by then."""
        labels = {manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY}
        for body in await self.board.api.list(POOLS, namespace, labels):
            meta = body["metadata"]
            if int((body.get("spec") or {}).get("replicas") or 0) > 0:
                keep = warmpool.keep_seconds(body)
                work = self._scale_down(meta["namespace"], {meta["name"]}, keep)
                self.board.spawn(work)

    async def _scale_down(
        self, namespace: str, names: set[str], keep: float, *, but: plan.Run | None = None
    ) -> None:
        await asyncio.sleep(keep)
        used = {p.name for r in self.board.runs.values() if r is not but for p in r.pools.values()}
        for name in sorted(names - used):
            try:
                await self.board.api.patch(POOLS, namespace, name, {"spec": {"replicas": 0}})
            except kube.ApiError as err:
                if err.status != 404:  # the RunSpec, and its pools, may be gone
                    raise

    async def assign(
        self, run: plan.Run, cell: plan.Cell, claim: Mapping[str, Any]
    ) -> observed.Failure | None:
        """Hand the claim's bound sandbox its cell; why it could not be, if it could not."""
        assert run.spec is not None
        assert run.settings is not None
        sandbox_name = bound_sandbox(claim)
        assert sandbox_name is not None
        namespace = run.ref.namespace
        pool = run.pools[cell.agent]
        logical = pool.secret
        # Both at once (a warm start waits on them): the Secret by the name the controller
        # gives it, read again only if the Sandbox records another.
        guess = f"{sandbox_name}-{logical}"
        read: tuple[dict[str, Any] | BaseException, ...] = await asyncio.gather(
            self.board.api.get(kube.SANDBOXES, namespace, sandbox_name),
            self.board.api.get(kube.SECRETS, namespace, guess),
            return_exceptions=True,
        )
        sandbox, secret = read
        if isinstance(sandbox, BaseException):
            return "other", f"cannot read Sandbox {sandbox_name} bound to the cell: {sandbox}"
        if not plan.owned_by(sandbox, str(claim["metadata"].get("uid") or "")):
            return "other", (
                f"Sandbox {sandbox_name} is not owned by the cell's claim {cell.name}; the "
                "operator will not hand a cell to a sandbox its claim does not hold"
            )
        secret_name = _generated_secret(sandbox, logical)
        agent_spec = run.spec.for_agent(cell.agent)
        pod_spec = ((sandbox.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
        found = warmpool.leak(pod_spec, agent_spec, {logical, secret_name})
        if found is not None:
            return "other", (
                f"Sandbox {sandbox_name}'s spec.podTemplate.spec.{found}; the operator hands "
                "no cell to a sandbox whose target could hold another principal's key or token"
            )
        found = warmpool.drift(pod_spec, pool.pod, {secret_name: logical})
        if found is not None:
            return "other", (
                f"Sandbox {sandbox_name} does not run the pod the operator made for pool "
                f"{pool.name}: its spec.podTemplate.spec.{found} differs; the operator hands no "
                "cell to a sandbox it did not make"
            )
        if secret_name != guess or isinstance(secret, BaseException):
            try:
                secret = await self.board.api.get(kube.SECRETS, namespace, secret_name)
            except kube.ApiError as err:
                return "other", f"cannot read Sandbox {sandbox_name}'s generated Secret: {err}"
        assert isinstance(secret, dict)
        if not plan.owned_by(secret, str(sandbox["metadata"].get("uid") or "")):
            return "other", (
                f"Secret {secret_name} is not Sandbox {sandbox_name}'s own; the operator will "
                "not use tokens or keys the sandbox controller did not make for it"
            )
        try:
            token = _item(secret, cellsecrets.CONTROLLER)
            sandbox_key = _item(secret, cellgateway.SANDBOX_KEY_ITEM)
        except KeyError as err:
            return "other", f"Secret {secret_name} lacks the item {err}: not a pooled cell's"
        handed = warmpool.assignment(
            run.model,
            agent_spec,
            run.settings,
            cell=cell.name,
            test_id=cell.test.id,
            repeat=cell.repeat,
            attempt=cell.attempt,
            agent=cell.agent,
            run_key=run.key,
            sandbox_key=sandbox_key.encode(),
        )
        launch = (sandbox["metadata"].get("labels") or {}).get(warmpool.LAUNCH_TYPE_LABEL)
        if not self.board.live(run) or cell.state != "active":
            return None
        cell.token = token
        self.board.tokens[token] = run.ref
        patch = {"metadata": {"annotations": {assignment.ANNOTATION: handed.annotation()}}}
        try:
            await self.board.api.patch(kube.PODS, namespace, sandbox_name, patch)
        except kube.ApiError as err:
            return "other", f"cannot hand the cell to Sandbox {sandbox_name}'s pod: {err}"
        cell.assigned, cell.pod = cell.attempt, sandbox_name
        cell_launch: Literal["warm", "cold"] = "warm" if launch == "warm" else "cold"
        run.tally.launched(cell.name, cell_launch)
        self.board.metrics.cell_launched(run.ref.namespace, run.runspec, cell_launch)
        return None


def _check_owned(
    stored: Mapping[str, Any], wanted: Mapping[str, Any], owner: str, run: plan.Run
) -> None:
    """A template or pool of the pool's name is the operator's only if the RunSpec owns it
    *and* it is what the operator makes (``wanted``) — an ownerReference is anyone's to write,
    and a planted template's sandboxes (their env, their keys) would be its author's; so no
    cell is handed to them. Raises a :class:`~agent_health.cluster.errors.SpecError` naming
    the object and the first field that differs."""
    kind, name = stored.get("kind", "object"), stored["metadata"]["name"]
    where = f"{kind} {name} already exists in namespace {run.ref.namespace}"
    if not plan.owned_by(stored, owner):
        why = f"is not RunSpec {run.runspec}'s"
    elif (field := warmpool.difference(stored, wanted)) is not None:
        why = f"is not what the operator makes for RunSpec {run.runspec}: its {field} differs"
    else:
        return
    raise errors.SpecError(
        f"{where} and {why}; the operator will not run cells in sandboxes it did not make: "
        "delete it and run again"
    )


def _replicas(pool: Mapping[str, Any]) -> int:
    """A stored pool's ``spec.replicas`` (a value that is not a count holds none)."""
    found = (pool.get("spec") or {}).get("replicas")
    return found if isinstance(found, int) and found > 0 else 0


def _generated_secret(sandbox: Mapping[str, Any], logical: str) -> str:
    """The name of the Sandbox's own generated Secret (``logical`` in its template), as the
    controller recorded it."""
    recorded = (sandbox["metadata"].get("annotations") or {}).get(warmpool.GENERATED_SECRETS)
    try:
        names = json.loads(recorded) if recorded else {}
    except ValueError:
        names = {}
    name = names.get(logical) if isinstance(names, dict) else None
    return str(name or f"{sandbox['metadata']['name']}-{logical}")


def _item(secret: Mapping[str, Any], key: str) -> str:
    try:
        return base64.b64decode((secret.get("data") or {})[key]).decode().strip()
    except (binascii.Error, UnicodeDecodeError) as err:
        raise KeyError(key) from err
