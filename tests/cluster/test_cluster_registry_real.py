"""Digest pinning against a real OCI registry: Debian's docker-registry (the CNCF
distribution registry) on loopback, with images pushed over the distribution API.

The digests the operator pins must be the registry's own: for a single manifest (OCI and
Docker v2) and for an index (manifest list), the one the registry answers with in
``Docker-Content-Digest``, which is the sha256 of the bytes pushed. Refusals are the
registry's own too: an unknown tag or repository (404), and 401 from a registry behind
htpasswd, without credentials or with wrong ones.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from agent_health.cluster import errors
from agent_health.cluster.registry import registry
from support import registry_support as real

pytestmark = pytest.mark.skipif(
    real.available() is not None and not __import__("os").environ.get("CI"),
    reason=str(real.available()),
)


@pytest_asyncio.fixture
async def hub(tmp_path: Path) -> AsyncIterator[real.Registry]:
    async with real.serve(tmp_path / "storage") as found:
        yield found


@pytest_asyncio.fixture
async def locked(tmp_path: Path) -> AsyncIterator[real.Registry]:
    async with real.serve(tmp_path / "storage", users={"ci": "s3cret"}) as found:
        yield found


def _pull_secret(host: str, user: str, password: str) -> dict[str, dict[str, str]]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    document = {"auths": {host: {"auth": pair}}}
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    return {"regcred": {".dockerconfigjson": encoded}}


@pytest.mark.parametrize("oci", [True, False], ids=["oci", "docker-v2"])
async def test_a_single_manifest_is_pinned_to_the_registrys_own_digest(
    hub: real.Registry, oci: bool
) -> None:
    digest, manifest = await hub.image("team/agent", "1.0", oci=oci)
    image = f"{hub.address}/team/agent:1.0"
    found = await registry.resolve_all([image], insecure=[hub.address])
    assert found == {image: digest}
    assert digest == real.digest_of(manifest)


@pytest.mark.parametrize("oci", [True, False], ids=["oci-index", "docker-manifest-list"])
async def test_an_index_is_pinned_as_the_index_not_one_of_its_platforms(
    hub: real.Registry, oci: bool
) -> None:
    digest, body = await hub.index("team/agent", "multi", oci=oci)
    image = f"{hub.address}/team/agent:multi"
    found = await registry.resolve_all([image], insecure=[hub.address])
    # A node picks its platform from the index: every cell names the index, whatever node.
    assert found == {image: digest}
    assert digest == real.digest_of(body)
    platforms = [entry["digest"] for entry in json.loads(body)["manifests"]]
    assert digest not in platforms


async def test_a_moved_tag_pins_the_new_digest(hub: real.Registry) -> None:
    first, _ = await hub.image("team/agent", "stable", note="first")
    image = f"{hub.address}/team/agent:stable"
    assert await registry.resolve_all([image], insecure=[hub.address]) == {image: first}
    second, _ = await hub.image("team/agent", "stable", note="second")
    assert second != first
    assert await registry.resolve_all([image], insecure=[hub.address]) == {image: second}


async def test_an_unknown_tag_and_an_unknown_repository_are_permanent_and_named(
    hub: real.Registry,
) -> None:
    await hub.image("team/agent", "1.0")
    for image, what in (
        (f"{hub.address}/team/agent:9.9", "tag 9.9"),
        (f"{hub.address}/team/nothing:1.0", "tag 1.0"),
    ):
        with pytest.raises(errors.PermanentRegistryError) as caught:
            await registry.resolve_all([image], insecure=[hub.address])
        message = str(caught.value)
        assert image in message, message
        assert what in message, message
        assert "not found" in message, message


async def test_a_registry_behind_htpasswd_refuses_without_credentials_and_names_the_fix(
    locked: real.Registry,
) -> None:
    digest, _ = await locked.image("team/agent", "1.0")
    image = f"{locked.address}/team/agent:1.0"
    with pytest.raises(errors.PermanentRegistryError) as caught:
        await registry.resolve_all([image], insecure=[locked.address])
    assert "HTTP 401" in str(caught.value)
    assert "imagePullSecret" in str(caught.value)

    wrong = _pull_secret(locked.address, "ci", "guess")
    with pytest.raises(errors.PermanentRegistryError) as caught:
        await registry.resolve_all([image], insecure=[locked.address], pull_secrets=wrong)
    assert "regcred" in str(caught.value), caught.value

    right = _pull_secret(locked.address, "ci", "s3cret")
    found = await registry.resolve_all([image], insecure=[locked.address], pull_secrets=right)
    assert found == {image: digest}


async def test_a_digest_the_registry_no_longer_has_is_not_found(hub: real.Registry) -> None:
    digest, _ = await hub.image("team/agent", "1.0")
    await hub.delete("team/agent", digest)
    image = f"{hub.address}/team/agent@{digest}"
    # A pinned reference is taken as pinned (no request): it is the node's pull that fails.
    assert await registry.resolve_all([image], insecure=[hub.address]) == {image: digest}
    tagged = f"{hub.address}/team/agent:1.0"
    with pytest.raises(errors.PermanentRegistryError, match="not found"):
        await registry.resolve_all([tagged], insecure=[hub.address])
