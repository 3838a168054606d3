"""The node's container runtime: what the kubelet asks of it, and the process runtime.

Two runtimes implement :class:`Runtime`:

* :class:`Processes` — images as commands (:mod:`node.images`), each container a process
  started by :mod:`node.launcher` on this host's root filesystem with the image's files bound
  in: fast, for most end-to-end tests;
* :class:`node.podman.Podman` — every container a real container, run by podman and runc
  from the image the node pulled from a real registry (by digest), with its own root
  filesystem: for the end-to-end test on real images.

The kubelet composes one launch spec per container (:meth:`node.kubelet.Kubelet.launch_spec`:
network namespace, hostname, binds, user and groups, read-only root, capabilities,
resources, command line, environment); each runtime honours what it can and says in its
docstring what it does not.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

from support.node import containers, images


class Runtime(Protocol):
    name: str
    """``process`` or ``container``: tests name the runtime they ran on."""
    image_binds: bool
    """Whether an image's files are host paths bound into the container (the process
    runtime's images) rather than the image's own root filesystem."""

    @property
    def loaded(self) -> list[str]:
        """Every image put on the node as ``kind load`` does, by the name the node gives it
        (:func:`node.images.qualified`), in order."""
        ...

    async def pull(self, reference: str, policy: str) -> tuple[images.Image, str]:
        """The image's config and its ``imageID``, or :class:`node.images.PullError`."""
        ...

    async def start(
        self, spec: dict[str, Any], image: images.Image, state: Path, log: Path
    ) -> containers.Run:
        """Start one container run; its output goes to ``log``."""
        ...

    async def remove(self, runs: list[containers.Run]) -> None:
        """Forget a pod's ended runs (the pod is gone)."""
        ...


@dataclasses.dataclass
class Processes:
    """Images as commands: see :mod:`node.images` and :mod:`node.launcher`."""

    puller: images.Puller
    name: str = "process"
    image_binds: bool = True

    @property
    def loaded(self) -> list[str]:
        return self.puller.loaded

    async def pull(self, reference: str, policy: str) -> tuple[images.Image, str]:
        return await self.puller.pull(reference, policy)

    async def start(
        self, spec: dict[str, Any], image: images.Image, state: Path, log: Path
    ) -> containers.Run:
        return await containers.start(spec, state, log)

    async def remove(self, runs: list[containers.Run]) -> None:
        """Nothing: a process that ended left nothing behind but its log."""
