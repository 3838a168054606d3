# Over 350 lines: admission, fair sharing and preemption are one decision over one state.
"""Kueue (kubernetes-sigs/kueue, ``kueue.x-k8s.io/v1beta1``), its plain-pod integration reduced
to what the operator relies on, following the upstream controllers' semantics:

* the pod webhook: a new pod labelled ``kueue.x-k8s.io/queue-name`` (in a namespace Kueue
  manages: all but ``kube-system`` and ``kueue-system`` here) gets the scheduling gate
  ``kueue.x-k8s.io/admission``, the label ``kueue.x-k8s.io/managed=true`` and the finalizer
  ``kueue.x-k8s.io/managed``; a pod without the label is left alone;
* one Workload per such pod (single-pod workloads; its request: ``pods`` 1 and the pod's CPU
  and memory requests, sidecars included, as Kueue sums them), waiting in the
  ClusterQueue of its LocalQueue (a LocalQueue that does not exist keeps it waiting);
* admission by quota: a ClusterQueue's ``resourceGroups[].flavors[].resources[]`` give
  each resource's ``nominalQuota`` (and ``borrowingLimit``); ClusterQueues of one
  ``cohort`` lend each other what they do not use. Each ClusterQueue admits its workloads
  oldest first (``queueingStrategy``: with ``StrictFIFO`` only the head may go, with
  ``BestEffortFIFO`` the oldest that fits); admitting is removing the gate. ``stopPolicy: Hold``,
  or a ResourceFlavor it names that does not exist, stops its admission. With fair sharing
  (:attr:`Kueue.fair_sharing`, as Kueue's ``fairSharing.enable``), of the heads that fit
  the one whose ClusterQueue's share after admitting it is lowest goes first — the share
  being what it borrows beyond its nominal quota, over what the cohort could lend, divided
  by ``spec.fairSharing.weight`` (dominant resource share); without it, heads that need
  no borrowing go first, then the oldest;
* preemption by deletion: a head that does not fit, but would within its own ClusterQueue's
  nominal quota, reclaims it (``preemption.reclaimWithinCohort`` ``Any`` or
  ``LowerPriority``) from ClusterQueues of its cohort that borrow — their newest admitted
  workloads first, only as many as it needs. Each victim pod gets the condition
  ``TerminationTarget`` (reason ``WorkloadEvicted``, as Kueue's pod ``Stop``) and is deleted;
* quota is released when a pod ends (``Succeeded``/``Failed``) or is gone; the finalizer is
  removed once a pod has ended or is being deleted.

:attr:`Kueue.admissions` records every admission in order, with each ClusterQueue's usage
after it and what was waiting: a test reads fairness from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import decimal
import itertools
from collections.abc import Mapping
from typing import Any

import httpx

from support.kube import Emulator, Kind
from support.node import kueueobjects
from support.node.kueueobjects import (
    CRDS,
    NONE,
    ZERO,
    pod_requests,
    quotas_of,
    total,
)

GROUP, VERSION = kueueobjects.GROUP, kueueobjects.VERSION
QUEUE_LABEL = f"{GROUP}/queue-name"
MANAGED = f"{GROUP}/managed"
GATE = f"{GROUP}/admission"
UNMANAGED_NAMESPACES = frozenset({"kube-system", "kueue-system"})


@dataclasses.dataclass(frozen=True)
class Admission:
    """One workload admitted: its pod, queues, and the state of the cohort right after."""

    namespace: str
    pod: str
    local_queue: str
    cluster_queue: str
    usage: Mapping[str, Mapping[str, decimal.Decimal]]
    """ClusterQueue → resource → what its admitted workloads use, this one included."""
    waiting: Mapping[str, int]
    """ClusterQueue → workloads still waiting in it."""


@dataclasses.dataclass
class Workload:
    namespace: str
    pod: str
    uid: str
    local_queue: str
    order: int
    requests: dict[str, decimal.Decimal]
    cluster_queue: str | None = None
    admitted: int | None = None
    """The admission's sequence number (newest is preempted first)."""
    evicting: bool = False


@dataclasses.dataclass
class Kueue:
    """The stand-in; :meth:`install` before pods are created, then :meth:`run` in a task."""

    emulator: Emulator
    api: httpx.AsyncClient
    fair_sharing: bool = True
    admissions: list[Admission] = dataclasses.field(default_factory=list)
    preempted: list[str] = dataclasses.field(default_factory=list)
    """``namespace/pod`` of every pod preempted, in order."""
    workloads: dict[str, Workload] = dataclasses.field(default_factory=dict)
    _order: itertools.count[int] = dataclasses.field(default_factory=itertools.count)
    _changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    _used: dict[str, dict[str, decimal.Decimal]] = dataclasses.field(default_factory=dict)
    _caching: bool = False

    async def install(self) -> None:
        """The CRDs, and the pod webhook."""
        for crd in CRDS:
            answer = await self.api.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
            )
            if answer.status_code != 409:
                answer.raise_for_status()
        self.emulator.store.admission.append(self._webhook)

    def _webhook(self, kind: Kind, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        labels = meta.get("labels") or {}
        if (kind.group, kind.plural) != ("", "pods") or not labels.get(QUEUE_LABEL):
            return
        if meta.get("namespace") in UNMANAGED_NAMESPACES:
            return
        meta["labels"] = {**labels, MANAGED: "true"}
        meta["finalizers"] = [*(meta.get("finalizers") or []), MANAGED]
        gates = body.setdefault("spec", {}).setdefault("schedulingGates", [])
        if not any(g.get("name") == GATE for g in gates):
            gates.append({"name": GATE})

    # -- following -------------------------------------------------------------------------

    async def run(self) -> None:
        store = self.emulator.store
        pods = store.kinds[("", "pods")]
        queues = [
            store.kinds[(GROUP, p)] for p in ("resourceflavors", "clusterqueues", "localqueues")
        ]

        async def nudge(kind: Kind) -> None:
            async for _ in store.watch(
                kind, None, lambda _l: True, since=None, initial_bookmark=False, timeout=None
            ):
                self._changed.set()

        nudges = [asyncio.ensure_future(nudge(k)) for k in queues]
        scheduler = asyncio.ensure_future(self._scheduler())
        try:
            async for event in store.watch(
                pods,
                None,
                lambda labels: labels.get(MANAGED) == "true",
                since=None,
                initial_bookmark=False,
                timeout=None,
            ):
                await self._pod(event["type"], event["object"])
                self._changed.set()
        finally:
            for task in (*nudges, scheduler):
                task.cancel()
            for task in (*nudges, scheduler):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _pod(self, event_type: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        workload = self.workloads.get(uid)
        if event_type == "DELETED":
            self.workloads.pop(uid, None)
            return
        fresh = not meta.get("deletionTimestamp") and _gated(pod)
        if workload is None and phase not in ("Succeeded", "Failed") and fresh:
            workload = Workload(
                namespace=meta["namespace"], pod=meta["name"], uid=uid,
                local_queue=meta["labels"][QUEUE_LABEL], order=next(self._order),
                requests=pod_requests(pod),
            )  # fmt: skip
            self.workloads[uid] = workload
        ended = phase in ("Succeeded", "Failed")
        if ended:
            self.workloads.pop(uid, None)  # finished: its quota is free
        elif workload is not None and workload.admitted is None and meta.get("deletionTimestamp"):
            self.workloads.pop(uid, None)  # deleted before it was admitted
        # An admitted pod being deleted keeps its quota until it is gone (DELETED).
        if (ended or meta.get("deletionTimestamp")) and MANAGED in (meta.get("finalizers") or []):
            await self._finalize(pod)

    async def _finalize(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != MANAGED]
        answer = await self.api.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            json=[
                {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": kept},
            ],
            headers={"Content-Type": "application/json-patch+json"},
        )
        if answer.status_code not in (404, 409, 422):
            answer.raise_for_status()

    # -- scheduling ------------------------------------------------------------------------

    async def _scheduler(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            while await self._cycle():
                pass

    def _cluster_queues(self) -> dict[str, dict[str, Any]]:
        kind = self.emulator.store.kinds[(GROUP, "clusterqueues")]
        found = self.emulator.store.list(kind, None, lambda _l: True)
        return {cq["metadata"]["name"]: cq for cq in found}

    def _usage(self, cq: str) -> dict[str, decimal.Decimal]:
        if cq in self._used:
            return self._used[cq]
        used: dict[str, decimal.Decimal] = {}
        for w in self.workloads.values():
            if w.admitted is not None and w.cluster_queue == cq:
                for name, amount in w.requests.items():
                    used[name] = used.get(name, ZERO) + amount
        if self._caching:
            self._used[cq] = used
        return used

    async def _cycle(self) -> bool:
        """Admit one workload, or start preempting for one; whether anything was done."""
        self._used.clear()
        self._caching = True  # usage is fixed until this cycle admits or evicts
        try:
            return await self._decide()
        finally:
            self._caching = False
            self._used.clear()

    async def _decide(self) -> bool:
        queues = self._cluster_queues()
        locals_ = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): str(
                (q.get("spec") or {}).get("clusterQueue") or ""
            )
            for q in self.emulator.store.list(
                self.emulator.store.kinds[(GROUP, "localqueues")], None, lambda _l: True
            )
        }
        heads: dict[str, Workload] = {}
        pending: dict[str, list[Workload]] = {}
        waiting: dict[str, int] = {}
        for w in sorted(self.workloads.values(), key=lambda w: w.order):
            if w.admitted is not None:
                continue
            cq = locals_.get((w.namespace, w.local_queue)) or None
            if cq is None or cq not in queues:
                continue  # no LocalQueue or ClusterQueue (yet): it keeps waiting, gated
            waiting[cq] = waiting.get(cq, 0) + 1
            if not self._active(queues[cq]):
                continue
            heads.setdefault(cq, w)
            pending.setdefault(cq, []).append(w)
        fitting: list[tuple[str, Workload]] = []
        for cq, ordered in pending.items():
            # StrictFIFO: only the head may go; BestEffortFIFO: the oldest that fits.
            strict = (queues[cq].get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            tried: set[tuple[tuple[str, decimal.Decimal], ...]] = set()
            for w in ordered[:1] if strict else ordered:
                asked = tuple(sorted(w.requests.items()))
                if asked in tried:
                    continue  # one just like it did not fit
                if self._fits(queues, cq, w.requests):
                    fitting.append((cq, w))
                    break
                tried.add(asked)
        if fitting:
            if self.fair_sharing:
                cq, chosen = min(
                    fitting, key=lambda f: (self._share(queues, f[0], f[1].requests), f[1].order)
                )
            else:
                cq, chosen = min(
                    fitting, key=lambda f: (self._borrows(queues, f[0], f[1].requests), f[1].order)
                )
            await self._admit(chosen, cq, queues, waiting)
            return True
        for cq, head in sorted(heads.items(), key=lambda h: h[1].order):
            if await self._reclaim(queues, cq, head):
                return True
        return False

    def _active(self, cq: Mapping[str, Any]) -> bool:
        """A ClusterQueue admits only while not held (``stopPolicy``) and while every
        ResourceFlavor it names exists (Kueue's ``Active`` condition, ``FlavorNotFound``)."""
        spec = cq.get("spec") or {}
        if spec.get("stopPolicy", "None") != "None":
            return False
        return all(
            self.emulator.exists(f"resourceflavors.{GROUP}", None, flavor["name"])
            for group in spec.get("resourceGroups") or []
            for flavor in group.get("flavors") or []
        )

    def _cohort(self, queues: Mapping[str, dict[str, Any]], cq: str) -> list[str]:
        cohort = (queues[cq].get("spec") or {}).get("cohort")
        if not cohort:
            return [cq]
        return [n for n, q in queues.items() if (q.get("spec") or {}).get("cohort") == cohort]

    def _fits(
        self, queues: Mapping[str, dict[str, Any]], cq: str, asked: Mapping[str, decimal.Decimal]
    ) -> bool:
        quotas = quotas_of(queues[cq])
        used = self._usage(cq)
        cohort = self._cohort(queues, cq)
        for name, amount in asked.items():
            if amount == 0:
                continue
            if name not in quotas:
                return False  # a resource its ClusterQueue does not cover
            nominal, borrowing = quotas[name]
            mine = used.get(name, ZERO) + amount
            if borrowing is not None and mine > nominal + borrowing:
                return False
            pool = total(quotas_of(queues[q]).get(name, NONE)[0] for q in cohort)
            taken = total(self._usage(q).get(name, ZERO) for q in cohort)
            if taken + amount > pool:  # its own nominal quota may be lent out and in use
                return False
        return True

    def _borrows(
        self, queues: Mapping[str, dict[str, Any]], cq: str, asked: Mapping[str, decimal.Decimal]
    ) -> bool:
        quotas, used = quotas_of(queues[cq]), self._usage(cq)
        return any(used.get(n, ZERO) + a > quotas.get(n, NONE)[0] for n, a in asked.items() if a)

    def _share(
        self, queues: Mapping[str, dict[str, Any]], cq: str, asked: Mapping[str, decimal.Decimal]
    ) -> decimal.Decimal:
        """The ClusterQueue's dominant resource share once ``asked`` is admitted."""
        quotas, used = quotas_of(queues[cq]), self._usage(cq)
        cohort = self._cohort(queues, cq)
        weight = decimal.Decimal(
            str(((queues[cq].get("spec") or {}).get("fairSharing") or {}).get("weight", "1"))
        )
        share = ZERO
        for name, amount in asked.items():
            nominal = quotas.get(name, NONE)[0]
            above = used.get(name, ZERO) + amount - nominal
            lendable = sum(
                (quotas_of(queues[q]).get(name, NONE)[0] for q in cohort),
                ZERO,
            )
            if above > 0 and lendable > 0:
                share = max(share, above / lendable)
        return share / weight if weight > 0 else decimal.Decimal("Infinity")

    async def _admit(
        self,
        workload: Workload,
        cq: str,
        queues: Mapping[str, dict[str, Any]],
        waiting: dict[str, int],
    ) -> None:
        workload.cluster_queue, workload.admitted = cq, next(self._order)
        self._used.clear()
        self._caching = False
        waiting[cq] -= 1
        self.admissions.append(
            Admission(
                namespace=workload.namespace, pod=workload.pod, local_queue=workload.local_queue,
                cluster_queue=cq, usage={q: self._usage(q) for q in self._cohort(queues, cq)},
                waiting=dict(waiting),
            )
        )  # fmt: skip
        path = f"/api/v1/namespaces/{workload.namespace}/pods/{workload.pod}"
        current = await self.api.get(path)
        if current.status_code == 404:
            self.workloads.pop(workload.uid, None)
            return
        current.raise_for_status()
        gates = [
            g for g in current.json()["spec"].get("schedulingGates") or [] if g["name"] != GATE
        ]
        answer = await self.api.patch(
            path,
            json=[
                {"op": "test", "path": "/metadata/uid", "value": workload.uid},
                {"op": "replace", "path": "/spec/schedulingGates", "value": gates},
            ],
            headers={"Content-Type": "application/json-patch+json"},
        )
        if answer.status_code not in (404, 409, 422):
            answer.raise_for_status()

    async def _reclaim(self, queues: Mapping[str, dict[str, Any]], cq: str, head: Workload) -> bool:
        """Preempt borrowers of the cohort for ``head`` if its own nominal quota holds it."""
        policy = ((queues[cq].get("spec") or {}).get("preemption") or {}).get(
            "reclaimWithinCohort", "Never"
        )
        quotas, used = quotas_of(queues[cq]), self._usage(cq)
        within = all(
            used.get(n, ZERO) + a <= quotas.get(n, NONE)[0] for n, a in head.requests.items() if a
        )
        if policy == "Never" or not within:
            return False
        freeing = {
            n: sum((w.requests.get(n, ZERO) for w in self.workloads.values()
                    if w.evicting), ZERO)
            for n in head.requests
        }  # fmt: skip
        cohort = self._cohort(queues, cq)
        pool = {
            n: sum((quotas_of(queues[q]).get(n, NONE)[0] for q in cohort),
                   ZERO)
            for n in head.requests
        }  # fmt: skip
        taken = {n: sum((self._usage(q).get(n, ZERO) for q in cohort), ZERO) for n in head.requests}

        def short() -> bool:
            return any(taken[n] - freeing[n] + a > pool[n] for n, a in head.requests.items() if a)

        if not short():
            return False  # what is being freed already makes room: wait for it
        borrowers = [
            w
            for w in self.workloads.values()
            if w.admitted is not None
            and not w.evicting
            and w.cluster_queue in cohort
            and w.cluster_queue != cq
            and self._borrowing(queues, str(w.cluster_queue))
        ]
        victims: list[Workload] = []
        for w in sorted(borrowers, key=lambda w: -(w.admitted or 0)):
            if not short():
                break
            victims.append(w)
            w.evicting = True
            for n in freeing:
                freeing[n] += w.requests.get(n, ZERO)
        self._used.clear()
        self._caching = False
        for victim in victims:
            await self._evict(victim, f"Preempted to accommodate a workload of {cq}")
        return bool(victims)

    def _borrowing(self, queues: Mapping[str, dict[str, Any]], cq: str) -> bool:
        quotas, used = quotas_of(queues[cq]), self._usage(cq)
        evicting = {
            n: sum((w.requests.get(n, ZERO) for w in self.workloads.values()
                    if w.evicting and w.cluster_queue == cq), ZERO)
            for n in used
        }  # fmt: skip
        return any(used[n] - evicting[n] > quotas.get(n, NONE)[0] for n in used)

    async def _evict(self, workload: Workload, message: str) -> None:
        """What Kueue's pod ``Stop`` does: the TerminationTarget condition, then delete."""
        self.preempted.append(f"{workload.namespace}/{workload.pod}")
        path = f"/api/v1/namespaces/{workload.namespace}/pods/{workload.pod}"
        current = await self.api.get(path)
        if current.status_code == 404:
            return
        conditions = [
            c
            for c in (current.json().get("status") or {}).get("conditions") or []
            if c.get("type") != "TerminationTarget"
        ]
        conditions.append(
            {
                "type": "TerminationTarget",
                "status": "True",
                "reason": "WorkloadEvicted",
                "message": message,
                "lastTransitionTime": _now(),
            }
        )
        answer = await self.api.patch(
            f"{path}/status",
            json={"status": {"conditions": conditions}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code != 404:
            answer.raise_for_status()
        answer = await self.api.delete(path)
        if answer.status_code != 404:
            answer.raise_for_status()


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.asynccontextmanager
async def running(emulator: Emulator, api: httpx.AsyncClient, **options: Any) -> Any:
    """Kueue installed (its CRDs and pod webhook) and running until the block ends."""
    kueue = Kueue(emulator, api, **options)
    await kueue.install()
    task = asyncio.ensure_future(kueue.run())
    try:
        yield kueue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        emulator.store.admission.remove(kueue._webhook)
