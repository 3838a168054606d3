"""The definitions the node's stand-in controllers install for the kinds they serve:
permissive (any fields kept), with a status subresource, as the upstream CRDs are served."""

from __future__ import annotations

from typing import Any


def permissive(
    group: str, version: str, kind: str, plural: str, scope: str = "Namespaced"
) -> dict[str, Any]:
    """A CustomResourceDefinition of ``kind`` that keeps whatever fields an object has."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
