"""Real containers: podman, with runc, runs every container of a pod from the image the node
pulled.

The node keeps images in a store of its own (``--root``/``--runroot`` under the test's
directory): an image is on the node only once the kubelet pulled it from a registry — by
digest where the pod names one, podman checking that the bytes match — or once a test put
it there as ``kind load`` does (:meth:`Podman.load`). Every reference is asked for as a
node's containerd reads it (:func:`node.images.qualified`): podman's own short-name
resolution (``agent-health/operator`` found as ``localhost/agent-health/operator``) is one
kind's nodes do not do. Registry names (``kind-registry:5000``) are mapped to addresses, over
plain HTTP, by a registries.conf of the node's.

From the kubelet's launch spec a container gets: the pod's network namespace
(``--network ns:``) and a UTS namespace with the pod's hostname; its uid, gid and
supplementary groups (``fsGroup``); ``readOnlyRootFilesystem`` (``--read-only`` without the
tmpfs podman would add: Kubernetes adds none); ``allowPrivilegeEscalation: false``
(no-new-privileges); dropped and added capabilities; a ``seccompProfile`` of
``Unconfined`` or the runtime's default; memory and CPU limits as cgroup limits (where the
host's cgroups allow: cgroup v1 here); the pod's volumes, ``/etc/hosts``,
``/etc/resolv.conf`` and ``/etc/hostname`` as bind mounts; the termination-message file; the
working directory, the command line and exactly the environment the kubelet composed. Not
modelled: a pod-wide IPC namespace, ephemeral-storage and pids limits, OOM reporting on
cgroup v1 (an OOM-killed container is seen as exit 137).

Each run is one attached ``podman run``: its output is the run's log, and the run's pid —
for signals, exec probes and tests — is the container's first process as the host sees it,
so a signal reaches the container as the kubelet's runtime would deliver it (SIGTERM to a
PID 1 without a handler does nothing; SIGKILL always kills). A command that cannot be
started is ``StartError`` (exit 128) with the runtime's message. Every container carries the
test process's pid as a label: :meth:`Podman.close` removes them all, and
:meth:`Podman.open` first removes what a killed earlier run left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from support.node import containers, images, network

ROOT = Path(__file__).resolve().parents[3]
CONTAINERS_CONF = ROOT / "scripts" / "containers.conf"
LABEL = "dev.agent-health.node"
NODES = Path("/run/ahn")
"""One directory per live node (its pid): the runtime's state (podman refuses a runroot of more
than 50 characters: its sockets' paths must fit) and where the node's store is, for the next
run to clean up after a killed one."""
_QUANTITY = re.compile(r"^([0-9.]+(?:e[0-9]+)?)([a-zA-Z]*)$")
_SUFFIXES = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip


class PodmanError(Exception):
    """A podman command failed; the message has what it said."""


def available() -> str | None:
    """``None`` when this process can run the node's containers, else why not."""
    if os.geteuid() != 0:
        return "the container runtime needs root (run the end-to-end test as root, as CI does)"
    for tool in ("podman", "skopeo", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/get-containers.sh installs it)"
    return None


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity as a number: ``"512Mi"`` → 536870912, ``"250m"`` → 0.25."""
    found = _QUANTITY.match(str(text))
    if found is None or found.group(2) not in _SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return float(found.group(1)) * _SUFFIXES[found.group(2)]


@dataclasses.dataclass
class Podman:
    """The node's container runtime (see the module docstring)."""

    root: Path
    """The node's directory: its image store, the runtime's state and registries.conf."""
    registries: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Registry name (``host:port``) → the address it is reached at, over plain HTTP."""
    pid: int = dataclasses.field(default_factory=os.getpid)
    name: str = "container"
    image_binds: bool = False
    pulled: list[str] = dataclasses.field(default_factory=list)
    """Every reference pulled from a registry, in order."""
    loaded: list[str] = dataclasses.field(default_factory=list)
    """Every reference put on the node by :meth:`load`, qualified, in order."""
    _pulls: dict[str, asyncio.Lock] = dataclasses.field(default_factory=dict)

    @property
    def state(self) -> Path:
        return NODES / str(self.pid)

    # -- the podman command ----------------------------------------------------------------

    def argv(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root", str(self.root / "storage"),
            "--runroot", str(self.state / "run"),
            "--tmpdir", str(self.state / "libpod"),
            "--storage-driver", "overlay",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "file",
            *args,
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.root / "registries.conf")
        return env

    async def call(self, *args: str, check: bool = True) -> str:
        """Run ``podman ARGS``; its stdout (a :class:`PodmanError` on failure when ``check``)."""
        return await self._run(self.argv(*args), check=check)

    async def _run(self, argv: list[str], *, check: bool = True) -> str:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=self.env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        if check and process.returncode != 0:
            said = err.decode(errors="replace").strip().splitlines()
            raise PodmanError(said[-1] if said else f"{argv[0]} exited {process.returncode}")
        return out.decode(errors="replace")

    # -- the node's lifetime ---------------------------------------------------------------

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, root: Path, registries: Mapping[str, str]) -> AsyncIterator[Podman]:
        """The runtime, its store empty; every container and the store removed after."""
        reason = available()
        if reason is not None:
            raise PodmanError(reason)
        await _remove_leftovers()
        runtime = cls(root, dict(registries))
        await asyncio.to_thread(runtime._write_config)
        try:
            yield runtime
        finally:
            await runtime.close()

    def _write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        lines = []
        for name, address in self.registries.items():
            lines += ["[[registry]]", f'prefix = "{name}"', f'location = "{address}"',
                      "insecure = true", ""]  # fmt: skip
        (self.root / "registries.conf").write_text("\n".join(lines))
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "root").write_text(str(self.root))

    async def close(self) -> None:
        await self.call("rm", "--all", "--force", "--time", "0", check=False)
        await self.call("system", "reset", "--force", check=False)
        await asyncio.to_thread(self._forget)

    def _forget(self) -> None:
        """Unmount what podman left mounted in the store (its overlay directory), then remove
        the store and the runtime's state."""
        storage = str(self.root / "storage")
        with open("/proc/self/mountinfo") as table:
            mounted = [line.split()[4] for line in table]
        for point in sorted((m for m in mounted if m.startswith(storage)), reverse=True):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
        shutil.rmtree(storage, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)

    async def load(self, reference: str) -> None:
        """Copy an image from the local build store onto the node under the name it was built
        with, as ``kind load`` does."""
        store = f"containers-storage:[overlay@{self.root / 'storage'}+{self.state / 'run'}]"
        name = images.qualified(reference)
        await self._run(
            ["skopeo", "copy", "--quiet", f"containers-storage:{reference}", store + name]
        )
        self.loaded.append(name)

    # -- images ------------------------------------------------------------------------------

    async def pull(self, reference: str, policy: str) -> tuple[images.Image, str]:
        name = images.qualified(reference)  # as the node's containerd would look it up
        lock = self._pulls.setdefault(name, asyncio.Lock())
        async with lock:  # the pods of a run pull the same images at once: one pull each
            present = await self._present(name)
            if policy == "Never" and not present:
                raise images.PullError(
                    "ErrImageNeverPull",
                    f'Container image "{reference}" is not present with pull policy of Never',
                )
            if policy == "Always" or not present:
                try:
                    await self.call("pull", "--quiet", name)
                except PodmanError as err:
                    raise images.PullError("ErrImagePull", f"pulling {reference}: {err}") from err
                self.pulled.append(reference)
        (found,) = json.loads(await self.call("image", "inspect", name))
        config = found.get("Config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
        user = str(config.get("User") or "0")
        uid, _, gid = user.partition(":")
        image = images.Image(
            name=images.image_name(reference),
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            env=env or {"PATH": images.BASE_PATH},
            workdir=config.get("WorkingDir") or "/",
            user=(int(uid), int(gid or uid)),
        )
        name = reference.split("@")[0]
        if name.rfind(":") > name.rfind("/"):
            name = name.rsplit(":", 1)[0]
        return image, f"{name}@{found['Digest']}"

    async def _present(self, reference: str) -> bool:
        process = await asyncio.create_subprocess_exec(
            *self.argv("image", "exists", reference),
            env=self.env(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await process.communicate()
        if process.returncode not in (0, 1):  # 1: no such image; anything else: podman failed
            said = err.decode(errors="replace").strip().splitlines()
            raise images.PullError("ErrImagePull", f"{reference}: {said[-1] if said else err!r}")
        return process.returncode == 0

    # -- containers --------------------------------------------------------------------------

    async def start(
        self, spec: dict[str, Any], image: images.Image, state: Path, log: Path
    ) -> containers.Run:
        # The termination-message file and the run's state are made as for a process.
        _spec_file, termination = await asyncio.to_thread(containers.prepare, spec, state, log)
        name = f"ah{self.pid}-{spec['id']}"
        image_ref = images.qualified(spec["image"])  # the image pull() found, by that name
        argv = self.argv("run", *self.options(spec, name, termination), image_ref)
        process = await containers.spawn(argv, log, self.env())
        run = PodmanRun(process, log, termination, containers.now(), runtime=self, name=name)
        await run.started()
        return run

    def options(self, spec: Mapping[str, Any], name: str, termination: Path) -> list[str]:
        """``podman run`` options for one container of the launch spec."""
        found = ["--name", name, "--label", f"{LABEL}={self.pid}", "--pull", "never",
                 "--log-driver", "none", "--sig-proxy=false",
                 "--network", f"ns:{spec['netns']}", "--hostname", spec["hostname"],
                 "--user", f"{spec['uid']}:{spec['gid']}", "--workdir", spec["workdir"],
                 "--entrypoint", json.dumps(spec["argv"])]  # fmt: skip
        for group in spec["groups"]:
            if group != spec["gid"]:
                found += ["--group-add", str(group)]
        if spec.get("read_only_root"):
            found += ["--read-only", "--read-only-tmpfs=false"]
        if spec.get("no_new_privs"):
            found += ["--security-opt", "no-new-privileges"]
        if spec.get("seccomp") == "Unconfined":
            found += ["--security-opt", "seccomp=unconfined"]
        capabilities = spec.get("capabilities") or {}
        found += [a for cap in capabilities.get("drop") or [] for a in ("--cap-drop", cap)]
        found += [a for cap in capabilities.get("add") or [] for a in ("--cap-add", cap)]
        limits = spec.get("limits") or {}
        if "memory" in limits:
            memory = str(int(quantity(limits["memory"])))
            found += ["--memory", memory, "--memory-swap", memory]  # no swap, as a kubelet
        if "cpu" in limits:
            found += ["--cpus", f"{quantity(limits['cpu']):g}"]
        for bind in spec["binds"]:
            mount = f"type=bind,source={bind['source']},target={bind['target']}"
            found += ["--mount", mount + (",ro=true" if bind.get("readonly") else "")]
        target = spec["termination_log"]["target"]
        found += ["--mount", f"type=bind,source={termination},target={target}"]
        found += [a for key, value in spec["env"].items() for a in ("--env", f"{key}={value}")]
        return found

    async def remove(self, runs: list[containers.Run]) -> None:
        names = [run.name for run in runs if isinstance(run, PodmanRun)]
        if names:
            await self.call("rm", "--force", "--ignore", "--time", "0", *names, check=False)


@dataclasses.dataclass
class PodmanRun(containers.Run):
    """One ``podman run`` of a container (see the module docstring)."""

    runtime: Podman | None = None
    name: str = ""
    container_pid: int = 0
    cid: str = ""

    @property
    def pid(self) -> int:
        return self.container_pid

    @property
    def container_id(self) -> str:
        return f"podman://{self.cid}"

    def signal(self, number: int) -> None:
        if self.exit_code is not None:
            return
        if self.container_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.container_pid, number)
        else:  # no container process yet: stop the podman that was to start it
            super().signal(number)

    async def started(self) -> None:
        """Wait until the container's first process runs (or the run ended without one)."""
        assert self.runtime is not None
        while True:
            answer = await self.runtime.call(
                "inspect", "--format", "{{.State.Pid}} {{.Id}}", self.name, check=False
            )
            words = answer.split()
            if len(words) == 2 and words[0] != "0":
                self.container_pid, self.cid = int(words[0]), words[1]
                return
            if len(words) == 2:
                self.cid = words[1]
            if self.process.returncode is not None:
                return  # ended already (or never started): wait() says how
            await asyncio.sleep(0.02)

    async def wait(self) -> int:
        code = await self.process.wait()
        if self.exit_code is not None:
            return self.exit_code
        assert self.runtime is not None
        answer = await self.runtime.call(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}",
            self.name, check=False,
        )  # fmt: skip
        words = answer.split()
        if len(words) == 3 and words[0] == "created":
            # Never started: the runtime refused the command (podman said why in the log).
            self.exit_code, self.reason = 128, "StartError"
        elif len(words) == 3:
            self.exit_code = int(words[1])
            if words[2] == "true":
                self.reason = "OOMKilled"
        else:
            self.exit_code = 128 - code if code < 0 else code
        self.finished_at = containers.now()
        return self.exit_code


def _stale() -> list[tuple[int, Path]]:
    """(pid, store) of the nodes whose test process is gone."""
    if not NODES.is_dir():
        return []
    return [
        (int(entry.name), Path((entry / "root").read_text().strip()))
        for entry in NODES.iterdir()
        if entry.name.isdigit()
        and (entry / "root").is_file()
        and not network.alive(int(entry.name))
    ]


async def _remove_leftovers() -> None:
    """Containers and stores of earlier runs whose process is gone (a killed test run)."""
    for pid, root in await asyncio.to_thread(_stale):
        stale = Podman(root, pid=pid)
        with contextlib.suppress(OSError):
            await stale.close()  # (and forgets its state directory)
