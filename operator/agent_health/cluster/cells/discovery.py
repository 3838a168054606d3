"""The discovery Pod: ``agent-health list --json`` over a RunSpec's suite, nothing else.

It runs the controller image with the same suite source, restricted security context,
RuntimeClass (``--cell-runtime-class``) and CPU and memory limits as a cell's controller,
without gateway, target, peers or tokens, and ends by itself (``activeDeadlineSeconds``).
It imports the tenant's test files, so it is fenced like a cell: no cloud identity
(``eks.amazonaws.com/skip-containers``), no service-account token. The operator reads the
JSON from the pod's log; on failure the log's tail becomes the termination message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster.api import runspec
from agent_health.cluster.cells import kueue, manifests, podsecurity

CONTAINER = "discover"


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
    pod_spec = podsecurity.pod_spec_base(settings) | {
        "activeDeadlineSeconds": deadline_seconds,
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [scratch_volume, *volumes],
    }
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
