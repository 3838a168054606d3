"""Images as the node runs them: read from the project's Dockerfiles, pulled from a registry.

No image is built. An image's *config* (entrypoint, cmd, env, working directory, user) is
read from the final stage of its Dockerfile under ``images/`` (``images/<name>/Dockerfile``,
or the stage ``AS <name>`` of a multi-target ``images/Dockerfile``), and its *files* are
this host's root filesystem with what the Dockerfile copies bound in place: the builder
stage's venv (``COPY --from=builder /opt/venv /opt/venv``) is this test run's venv, a
``COPY`` from the build context is that folder of the repository (``examples/agents/`` at
``/app/``). So a pod runs exactly the command line the cluster would, on this checkout's
code.

A reference is read as a node's containerd reads it (:func:`qualified`): a name without a
registry is Docker Hub's (``agent-health/operator:dev`` is
``docker.io/agent-health/operator:dev``), never a short name resolved against what happens to
be there. An image is on the node once a test put it there under a name, as ``kind load``
does (:meth:`Puller.load`), or once it was pulled; ``Never`` finds only those, by the exact
name. The registry stand-in holds each image where ``scripts/images.py push`` stores it,
``agent-health/<image>`` (``kind-registry:5000/agent-health/controller@sha256:...`` is
``controller``). Pulling asks the registry for the manifest (``HEAD
/v2/<name>/manifests/<ref>``) and, for a reference pinned by digest, checks that the registry
serves exactly that digest, as a runtime does.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import ssl
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
from agent_health.cluster.registry import registry

ROOT = Path(__file__).resolve().parents[3]
IMAGES = ROOT / "images"
VENV = Path(sys.prefix)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_FROM = re.compile(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_VENV = re.compile(r"\bvenv\s+(\S+)")


class PullError(Exception):
    """The image cannot be pulled; ``reason`` is the kubelet's waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclasses.dataclass
class Image:
    """What a container runtime needs from an image."""

    name: str
    entrypoint: list[str] = dataclasses.field(default_factory=list)
    cmd: list[str] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=lambda: {"PATH": BASE_PATH})
    workdir: str = "/"
    user: tuple[int, int] = (0, 0)
    binds: dict[str, str] = dataclasses.field(default_factory=dict)
    """Path in the image → host path bound there."""
    venvs: list[str] = dataclasses.field(default_factory=list)
    """Venvs a RUN of this stage creates (a later COPY --from takes them)."""

    def derived(self, name: str) -> Image:
        return dataclasses.replace(
            self,
            name=name,
            entrypoint=list(self.entrypoint),
            cmd=list(self.cmd),
            env=dict(self.env),
            binds=dict(self.binds),
            venvs=list(self.venvs),
        )


def catalog(images: Path = IMAGES) -> dict[str, Image]:
    """Every image the project builds, by name (``operator``, ``controller``, ...)."""
    found: dict[str, Image] = {}
    multi = images / "Dockerfile"
    if multi.exists():
        stages = _stages(multi.read_text())
        found.update({name: image for name, image in stages.items() if image.entrypoint})
    for dockerfile in sorted(images.glob("*/Dockerfile")):
        stages = _stages(dockerfile.read_text())
        final = stages[_last_stage(dockerfile.read_text())]
        found[dockerfile.parent.name] = final.derived(dockerfile.parent.name)
    return found


PUSHED_AS = "agent-health/"
"""The repository prefix ``scripts/images.py push`` stores every image under."""


def image_name(reference: str) -> str:
    """The image a reference names: the last part of its repository."""
    return registry.parse(reference).repository.rsplit("/", 1)[-1]


def qualified(reference: str) -> str:
    """``reference`` as a node's containerd names it: registry and repository in full
    (``docker.io``, and ``library/`` for Docker Hub's one-part names), the tag dropped beside
    a digest, ``latest`` when it gives neither.

    >>> qualified("agent-health/operator:dev")
    'docker.io/agent-health/operator:dev'
    """
    ref = registry.parse(reference)
    if ref.digest is not None:
        return f"{ref.name}@{ref.digest}"
    return f"{ref.name}:{ref.tag or 'latest'}"


@dataclasses.dataclass
class Puller:
    """Pulls through a registry stand-in; ``hosts`` maps registry host names to addresses.

    As a kubelet, it asks the registry again for ``Always`` and never for ``Never``; for
    ``IfNotPresent`` only when the node does not have the reference (loaded or pulled)."""

    images: Mapping[str, Image]
    """The images the registry stand-in holds, by name (``controller``: at
    ``agent-health/controller``)."""
    hosts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    insecure: frozenset[str] = frozenset()
    present: dict[str, tuple[Image, str]] = dataclasses.field(default_factory=dict)
    """What is on the node: each :func:`qualified` reference → its image and ``imageID``."""
    loaded: list[str] = dataclasses.field(default_factory=list)
    """Every reference put on the node by :meth:`load`, qualified, in order."""
    _tls: ssl.SSLContext | None = None

    def load(self, reference: str, image: str) -> None:
        """Put ``image`` (a name of :attr:`images`) on the node as ``reference``, as ``kind
        load`` puts an image on a node under the name it was built with."""
        name = qualified(reference)
        self.present[name] = (self.images[image], name)
        self.loaded.append(name)

    async def pull(self, reference: str, policy: str) -> tuple[Image, str]:
        """The image and its ``imageID`` (``name@sha256:...``), or a :class:`PullError`."""
        on_node = self.present.get(qualified(reference))
        if policy == "Never":
            if on_node is None:
                raise PullError(
                    "ErrImageNeverPull",
                    f'Container image "{reference}" is not present with pull policy of Never',
                )
            return on_node
        if policy == "IfNotPresent" and on_node is not None:
            return on_node
        ref = registry.parse(reference)
        host = ref.registry
        hostname, _, port = host.partition(":")
        address = f"{self.hosts.get(hostname, hostname)}{':' + port if port else ''}"
        scheme = "http" if host in self.insecure else "https"
        wanted = ref.digest or ref.tag or "latest"
        url = f"{scheme}://{address}/v2/{ref.repository}/manifests/{wanted}"
        try:
            # One TLS context for every pull: making one loads the CA bundle (tens of ms of
            # the node's event loop each time).
            self._tls = self._tls or httpx.create_ssl_context()
            async with httpx.AsyncClient(timeout=10, verify=self._tls) as client:
                answer = await client.head(url, headers={"Accept": registry.ACCEPT})
        except httpx.HTTPError as err:
            raise PullError("ErrImagePull", f"pulling {reference}: {err!r}") from err
        if answer.status_code != 200:
            raise PullError("ErrImagePull", f"pulling {reference}: {answer.status_code}")
        digest = answer.headers.get("Docker-Content-Digest", "")
        if ref.digest is not None and digest != ref.digest:
            raise PullError(
                "ErrImagePull", f"pulling {reference}: the registry serves {digest or 'no digest'}"
            )
        pushed_as = ref.repository.startswith(PUSHED_AS)
        image = self.images.get(ref.repository.removeprefix(PUSHED_AS)) if pushed_as else None
        if image is None:
            raise PullError(
                "ErrImagePull",
                f"pulling {reference}: the registry stand-in holds only images/ as "
                f"{PUSHED_AS}<image>",
            )
        self.present[qualified(reference)] = (image, f"{host}/{ref.repository}@{digest}")
        return self.present[qualified(reference)]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    return lines


def _last_stage(text: str) -> str:
    names = [m.group(2) or f"#{i}" for i, m in enumerate(_froms(text))]
    return names[-1]


def _froms(text: str) -> list[re.Match[str]]:
    return [m for line in _logical_lines(text) if (m := _FROM.match(line))]


def _stages(text: str) -> dict[str, Image]:
    stages: dict[str, Image] = {}
    current: Image | None = None
    index = 0
    for line in _logical_lines(text):
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            found = _FROM.match(line)
            assert found, line
            base, alias = found.group(1), found.group(2) or f"#{index}"
            index += 1
            current = stages[base].derived(alias) if base in stages else Image(alias)
            stages[alias] = current
        elif current is None:
            continue
        elif instruction == "ENV":
            current.env.update(_env(rest, current.env))
        elif instruction == "WORKDIR":
            current.workdir = rest.strip()
        elif instruction == "USER":
            uid, _, gid = rest.strip().partition(":")
            current.user = (int(uid), int(gid or uid))
        elif instruction in ("ENTRYPOINT", "CMD"):
            words = json.loads(rest) if rest.strip().startswith("[") else ["/bin/sh", "-c", rest]
            if instruction == "ENTRYPOINT":
                current.entrypoint, current.cmd = words, []
            else:
                current.cmd = words
        elif instruction == "RUN":
            current.venvs += _VENV.findall(rest)
        elif instruction == "COPY":
            _copy(current, shlex.split(rest), stages)
    return stages


def _env(rest: str, before: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in shlex.split(rest):
        key, _, value = word.partition("=")
        out[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: before.get(m.group(1), ""), value)
    return out


def _copy(image: Image, words: list[str], stages: Mapping[str, Image]) -> None:
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if len(paths) != 2:
        return  # several sources: none of the project's images copies that way
    source, target = paths
    stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
    if stage is not None:
        if source.rstrip("/") in [v.rstrip("/") for v in stages.get(stage, Image("")).venvs]:
            image.binds[target.rstrip("/")] = str(VENV)
            # The venv's scripts name their interpreter by its host path, and its editable
            # install names the checkout: both stay reachable where a pod mounts a volume
            # over a parent of theirs (a checkout under /tmp, where cells mount an emptyDir).
            for path in (ROOT, VENV):
                image.binds[str(path)] = str(path)
        return
    if not target.startswith("/"):
        target = f"{image.workdir.rstrip('/')}/{target}"
    image.binds[target.rstrip("/") or "/"] = str(ROOT / source.rstrip("/"))
