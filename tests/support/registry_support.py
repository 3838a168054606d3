"""A real OCI registry for tests: Debian's ``docker-registry`` (the CNCF distribution
registry), started with a config of its own on a loopback or node address.

:func:`serve` writes the config (address, a storage directory, optionally htpasswd users
with bcrypt hashes, as the registry requires), starts ``docker-registry serve`` and waits
for ``/v2/``; it stops the registry on the way out. :class:`Registry` pushes what a client
pushes — blobs, then an image manifest or an index over them — through the distribution
API, so tests control the exact bytes (and so the digests) a registry serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import hashlib
import json
import shutil
import socket
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import bcrypt
import httpx
import yaml

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def available() -> str | None:
    if shutil.which("docker-registry") is None:
        return "docker-registry is not installed (scripts/get-containers.sh installs it)"
    return None


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclasses.dataclass
class Registry:
    address: str
    """``host:port`` it serves on, over plain HTTP."""
    storage: Path
    users: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def client(self) -> httpx.AsyncClient:
        auth = None
        if self.users:
            user, password = next(iter(self.users.items()))
            auth = httpx.BasicAuth(user, password)
        return httpx.AsyncClient(base_url=self.url, auth=auth, timeout=30)

    async def blob(self, repository: str, data: bytes) -> str:
        """Upload ``data`` as a blob of ``repository`` (monolithic upload); its digest."""
        digest = digest_of(data)
        async with self.client() as client:
            started = await client.post(f"/v2/{repository}/blobs/uploads/")
            assert started.status_code == 202, started.text
            # The upload's URL carries its state in its query: keep it, add the digest.
            location = httpx.URL(started.headers["Location"])
            done = await client.put(
                location.copy_merge_params({"digest": digest}),
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            assert done.status_code == 201, done.text
        return digest

    async def manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> str:
        """PUT a manifest (or index) under a tag or digest; the digest the registry gives it."""
        async with self.client() as client:
            answer = await client.put(
                f"/v2/{repository}/manifests/{reference}",
                content=body,
                headers={"Content-Type": media_type},
            )
        assert answer.status_code == 201, answer.text
        return str(answer.headers["Docker-Content-Digest"])

    async def delete(self, repository: str, digest: str) -> None:
        async with self.client() as client:
            answer = await client.delete(f"/v2/{repository}/manifests/{digest}")
        assert answer.status_code == 202, answer.text

    async def image(
        self, repository: str, tag: str, *, oci: bool = True, note: str = ""
    ) -> tuple[str, bytes]:
        """Push a tiny image (a config and one layer) as ``repository:tag``: (digest, manifest).
        ``note`` goes into the config, so two images of one repository differ."""
        config = json.dumps({"architecture": "amd64", "os": "linux",
                             "config": {"Labels": {"note": note}},
                             "rootfs": {"type": "layers", "diff_ids": []}}).encode()  # fmt: skip
        layer = gzip.compress(b"\0" * 1024, mtime=0)  # an empty tar archive
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
                "config": {
                    "mediaType": OCI_CONFIG if oci else DOCKER_CONFIG,
                    "digest": await self.blob(repository, config),
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": OCI_LAYER if oci else DOCKER_LAYER,
                        "digest": await self.blob(repository, layer),
                        "size": len(layer),
                    }
                ],
            }
        ).encode()
        media_type = OCI_MANIFEST if oci else DOCKER_MANIFEST
        return await self.manifest(repository, tag, manifest, media_type), manifest

    async def index(self, repository: str, tag: str, *, oci: bool = True) -> tuple[str, bytes]:
        """Push an index (manifest list) of two platform images as ``repository:tag``."""
        entries = []
        for arch in ("amd64", "arm64"):
            digest, manifest = await self.image(repository, f"{tag}-{arch}", oci=oci, note=arch)
            entries.append({"mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
                            "digest": digest, "size": len(manifest),
                            "platform": {"architecture": arch, "os": "linux"}})  # fmt: skip
        media_type = OCI_INDEX if oci else DOCKER_LIST
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
        ).encode()
        return await self.manifest(repository, tag, body, media_type), body


@contextlib.asynccontextmanager
async def serve(
    storage: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    users: Mapping[str, str] | None = None,
) -> AsyncIterator[Registry]:
    """The registry on ``host:port`` (a free port unless told), keeping blobs in ``storage``."""
    reason = available()
    if reason is not None:
        raise RuntimeError(reason)
    port = port or free_port(host)
    config_dir = await asyncio.to_thread(_write_config, storage, host, port, users or {})
    log = (config_dir / "registry.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        "docker-registry", "serve", str(config_dir / "config.yml"), stdout=log, stderr=log
    )
    log.close()
    found = Registry(f"{host}:{port}", storage, dict(users or {}))
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            for _ in range(200):
                if process.returncode is not None:
                    raise RuntimeError(
                        f"docker-registry exited {process.returncode}: "
                        + (config_dir / "registry.log").read_text()[-2000:]
                    )
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.get(f"{found.url}/v2/")
                    if answer.status_code in (200, 401):
                        break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError(f"docker-registry on {found.address} never answered /v2/")
        yield found
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


def _write_config(storage: Path, host: str, port: int, users: Mapping[str, str]) -> Path:
    """The registry's config (and htpasswd) in a directory beside ``storage``; that directory."""
    storage.mkdir(parents=True, exist_ok=True)
    config_dir = storage.parent / f"{storage.name}-config-{port}"
    config_dir.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"{host}:{port}"},
    }
    if users:
        htpasswd = config_dir / "htpasswd"
        htpasswd.write_text(
            "".join(
                f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
                for user, password in users.items()
            )
        )
        config["auth"] = {"htpasswd": {"realm": "agent-health-tests", "path": str(htpasswd)}}
    (config_dir / "config.yml").write_text(yaml.safe_dump(config))
    return config_dir
