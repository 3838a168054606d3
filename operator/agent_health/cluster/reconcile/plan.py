"""A run's plan and in-memory state: its cells, which tests it selects, where it records.

:class:`Run` is what :mod:`.runs` holds about one started EvaluationRun; :class:`Cell` is
one (test, repeat) of it. Everything here can be rebuilt from the API server after a restart:
the plan from the RunSpec's discovery and the run's spec, the state from the cells that exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from agent_health.cluster import apigroup, errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import kueue, ledgerurl, manifests
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import batcher, events, listing, pattern, spending, status
from agent_health.cluster.reconcile import collector as collector_mod
from agent_health.ledger import store
from agent_health.sdk import results

ATTEMPT = f"{apigroup.GROUP}/attempt"
PREEMPTIONS = f"{apigroup.GROUP}/preemptions"
"""How many of a cell's attempts Kueue preempted (they cost no infrastructure retry)."""
CellState = Literal["queued", "active", "ended", "replacing", "requeued", "done"]
"""``replacing``: its next attempt starts once its old object is gone (a retry, a preemption,
a suspension); ``requeued``: an errored cell run again (``spec.requeueErrored``) queues once
its old object is gone."""


@dataclasses.dataclass
class Cell:
    """One (test, repeat) of a run."""

    name: str
    test: listing.Test
    repeat: int
    agent: str | None = None
    """The agent of an agent matrix (a RunSpec ``spec.targets`` name); ``None``: ``target``."""
    attempt: int = 0
    preempted: int = 0
    """Attempts Kueue preempted (:mod:`.kueue`): retried without spending ``infraRetries``."""
    timed: int | None = None
    """The attempt whose deadline is kept: a cell Kueue still holds has none yet."""
    deadline: asyncio.Task[None] | None = None
    """The timer that ends the attempt ``timed`` at its deadline (cancelled at its grade)."""
    state: CellState = "queued"
    token: str | None = None
    stuck_since: float | None = None
    assigned: int | None = None
    """The attempt whose claimed sandbox was handed this cell (a warm-pool run's)."""
    pod: str | None = None
    """A warm-pool cell's pod (its sandbox's name); ``None``: the pod is named as the cell."""
    held: bool = False
    """Kueue holds the pod of the cell's Sandbox (``--sandbox-queueing admit``): its deadline
    waits for the admission, whatever the Sandbox's own events say."""
    last: dict[str, Any] | None = None

    @property
    def retries(self) -> int:
        """Infrastructure retries made so far (preemptions are not counted)."""
        return self.attempt - self.preempted


@dataclasses.dataclass(frozen=True)
class Pool:
    """A warm pool a run's cells claim from (:mod:`.pools`)."""

    name: str
    """Its SandboxWarmPool's (and SandboxTemplate's) name."""
    secret: str
    """The logical name of its sandboxes' generated Secret, as its template declares it."""
    pod: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    """The PodSpec of its template, as the operator made it: what a bound sandbox must run."""


@dataclasses.dataclass
class Run:
    """What the operator holds about one started run.

    Several parts of the scheduler change it; each field says which part owns it (sets it,
    or is the one that changes it): a part reads the others' fields and never writes them.
    :mod:`.intake` owns the run's set-up (once, when it starts), :mod:`.handoff` and
    :mod:`.adoption` the cells in flight, :mod:`.reactions` the events that came early,
    :mod:`.lifecycle` its end, :mod:`.historian` its record, :mod:`.runs` its steering,
    :mod:`.keyring` and :mod:`.pools` their own caches; the tally
    (:mod:`.status`) keeps its own counts and is told by all of them.
    """

    ref: batcher.RunRef
    """Its namespace and name (fixed)."""
    uid: str
    """Its EvaluationRun's uid (fixed)."""
    model: evaluationrun.EvaluationRun
    """The EvaluationRun as it was when the run started, its steerable fields as last
    steered. Owner: runs (``Runs.steer``)."""
    tally: status.RunTally
    """Its status: counts, phase, conditions. Told by every part; it changes only itself."""
    spec: runspec.RunSpec | None = None
    """Its RunSpec, resolved. Owner: intake (set once, when the run is planned)."""
    settings: manifests.Settings | None = None
    """How its cells are made. Owner: intake (set when planned; a ConfigMap ledger's share)."""
    key: bytes = b""
    """Its ledger key. Owner: intake (read or made once)."""
    backend: store.Backend | None = None
    """Its ledger store. Owner: intake."""
    collector: collector_mod.Collector | None = None
    """A ConfigMap ledger's: the operator stores the cells' records, collected from their
    gateways' logs, many cells per write (:mod:`.collector`); ``None``: gateways write.
    Owner: intake (made when planned); lifecycle closes it when the run ends."""
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)
    """Every planned cell, in plan order. Owner: intake (planned once); each :class:`Cell`
    is changed by the part that moves it (handoff, adoption, reactions)."""
    queue: deque[str] = dataclasses.field(default_factory=deque)
    """Cells not started yet, in order. Owners: handoff (starts and retries them) and
    adoption (after a restart)."""
    active: set[str] = dataclasses.field(default_factory=set)
    """Cells started and not ended. Owners: handoff and adoption, as for :attr:`queue`."""
    started: bool = False
    """Whether it is planned and driven. Owner: intake (set once)."""
    buffered: dict[str, tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    """Cells' events that came before the run started. Owners: reactions (keeps them) and
    intake (replays and clears them when it starts)."""
    phase: evaluationrun.Phase | None = None
    """The phase last written to the API server. Owner: lifecycle."""
    keyring: dict[int, asyncio.Future[Any]] = dataclasses.field(default_factory=dict)
    """The run's shared token Secrets, by number, as they are made or read. Owner:
    :mod:`.keyring`."""
    pools: dict[str | None, Pool] = dataclasses.field(default_factory=dict)
    """The warm pool each agent's cells claim from (``None``: ``target``'s). Owner:
    :mod:`.pools`."""
    remembered: int | None = None
    """The attempt (``spec.requeueErrored`` done) whose end was handed to the history
    (:mod:`.historian`): once per attempt of the run. Owner: historian."""
    regraded: bool = False
    """Finished before this operator started, and graded again for the history it was owed
    (:mod:`.recollection`): its status is the one it ended with, never rewritten from these
    grades. Owner: recollection."""
    _positions: dict[str, int] = dataclasses.field(default_factory=dict)

    def planned(self) -> list[str]:
        """The cells' names in plan order (tests as selected, then repeats)."""
        return list(self.cells)

    def position(self, cell: str) -> int:
        """Where ``cell`` is in :meth:`planned`."""
        if len(self._positions) != len(self.cells):
            self._positions = {name: n for n, name in enumerate(self.cells)}
        return self._positions[cell]

    @property
    def budget(self) -> spending.RunBudget | None:
        """``spec.budget`` and the spend against it (``None`` without a budget)."""
        return self.tally.budget

    @property
    def runspec(self) -> str:
        return self.model.spec.run_spec_ref.name

    @property
    def involved(self) -> dict[str, str]:
        return {
            "apiVersion": apigroup.API_VERSION,
            "kind": evaluationrun.KIND,
            "name": self.ref.name,
            "namespace": self.ref.namespace,
            "uid": self.uid,
        }


class Bulletin:
    """The latest body of each RunSpec seen, and runs waiting for one to change.

    Any number of runs may wait for the same RunSpec: a posted body is kept (never handed
    to one waiter only), and each waiter asks for what came after the serial it last saw.
    """

    def __init__(self) -> None:
        self._changed: dict[tuple[str, str], asyncio.Event] = {}
        self._bodies: dict[tuple[str, str], dict[str, Any]] = {}
        self._serials: dict[tuple[str, str], int] = {}

    @staticmethod
    def key_of(body: Mapping[str, Any]) -> tuple[str, str]:
        metadata = body.get("metadata") or {}
        return str(metadata.get("namespace")), str(metadata.get("name"))

    def post(self, body: Mapping[str, Any]) -> None:
        """A RunSpec event's object: keep it and wake whoever waits for it."""
        key = self.key_of(body)
        self._bodies[key] = dict(body)
        self._serials[key] = self._serials.get(key, 0) + 1
        changed = self._changed.pop(key, None)
        if changed is not None:
            changed.set()

    def forget(self, body: Mapping[str, Any]) -> None:
        """The RunSpec was deleted: drop its body (waiters wake and read it again)."""
        key = self.key_of(body)
        self._bodies.pop(key, None)
        self._serials[key] = self._serials.get(key, 0) + 1
        changed = self._changed.pop(key, None)
        if changed is not None:
            changed.set()

    def serial(self, key: tuple[str, str]) -> int:
        """How many bodies of ``key`` were posted so far (to wait for a later one)."""
        return self._serials.get(key, 0)

    async def wait(
        self, key: tuple[str, str], after: int, timeout: float
    ) -> tuple[int, dict[str, Any] | None]:
        """The serial and body of ``key`` once one later than ``after`` was posted (at once if
        one was), or ``(after, None)`` after ``timeout`` seconds."""
        if self.serial(key) <= after:
            changed = self._changed.setdefault(key, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
        if self.serial(key) <= after:
            return after, None
        return self.serial(key), self._bodies.get(key)


def select(
    tests: tuple[listing.Test, ...], selection: evaluationrun.Selection
) -> list[listing.Test]:
    """The tests a run executes, chosen as ``agent-health run --grep/--label`` chooses, except
    that ``grep`` is matched by RE2 in linear time (:mod:`.pattern`): the titles and the
    pattern are tenants' text, and this runs on the operator's one event loop."""
    chosen = [t for t in tests if t.mode == "only"] or list(tests)
    if selection.grep:
        found = pattern.compile(selection.grep)
        chosen = [t for t in chosen if found.search(t.title) or found.search(t.id)]
    wanted = [label.casefold() for label in selection.labels]  # as --label: letter case aside
    return [t for t in chosen if all(w in {h.casefold() for h in t.labels} for w in wanted)]


def agents(run: evaluationrun.EvaluationRun, spec: runspec.RunSpec) -> list[str | None]:
    """The agents a run's cells run against: ``spec.agents`` (an agent matrix), each a name of
    the RunSpec's ``spec.targets``; ``[None]`` (its ``target``) when it names none."""
    declared = [t.name for t in spec.spec.targets]
    for name in run.spec.agents:
        if name not in declared:
            raise errors.SpecError(
                f"spec.agents names {name!r}, which RunSpec {run.spec.run_spec_ref.name} does "
                f"not declare in spec.targets (declared: {', '.join(declared) or 'none'}); add "
                "it there or remove it from the run"
            )
    return list(run.spec.agents) or [None]


def ledger_url(template: str, run: evaluationrun.EvaluationRun) -> str:
    """A ledger URL with ``{namespace}``, ``{run}`` and ``{runspec}`` filled in."""
    namespace, name, _ = manifests.identity(run)
    spec_name = run.spec.run_spec_ref.name
    return ledgerurl.fill(template, namespace=namespace, run=name, runspec=spec_name)


def reason(text: str) -> str:
    """A condition reason from free text (CamelCase, as metav1.Condition requires)."""
    return events.to_reason(text)


def generation(body: Mapping[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


def created_at(body: Mapping[str, Any]) -> datetime.datetime | None:
    """The object's ``metadata.creationTimestamp`` (``None`` when absent or unreadable)."""
    stamp = (body.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def owned_by(body: Mapping[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid for o in body["metadata"].get("ownerReferences") or [])


def attempt(body: Mapping[str, Any]) -> int:
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT, "0")
    return int(value) if str(value).isdigit() else 0


def preemptions(body: Mapping[str, Any]) -> int:
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(PREEMPTIONS, "0")
    return int(value) if str(value).isdigit() else 0


def queued(run: Run) -> bool:
    """Whether the run's cells wait in a Kueue LocalQueue (:func:`.kueue.queue_of`)."""
    if run.spec is None or run.settings is None:
        return False
    settings = run.settings
    queue = kueue.queue_of(run.spec, run.model, settings.default_queue, settings.sandbox_queueing)
    return queue is not None


def started_at(body: Mapping[str, Any]) -> datetime.datetime | None:
    """When the kubelet took the pod (``status.startTime``; ``None`` before it did)."""
    stamp = (body.get("status") or {}).get("startTime")
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def skipped(cell: Cell, reason: str) -> grading.CellGrade:
    """The grade of a cell never started (``reason``: ``budget``): ``skipped``."""
    test = cell.test
    result = results.TestResult(
        id=test.id,
        name=test.title,
        title=test.title,
        file=test.file,
        line=test.line,
        labels=test.labels,
        repeat=cell.repeat,
        status="skipped",
        run_id=cell.name,
        content_hash=test.content_hash,
        skip_reason=reason,
        agent=cell.agent,
    )
    return grading.CellGrade(
        cell=cell.name, test_id=test.id, repeat=cell.repeat, status="skipped", result=result
    )


def unreadable(cell: Cell, reason: str, policy: evaluationrun.Retry) -> grading.CellGrade:
    return grading.grade_failed_pod(
        cell.name,
        expected(cell),
        f"cannot grade the ledger: {reason}",
        cause="other",
        attempt=cell.retries,
        policy=policy,
    )


def lost(cell: Cell, reason: str, policy: evaluationrun.Retry) -> grading.CellGrade:
    """A cell whose ledger its gateway's log does not hold whole (or that cannot be
    stored): ``errored``, cause ``infra``, never graded from a part of it."""
    return grading.grade_failed_pod(
        cell.name,
        expected(cell),
        f"no whole ledger: {reason}",
        cause="other",
        attempt=cell.retries,
        policy=policy,
    )


def peer_tools(spec: runspec.RunSpec | None) -> dict[str, tuple[str, ...]]:
    """Peer name → the tools it serves: those it declares (``peers[].tools``) and, for an MCP
    peer, those it listed when the RunSpec resolved (``status.mcpTools``)."""
    if spec is None:
        return {}
    listed = spec.status.mcp_tools if spec.status is not None else {}
    found: dict[str, tuple[str, ...]] = {}
    for peer in spec.spec.peers:
        more = listed.get(peer.name, []) if peer.protocol == "mcp" else []
        tools = tuple(dict.fromkeys([*peer.tools, *more]))
        if tools:
            found[peer.name] = tools
    return found


def mcp_peers(spec: runspec.RunSpec | None) -> tuple[str, ...]:
    """The peers the RunSpec declares MCP servers (``protocol: mcp``)."""
    return tuple(p.name for p in spec.spec.peers if p.protocol == "mcp") if spec else ()


def expected(
    cell: Cell,
    tools: Mapping[str, tuple[str, ...]] | None = None,
    mcp: tuple[str, ...] = (),
) -> grading.ExpectedCell:
    test = cell.test
    return grading.ExpectedCell(
        peer_tools=dict(tools or {}),
        mcp_peers=mcp,
        test_id=test.id,
        repeat=cell.repeat,
        run_id=cell.name,
        title=test.title,
        file=test.file,
        line=test.line,
        labels=test.labels,
        content_hash=test.content_hash,
        ledger_cell=manifests.ledger_cell(cell.name, cell.attempt),
        attempt=cell.attempt,
        agent=cell.agent,
    )
