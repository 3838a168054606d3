"""The discovery Pod: ``agent-health list --json`` over a RunSpec's suite, nothing else.

It runs the controller image with the same suite source, restricted security context,
RuntimeClass (``--cell-runtime-class``) and CPU and memory limits as a cell's controller,
without gateway, target, peers or tokens, and ends by itself (``activeDeadlineSeconds``).
It imports the tenant's test files, so it is fenced like a cell: no cloud identity
(``eks.amazonaws.com/skip-containers``), no service-account token. The operator reads the
JSON from the pod's log; on failure the log's tail becomes the termination message.

A RunSpec's MCP peers (``protocol: mcp``) run in the same pod, as native sidecars started as
a cell starts them (the peer's image, env, port probe and resources; no token, so a peer of
ours serves every caller: the pod lets nothing in), and a second container, ``tools``, asks
each its tools when they are up (``agent-health mcp tools``): the operator reads both
listings when the pod ends (status ``discoveredTests`` and ``mcpTools``). One pod, because
the peers' tools are resolved when the tests are, for the same generation of the RunSpec,
fenced the same way, and a peer that cannot start or answer fails the resolution once,
saying so, instead of every cell of every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster.api import runspec
from agent_health.cluster.cells import admission, cellenv, cellparts, kueue, manifests, podsecurity

CONTAINER = "discover"
TOOLS = "tools"
"""The container that lists the MCP peers' tools (present when the RunSpec has MCP peers)."""


def mcp_peers(spec: runspec.RunSpec) -> list[runspec.Peer]:
    """The RunSpec's MCP servers: the peers whose tools the discovery pod lists."""
    return [p for p in spec.spec.peers if p.protocol == "mcp"]


def peer_url(peer: runspec.Peer) -> str:
    """Where the tools container reaches ``peer`` in the discovery pod (its loopback)."""
    return f"http://127.0.0.1:{peer.port}{cellenv.MCP_PATH}"


def discovery_name(spec: runspec.RunSpec, digests: Mapping[str, str], revision: str = "") -> str:
    """``<runspec>-discover-<hash>``; the hash changes with the suite's source and ``revision``.

    ``revision`` is what else should force a new discovery, e.g. the suite ConfigMap's
    ``resourceVersion`` (a ConfigMap edit does not change the RunSpec's generation).
    """
    _, name, _ = manifests.identity(spec)
    suite = spec.spec.suite
    source = (
        manifests.pinned(suite.image, digests)
        if suite.image is not None
        else f"configmap:{suite.config_map.name if suite.config_map else ''}"
    )
    generation = spec.metadata.get("generation", "")
    suffix = f"-discover-{manifests.short_hash(f'{source}|{suite.path}|{generation}|{revision}')}"
    return manifests.fit(name, manifests.DNS_LABEL_MAX - len(suffix)) + suffix


def discovery_pod(
    spec: runspec.RunSpec,
    *,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    revision: str = "",
    deadline_seconds: int = 300,
) -> dict[str, Any]:
    """The Pod that lists ``spec``'s tests as JSON on stdout, owned by the RunSpec."""
    namespace, name, _ = manifests.identity(spec)
    image, volumes, mounts = manifests.suite_source(spec, digests, settings)
    scratch_volume, scratch_mount = manifests.scratch_volume(CONTAINER, settings)
    container = {
        "name": CONTAINER,
        "image": image,
        "command": list(manifests.COMMAND),
        "args": ["list", "--json", spec.spec.suite.path],
        "env": manifests.python_env(),
        "volumeMounts": [scratch_mount, *mounts],
        "resources": settings.resources.controller.wire(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": podsecurity.container_security_context(settings),
    }
    containers, sidecars, more_volumes = [container], [], []
    peers = mcp_peers(spec)
    if peers:
        for peer in peers:
            name = cellparts.peer_container_name(peer.name)
            volume, mount = manifests.scratch_volume(name, settings)
            more_volumes.append(volume)
            sidecars.append(
                cellparts.sidecar(
                    name,
                    manifests.pinned(peer.image, digests),
                    env=[m.wire() for m in peer.env],
                    mounts=[mount],
                    compute=admission.resources_of(spec, settings, peer),
                    port=peer.port,
                    settings=settings,
                )
            )
        volume, mount = manifests.scratch_volume(TOOLS, settings)
        more_volumes.append(volume)
        containers.append(
            {
                "name": TOOLS,
                "image": image,
                "command": list(manifests.COMMAND),
                "args": ["mcp", "tools", *(f"{p.name}={peer_url(p)}" for p in peers)],
                # The image's working directory is where a suite is mounted (a ConfigMap
                # suite's /suite), which this container does not mount: on a read-only root
                # the runtime cannot make it, and the container would never start.
                "workingDir": mount["mountPath"],
                "env": manifests.python_env(),
                "volumeMounts": [mount],
                "resources": settings.resources.controller.wire(),
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": podsecurity.container_security_context(settings),
            }
        )
    pod_spec = podsecurity.pod_spec_base(settings) | {
        "activeDeadlineSeconds": deadline_seconds,
        "terminationGracePeriodSeconds": 5,
        "containers": containers,
        "volumes": [scratch_volume, *volumes, *more_volumes],
    }
    if sidecars:
        pod_spec["initContainers"] = sidecars
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": discovery_name(spec, digests, revision),
            "namespace": namespace,
            # Suite code runs here (test files are imported): no cloud identity for it.
            "annotations": podsecurity.skip_cloud_identity(pod_spec),
            "labels": {
                manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
                manifests.LABEL_RUNSPEC: manifests.label_value(name),
                manifests.LABEL_COMPONENT: "discovery",
                **kueue.labels(kueue.queue_of(spec, None, settings.default_queue)),
            },
            "ownerReferences": [manifests.owner_reference(spec)],
        },
        "spec": pod_spec,
    }
