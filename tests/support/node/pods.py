"""One pod on the node, from creation to its end, as the kubelet runs it.

In order: pull every image (``ErrImagePull``/``ImagePullBackOff`` while the registry says
no); join the network (the pod's IP); write the volumes (``FailedMount`` while a Secret or
ConfigMap is missing); run the init containers in order — a native sidecar (``restartPolicy:
Always``) is started and waited for until its startup probe passes (or at once without one),
a plain init container must exit 0; then start the main containers. A container is restarted
as its policy says (sidecars always, main containers per the pod's ``restartPolicy``), with
an exponential back-off (``CrashLoopBackOff``) that starts at ``Node.backoff`` instead of
10 s. When every main container has ended, the sidecars are stopped in reverse order (SIGTERM,
then SIGKILL after ``terminationGracePeriodSeconds``) and the pod is ``Succeeded`` (every
main container exited 0) or ``Failed``. ``activeDeadlineSeconds`` (also one added or lowered
later on the running pod, counted from its start) fails it with reason ``DeadlineExceeded``;
deleting it stops everything. When the pod's labels or annotations change, its downward-API
volumes are rewritten, each file swapped in whole (:meth:`Pod.update`), as the kubelet's
atomic writer does. Every change is reported to the pod's ``status`` (phase, conditions,
IPs, ``initContainerStatuses`` and ``containerStatuses`` with restarts, ``lastState`` and
termination messages), batched into at most one patch in flight.

(Longer than most modules: one pod's life reads here from start to end, in the order the
kubelet goes through it.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from support.node import containers, environment, images, probes, volumes
from support.node.network import PodNetwork

if TYPE_CHECKING:
    from support.node.kubelet import Kubelet

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


@dataclasses.dataclass
class Container:
    spec: dict[str, Any]
    kind: str
    """``init``, ``sidecar`` or ``main``."""
    image: images.Image | None = None
    image_id: str = ""
    run: containers.Run | None = None
    launched: dict[str, Any] | None = None
    """The launch spec of the current run (its user and environment, for exec probes)."""
    restarts: int = 0
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    started: bool = False
    ready: bool = False
    started_event: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    runs: list[containers.Run] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": self.image_id,
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.run is not None:
            found["containerID"] = self.run.container_id
        return found


class Stopped(Exception):
    """The pod's run ended early (deleted or past its deadline)."""


class Pod:
    def __init__(self, kubelet: Kubelet, body: dict[str, Any]) -> None:
        self.kubelet, self.body = kubelet, body
        meta, spec = body["metadata"], body["spec"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = kubelet.root / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.containers: dict[str, Container] = {}
        for init in spec.get("initContainers") or []:
            kind = "sidecar" if init.get("restartPolicy") == "Always" else "init"
            self.containers[init["name"]] = Container(init, kind)
        for main in spec["containers"]:
            self.containers[main["name"]] = Container(main, "main")
        for c in self.containers.values():
            reason = (
                "PodInitializing" if c.kind == "main" and self._inits() else "ContainerCreating"
            )
            c.state = {"waiting": {"reason": reason}}
        self.network: PodNetwork | None = None
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.initialized = False
        self.started_at = containers.now()
        self._clock = time.monotonic()  # startTime, for a deadline set later
        self._deadline_task: asyncio.Task[None] | None = None
        self._remount = asyncio.Lock()
        self._writer: volumes.Writer | None = None
        self.stopping = False
        self.gone = False
        self.volumes: dict[str, Path] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self._dirty = asyncio.Event()
        self._reporter: asyncio.Task[None] | None = None
        self.task: asyncio.Task[None] | None = None

    def _inits(self) -> list[Container]:
        return [c for c in self.containers.values() if c.kind != "main"]

    @property
    def ip(self) -> str:
        return self.network.ip if self.network else ""

    # -- the lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self._reporter = asyncio.ensure_future(self._report_loop())
        self.task = asyncio.ensure_future(self._run())
        deadline = self.body["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            self._arm(float(deadline))

    def update(self, body: dict[str, Any]) -> None:
        """A newer version of the pod from the API (the kubelet's pod update)."""
        old, self.body = self.body, body
        if self.gone or self.task is None or self.task.done():
            return
        deadline = body["spec"].get("activeDeadlineSeconds")
        if deadline is not None and deadline != old["spec"].get("activeDeadlineSeconds"):
            self._arm(float(deadline))
        meta = ("labels", "annotations")
        if any(old["metadata"].get(k) != body["metadata"].get(k) for k in meta):
            self._spawn(self._refresh_downward())

    def _arm(self, seconds: float) -> None:
        """The pod's deadline: ``seconds`` after its start, whenever it was set."""
        if self._deadline_task is not None:
            self._deadline_task.cancel()
        left = max(0.0, seconds - (time.monotonic() - self._clock))
        self._deadline_task = self._spawn(self._deadline(left))

    async def _refresh_downward(self) -> None:
        """Rewrite the downward-API files of the volumes written so far from the pod's
        current metadata (one refresh at a time, each from the newest body)."""
        async with self._remount:
            if self._writer is None:
                return  # not written yet: the first write reads the newest body
            self._writer.pod = self.body
            declared = list(self.body["spec"].get("volumes") or [])
            declared += self.kubelet.automount(self.body)
            for volume in declared:
                if volume["name"] in self.volumes:
                    await asyncio.to_thread(self._writer.refresh, volume)

    async def delete(self) -> None:
        """The pod is gone from the API: stop everything, report nothing more."""
        self.gone = True
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _deadline(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self.phase in ("Pending", "Running") and self.task is not None:
            self.reason, self.message = "DeadlineExceeded", DEADLINE_MESSAGE
            self.task.cancel()

    async def _run(self) -> None:
        try:
            self.report()
            await self._pull()
            self.network = await self.kubelet.network.attach()
            self.report()
            await self._write_volumes()
            if await self._initialize():
                await self._main()
        except asyncio.CancelledError:
            await self._stop_all()
            if self.reason == "DeadlineExceeded" and not self.gone:
                self.phase = "Failed"
                await self._final_report()
            if self.gone:
                raise
        finally:
            left = list(self.tasks)
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            await self._kill_leftovers()
            if self.network is not None:
                await self.kubelet.network.detach(self.network)
            if self._reporter is not None:
                self._reporter.cancel()

    async def _pull(self) -> None:
        for c in self.containers.values():
            policy = c.spec.get("imagePullPolicy") or _default_policy(c.spec["image"])
            failures = 0
            while True:
                try:
                    c.image, c.image_id = await self.kubelet.runtime.pull(c.spec["image"], policy)
                    break
                except images.PullError as err:
                    failures += 1
                    reason = err.reason if failures == 1 else "ImagePullBackOff"
                    if err.reason == "ErrImageNeverPull":
                        reason = err.reason
                    c.state = {"waiting": {"reason": reason, "message": err.message}}
                    self.report()
                    await asyncio.sleep(self.kubelet.backoff * min(2**failures, 16))

    async def _write_volumes(self) -> None:
        assert self.network is not None
        writer = volumes.Writer(
            self.body,
            self.dir / "volumes",
            self.kubelet.lookup,
            pod_ip=self.network.ip,
            node_ip=self.kubelet.network.node_ip,
            claims=self.kubelet.root / "claims",
        )
        wanted = list(self.body["spec"].get("volumes") or [])
        wanted += self.kubelet.automount(self.body)
        while True:
            try:
                async with self._remount:
                    writer.pod = self.body  # the newest metadata, should it have changed
                    for volume in wanted:
                        path = await asyncio.to_thread(writer.write, volume)
                        self.volumes[volume["name"]] = path
                    self._writer = writer
                return
            except volumes.MountError as err:
                await self.kubelet.event(self.body, "FailedMount", f"MountVolume.SetUp: {err}")
                await asyncio.sleep(self.kubelet.backoff * 4)

    async def _initialize(self) -> bool:
        for c in self._inits():
            task = self._spawn(self._supervise(c))
            if c.kind == "sidecar":
                await c.started_event.wait()
                continue
            code = await task
            if code != 0:
                self.phase = "Failed"
                await self._final_report()
                return False
        self.initialized = True
        self.phase = "Running"
        for c in self.containers.values():
            if c.kind == "main":
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        self.report()
        return True

    async def _main(self) -> None:
        mains = [c for c in self.containers.values() if c.kind == "main"]
        codes = await asyncio.gather(*(self._spawn(self._supervise(c)) for c in mains))
        self.stopping = True
        for c in reversed([c for c in self._inits() if c.kind == "sidecar"]):
            if c.run is not None:
                await c.run.stop(self._grace())
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        await self._final_report()

    async def _stop_all(self) -> None:
        self.stopping = True
        order = [*[c for c in self.containers.values() if c.kind == "main"]]
        order += reversed(self._inits())
        for c in order:
            if c.run is not None and c.run.exit_code is None:
                await c.run.stop(self._grace())
                self._terminated(c, c.run)

    async def _kill_leftovers(self) -> None:
        """Kill what a restart started while the pod was stopping (a sidecar that woke from
        its back-off after :meth:`_stop_all` passed it): nothing of a pod outlives it."""
        for c in self.containers.values():
            for run in c.runs:
                if run.running:
                    run.signal(signal.SIGKILL)
                    await run.wait()
        await self.kubelet.runtime.remove([run for c in self.containers.values() for run in c.runs])

    def _grace(self) -> float:
        if self.kubelet.closing:
            return 0.0
        return float(self.body["spec"].get("terminationGracePeriodSeconds", 30))

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- one container ---------------------------------------------------------------------

    async def _supervise(self, c: Container) -> int:
        """Run ``c`` (restarting it as its policy says) until it ends for good; its exit code."""
        while True:
            try:
                spec = self.kubelet.launch_spec(self, c)
            except environment.ConfigError as err:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
                self.report()
                await asyncio.sleep(self.kubelet.backoff * 4)
                continue
            run_dir = self.dir / "containers" / c.name / str(c.restarts)
            log = self.dir / "logs" / c.name / f"{c.restarts}.log"
            assert c.image is not None
            c.run = await self.kubelet.runtime.start(spec, c.image, run_dir, log)
            c.launched = spec
            c.runs.append(c.run)
            c.state = {"running": {"startedAt": c.run.started_at}}
            self.report()
            watchers = self._probe(c)
            code = await c.run.wait()
            for task in watchers:
                task.cancel()
            c.started = c.ready = False
            if self.stopping or not self._restarts(c, code):
                self._terminated(c, c.run)
                c.started_event.set()  # an init container that ended unblocks the order
                self.report()
                return code
            c.last_state = {"terminated": self._terminated_state(c, c.run)}
            c.restarts += 1
            delay = min(self.kubelet.backoff * 2 ** (c.restarts - 1), self.kubelet.backoff * 32)
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={c.name} "
                    f"pod={self.name}",
                }
            }
            self.report()
            await asyncio.sleep(delay)

    def _restarts(self, c: Container, code: int) -> bool:
        if c.kind == "sidecar":
            return True
        policy = self.body["spec"].get("restartPolicy", "Always")
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _terminated_state(self, c: Container, run: containers.Run) -> dict[str, Any]:
        code = run.exit_code if run.exit_code is not None else 137
        found: dict[str, Any] = {
            "exitCode": code,
            "reason": run.reason or ("Completed" if code == 0 else "Error"),
            "startedAt": run.started_at,
            "finishedAt": run.finished_at or containers.now(),
            "containerID": run.container_id,
        }
        if run.reason == "StartError":  # the runtime's own words, as a kubelet reports them
            message = containers.tail(run.log, 1, containers.MESSAGE_LIMIT).strip()
        else:
            message = run.message(c.spec.get("terminationMessagePolicy", "File"))
        if message:
            found["message"] = message
        return found

    def _terminated(self, c: Container, run: containers.Run) -> None:
        c.state = {"terminated": self._terminated_state(c, run)}

    def _probe(self, c: Container) -> list[asyncio.Task[Any]]:
        fast = self.kubelet.probe_interval
        tasks = []

        def inside() -> tuple[int, dict[str, Any]] | None:
            if c.run is None or c.launched is None or c.run.exit_code is not None:
                return None
            return c.run.pid, c.launched

        async def lifecycle() -> None:
            assert c.run is not None
            startup = c.spec.get("startupProbe")
            if startup is not None:
                passed = await probes.Probe(startup, c.spec, self.ip, fast, inside).until_success()
                if not passed:
                    await c.run.stop(self._grace())
                    return
            c.started = True
            c.started_event.set()
            self.report()
            readiness = c.spec.get("readinessProbe")
            if readiness is None:
                c.ready = True
                self.report()
            else:
                tasks.append(self._spawn(self._readiness(c, readiness)))
            liveness = c.spec.get("livenessProbe")
            if liveness is not None:
                await probes.Probe(liveness, c.spec, self.ip, fast, inside).until_failure()
                await c.run.stop(self._grace())

        tasks.append(self._spawn(lifecycle()))
        return tasks

    async def _readiness(self, c: Container, spec: dict[str, Any]) -> None:
        def inside() -> tuple[int, dict[str, Any]] | None:
            if c.run is None or c.launched is None or c.run.exit_code is not None:
                return None
            return c.run.pid, c.launched

        probe = probes.Probe(spec, c.spec, self.ip, self.kubelet.probe_interval, inside)
        await asyncio.sleep(probe.delay)
        failures = 0
        while True:
            if await probe.once():
                failures = 0
                if not c.ready:
                    c.ready = True
                    self.report()
                await asyncio.sleep(probe.period)
                continue
            failures += 1
            if failures >= probe.threshold and c.ready:
                c.ready = False
                self.report()
            await asyncio.sleep(probe.interval if not c.ready else probe.period)

    # -- status ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        mains = [c for c in self.containers.values() if c.kind == "main"]
        sidecars = [c for c in self.containers.values() if c.kind == "sidecar"]
        ended = self.phase in ("Succeeded", "Failed")
        ready = not ended and all(c.ready for c in [*mains, *sidecars])

        def condition(kind: str, value: bool, reason: str | None = None) -> dict[str, Any]:
            found = {"type": kind, "status": "True" if value else "False"}
            if reason and not value:
                found["reason"] = reason
            return found

        status: dict[str, Any] = {
            "phase": self.phase,
            "startTime": self.started_at,
            "hostIP": self.kubelet.network.node_ip,
            "hostIPs": [{"ip": self.kubelet.network.node_ip}],
            "conditions": [
                condition("PodScheduled", True),
                condition("Initialized", self.initialized, "ContainersNotInitialized"),
                condition(
                    "ContainersReady", ready, "PodCompleted" if ended else "ContainersNotReady"
                ),
                condition("Ready", ready, "PodCompleted" if ended else "ContainersNotReady"),
            ],
            "initContainerStatuses": [c.status() for c in self._inits()],
            "containerStatuses": [c.status() for c in mains],
        }
        if self.ip:
            status["podIP"], status["podIPs"] = self.ip, [{"ip": self.ip}]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message or ""
        return status

    def report(self) -> None:
        """Schedule a status patch (several changes in a row become one)."""
        self._dirty.set()

    async def _report_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self.gone:
                return
            await self.kubelet.patch_status(self, self.status())

    async def _final_report(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter
            self._reporter = None
        if not self.gone:
            await self.kubelet.patch_status(self, self.status())


def _default_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    tag = tail.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"
