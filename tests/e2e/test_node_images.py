"""The test node finds an image as a kind node's containerd does: by exactly the name a pod
asks for, read in full (a name without a registry is Docker Hub's), never by a short name
matched against what happens to be on the node — so a chart that asks for another name than
the one loaded fails here as it would on kind (``ErrImageNeverPull``).

The process runtime's puller (:class:`node.images.Puller`) with the images of
images/Dockerfile, an image loaded as ``kind load`` does, and a registry v2 fake on loopback.
"""

from __future__ import annotations

import pytest
from support.node import images
from support.operator_support import registry_server

LOADED = "localhost/agent-health/operator:dev"


def puller(insecure: frozenset[str] = frozenset()) -> images.Puller:
    found = images.Puller(images.catalog(), insecure=insecure)
    found.load(LOADED, "operator")
    return found


def test_a_reference_is_read_in_full_as_containerd_reads_it() -> None:
    assert images.qualified("agent-health/operator:dev") == "docker.io/agent-health/operator:dev"
    assert images.qualified("nginx") == "docker.io/library/nginx:latest"
    assert images.qualified(LOADED) == LOADED
    assert images.qualified("kind-registry:5000/agent-health/gateway:dev@sha256:" + "a" * 64) == (
        "kind-registry:5000/agent-health/gateway@sha256:" + "a" * 64
    )


async def test_never_finds_the_loaded_image_by_its_exact_name() -> None:
    node = puller()
    image, image_id = await node.pull(LOADED, "Never")
    assert image.name == "operator"
    assert image_id == LOADED
    assert node.loaded == [LOADED]


@pytest.mark.parametrize(
    "asked",
    [
        "agent-health/operator:dev",  # docker.io/agent-health/operator:dev on a node
        "docker.io/agent-health/operator:dev",
        "localhost/agent-health/operator:latest",
        "kind-registry:5000/agent-health/operator:dev",
    ],
)
async def test_never_does_not_resolve_another_name_to_the_loaded_image(asked: str) -> None:
    with pytest.raises(images.PullError) as caught:
        await puller().pull(asked, "Never")
    assert caught.value.reason == "ErrImageNeverPull"
    assert asked in caught.value.message


async def test_a_pull_takes_only_what_the_registry_holds_where_images_py_pushes_it() -> None:
    async with registry_server() as registry:
        node = puller(insecure=frozenset({registry.host}))
        image, image_id = await node.pull(f"{registry.host}/agent-health/gateway:dev", "Always")
        assert image.name == "gateway"
        assert image_id.startswith(f"{registry.host}/agent-health/gateway@sha256:")
        # Same last part, another repository: not an image the registry was given.
        with pytest.raises(images.PullError) as caught:
            await node.pull(f"{registry.host}/someone-else/gateway:dev", "Always")
        assert caught.value.reason == "ErrImagePull"
        # IfNotPresent: what the node pulled is there without asking the registry again.
        asked = len(registry.asked)
        again = await node.pull(f"{registry.host}/agent-health/gateway:dev", "IfNotPresent")
        assert again == (image, image_id)
        assert len(registry.asked) == asked
