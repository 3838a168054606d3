"""Kubernetes Events about EvaluationRuns: one on each phase change and on every error.

The bodies are **core v1** Events (``POST /api/v1/namespaces/NS/events``), shaped like the
ones kopf posts for ``kopf.event``/``kopf.info`` (kopf 1.4x posts to ``v1`` ``events``
with ``involvedObject``, ``source.component``, ``first``/``lastTimestamp``, ``eventTime``,
``reportingComponent``/``reportingInstance`` and a 1024-character message cut in the
middle). Ours stay consistent with kopf's own events in ``kubectl describe``, need one RBAC
rule for both, and can be aggregated the classic way: a repeat bumps ``count`` and
``lastTimestamp`` of the first event instead of creating another.

Rules: a ``reason`` is CamelCase (``ImageUnresolvable``; free text is converted by
:func:`to_reason`), at most 128 characters; a ``message`` is at most 1024 bytes — longer ones
keep their start and end around ``...`` (the end of an error is often the telling part).

:class:`EventRecorder` builds the bodies and deduplicates: the same object, type, reason and
message within ``window`` seconds gives a :class:`Emit` with ``action="bump"``; the
reconciler sends ``patch`` as a merge patch to ``events/NAME`` (and falls back to POSTing
``body`` if that event has expired).
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_health.cluster import apigroup
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE_BYTES = 1024
MAX_REASON = 128
CUT = "..."
_REASON = re.compile(r"^[A-Z][A-Za-z0-9]*$")
# Error texts of a grade, by the reason their Event carries.
_GRADE_REASONS = (
    ("ledger tampered", "LedgerTampered"),
    ("no ledger for cell", "LedgerMissing"),
    ("ledger belongs to another cell", "LedgerMismatch"),
    ("no final record", "CellUnfinished"),
    ("infrastructure failure", "CellInfraFailure"),
    ("doubtful evidence", "EvidenceDoubtful"),
)


def to_reason(text: str) -> str:
    """``text`` as a CamelCase reason: ``"image pull-failed"`` → ``"ImagePullFailed"``."""
    if _REASON.match(text) and len(text) <= MAX_REASON:
        return text
    words = re.findall(r"[A-Za-z0-9]+", text)
    camel = "".join(w[:1].upper() + w[1:] for w in words).lstrip("0123456789")
    return (camel or "Unknown")[:MAX_REASON]


def truncate_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` in at most ``limit`` UTF-8 bytes: its start, ``...``, and its end."""
    data = message.encode("utf-8")
    if len(data) <= limit:
        return message
    room = limit - len(CUT)
    head = data[: room // 2].decode("utf-8", errors="ignore")
    tail = data[len(data) - (room - room // 2) :].decode("utf-8", errors="ignore")
    return f"{head}{CUT}{tail}"


def involved_ref(body: Mapping[str, Any]) -> dict[str, str]:
    """The ``involvedObject`` reference of an object body."""
    metadata = body.get("metadata") or {}
    ref = {
        "apiVersion": str(body.get("apiVersion") or apigroup.API_VERSION),
        "kind": str(body.get("kind") or evaluationrun.KIND),
        "name": str(metadata.get("name") or ""),
        "namespace": str(metadata.get("namespace") or "default"),
    }
    if metadata.get("uid"):
        ref["uid"] = str(metadata["uid"])
    return ref


def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(
    involved: Mapping[str, str],
    type: EventType,
    reason: str,
    message: str,
    *,
    now: datetime.datetime,
    action: str = "Reconcile",
    component: str = "agent-health",
    instance: str = "operator",
    count: int = 1,
    first: datetime.datetime | None = None,
) -> dict[str, Any]:
    """One core v1 Event about ``involved``, named ``OBJECT.<hex nanoseconds><hex digest>``
    (the digest of type, reason and message keeps two events of one instant apart)."""
    first = first or now
    reason, message = to_reason(reason), truncate_message(message)
    stamp = int(first.timestamp() * 1e9)
    digest = hashlib.sha256(f"{type}\0{reason}\0{message}".encode()).hexdigest()[:8]
    name = f"{involved['name']}.{stamp:x}{digest}"[-253:].lstrip(".-")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": involved["namespace"]},
        "involvedObject": dict(involved),
        "type": type,
        "reason": reason,
        "message": message,
        "action": action,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "count": count,
        "firstTimestamp": _stamp(first),
        "lastTimestamp": _stamp(now),
        "eventTime": _micro(first),
    }


@dataclass(frozen=True)
class Emit:
    """What to send: ``create`` → POST ``body``; ``bump`` → merge-patch ``patch`` into
    ``events/NAME`` (or POST ``body`` when that event is gone)."""

    action: Literal["create", "bump"]
    namespace: str
    name: str
    body: dict[str, Any]
    patch: dict[str, Any] | None = None


@dataclass
class _Seen:
    name: str
    first: datetime.datetime
    last: datetime.datetime
    count: int


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class EventRecorder:
    """Builds Event bodies and folds repeats within ``window`` seconds into count bumps."""

    def __init__(
        self,
        *,
        window: float = 600.0,
        max_keys: int = 4096,
        component: str = "agent-health",
        instance: str = "operator",
        clock: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self.window = datetime.timedelta(seconds=window)
        self.max_keys = max_keys
        self.component = component
        self.instance = instance
        self._clock = clock
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()

    def event(
        self,
        involved: Mapping[str, str],
        type: EventType,
        reason: str,
        message: str,
        *,
        action: str = "Reconcile",
    ) -> Emit:
        """An Event, or a bump of the same one seen within the window."""
        now = self._clock()
        reason, message = to_reason(reason), truncate_message(message)
        obj = involved.get("uid") or f"{involved['kind']}/{involved['name']}"
        key = (involved["namespace"], obj, type, reason, message)
        self._expire(now)
        seen = self._seen.get(key)  # what is left after expiry was seen within the window
        if seen is None:
            seen = _Seen(name="", first=now, last=now, count=0)
        seen.count += 1
        seen.last = now
        body = event_body(
            involved,
            type,
            reason,
            message,
            now=now,
            action=action,
            component=self.component,
            instance=self.instance,
            count=seen.count,
            first=seen.first,
        )
        seen.name = body["metadata"]["name"]
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)
        namespace = involved["namespace"]
        if seen.count == 1:
            return Emit("create", namespace, seen.name, body)
        patch = {"count": seen.count, "lastTimestamp": body["lastTimestamp"]}
        return Emit("bump", namespace, seen.name, body, patch)

    def phase_changed(
        self,
        involved: Mapping[str, str],
        old: evaluationrun.Phase | None,
        new: evaluationrun.Phase,
        message: str = "",
    ) -> Emit:
        """``Normal`` for a phase change, ``Warning`` when the run Failed."""
        text = f"{old or 'new'} → {new}" + (f": {message}" if message else "")
        return self.event(
            involved, "Warning" if new == "Failed" else "Normal", new, text, action="PhaseChange"
        )

    def error(self, involved: Mapping[str, str], reason: str, message: str) -> Emit:
        """A ``Warning`` for an error of the operator or of the run."""
        return self.event(involved, "Warning", reason, message)

    def cell_errored(self, involved: Mapping[str, str], grade: grading.CellGrade) -> Emit | None:
        """A ``Warning`` for an errored cell (with a reason from its error), else ``None``."""
        if grade.status != "errored":
            return None
        error = grade.error or "errored"
        reason = next((r for text, r in _GRADE_REASONS if text in error), "CellErrored")
        blame = f", cause {grade.cause}" if grade.cause else ""
        message = f"{grade.test_id} (repeat {grade.repeat}, cell {grade.cell}{blame}): {error}"
        return self.event(involved, "Warning", reason, message, action="Grade")

    def cell_preempted(self, involved: Mapping[str, str], cell: str, why: str) -> Emit:
        """A ``Normal`` Event: Kueue preempted a cell's pod and the cell runs again."""
        message = f"cell {cell} was preempted by Kueue ({why}); it is planned again"
        return self.event(involved, "Normal", "CellPreempted", message, action="Requeue")

    def warm_pool_capped(
        self, involved: Mapping[str, str], pool: str, wanted: int, kept: int, cap: int
    ) -> Emit:
        """A ``Warning`` Event: a warm pool gets fewer sandboxes than its RunSpec asks for,
        the namespace being at the operator's cap (its cells start cold beyond them)."""
        message = (
            f"warm pool {pool} keeps {kept} of the {wanted} sandboxes its RunSpec asks for: the "
            f"operator keeps at most {cap} warm in this namespace (--max-warm-replicas), over "
            "all its pools; the run's other cells start cold"
        )
        return self.event(involved, "Warning", "WarmPoolCapped", message, action="Scale")

    def steered(self, involved: Mapping[str, str], message: str, reason: str = "Suspended") -> Emit:
        """A ``Normal`` Event: the run was steered (``spec.suspend``, ``requeueErrored``)."""
        return self.event(involved, "Normal", reason, message, action="Steer")

    def _expire(self, now: datetime.datetime) -> None:
        while self._seen:
            key, oldest = next(iter(self._seen.items()))
            if now - oldest.last <= self.window:
                break
            del self._seen[key]
