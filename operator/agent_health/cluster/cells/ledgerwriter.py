"""A ConfigMap ledger's object: the run's ConfigMap, which only the operator writes.

A ConfigMap ledger is one run's (its URL names it with ``{run}``). When the run starts the
operator creates the ConfigMap, empty and owned by the EvaluationRun (so it goes with the
run): the run owns its ledger, and a ConfigMap that is not the run's is never written or
read as its ledger. The cells' gateways never write it — they hold no Kubernetes
credential: each writes its sealed records to its own log
(:mod:`agent_health.ledger.podlog`), and the operator collects them once the pod ended and
stores many cells per merge patch (:mod:`agent_health.cluster.reconcile.collector`).
"""

from __future__ import annotations

from typing import Any

from agent_health.cluster.api import evaluationrun
from agent_health.cluster.cells import manifests

COMPONENT = "ledger"


def configmap(run: evaluationrun.EvaluationRun, name: str) -> dict[str, Any]:
    """The run's (empty) ledger ConfigMap ``name``; the operator fills it."""
    namespace, _, _ = manifests.identity(run)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": manifests.run_labels(run, COMPONENT),
            "ownerReferences": [manifests.owner_reference(run)],
        },
    }
