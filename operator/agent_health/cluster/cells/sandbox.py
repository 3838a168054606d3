"""A cell Pod wrapped in an Agent Sandbox (``agents.x-k8s.io/v1beta1`` ``Sandbox``).

The shape follows kubernetes-sigs/agent-sandbox ``api/v1beta1/sandbox_types.go``:
``spec.podTemplate`` holds ``metadata`` (labels and annotations only) and a full
``corev1.PodSpec``; ``spec.service`` (bool) asks for a headless Service, which a cell does
not need; ``operatingMode`` is ``Running`` or ``Suspended``; ``shutdownTime`` and
``shutdownPolicy`` (``Delete``/``Retain``) expire a sandbox. The controller reports a
``Finished`` condition (reasons ``PodSucceeded``/``PodFailed``) when the pod ends, which is
how a one-shot cell completes. The pod's labels are copied from the template, so the run's
NetworkPolicy selects sandboxed cells as it selects plain ones.
"""

from __future__ import annotations

import copy
from typing import Any

API_VERSION = "agents.x-k8s.io/v1beta1"
KIND = "Sandbox"


def sandbox(pod: dict[str, Any], *, runtime_class_name: str | None) -> dict[str, Any]:
    """``pod`` as a Sandbox of the same name, owner and labels, on ``runtime_class_name``.

    The pod's ``activeDeadlineSeconds`` still bounds the cell, so no ``shutdownTime``
    (an absolute time) is needed and the manifest stays a pure function of its inputs.
    """
    metadata = pod["metadata"]
    spec = copy.deepcopy(pod["spec"])
    if runtime_class_name is not None:
        spec["runtimeClassName"] = runtime_class_name
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": copy.deepcopy(metadata),
        "spec": {
            "podTemplate": {
                "metadata": {
                    "labels": dict(metadata.get("labels", {})),
                    "annotations": dict(metadata.get("annotations", {})),
                },
                "spec": spec,
            },
            "service": False,
            "operatingMode": "Running",
        },
    }
