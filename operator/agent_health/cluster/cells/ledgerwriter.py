"""A ConfigMap ledger's objects: the run's ConfigMap and the one identity that may write it.

A ConfigMap ledger is one run's (its URL names it with ``{run}``). When the run starts the
operator creates, each owned by the EvaluationRun (so they go with it):

* the **ConfigMap**, empty: the run owns its ledger, and a ConfigMap that is not the run's
  is never written or read as its ledger;
* a **ServiceAccount** ``<run>-ledger`` its cells run as (its token projected into the
  gateway container alone), a **Role** granting ``get`` and ``update`` on that one
  ConfigMap by name (:func:`..rbac.gateway_rules`), and their **RoleBinding**.

So a gateway can write its own run's ledger and nothing else: not the suite's ConfigMap
(test code), not another run's ledger, no new object. The operator needs ``get`` and
``update`` on ConfigMaps itself to grant them (the API server refuses a Role that grants
more than its creator holds), and only in the namespaces cells run in.
"""

from __future__ import annotations

from typing import Any

from agent_health.cluster import rbac
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.cells import manifests

COMPONENT = "ledger"


def writer_name(run: evaluationrun.EvaluationRun) -> str:
    """The name of a run's ledger ServiceAccount, Role and RoleBinding: ``<run>-ledger``."""
    _, name, _ = manifests.identity(run)
    return manifests.fit(name, manifests.DNS_LABEL_MAX - 7) + "-ledger"


def configmap(run: evaluationrun.EvaluationRun, name: str) -> dict[str, Any]:
    """The run's (empty) ledger ConfigMap ``name``; its gateways fill it."""
    return _object("v1", "ConfigMap", run, name)


def service_account(run: evaluationrun.EvaluationRun) -> dict[str, Any]:
    """The identity a run's cells run as; only the gateway container gets its token."""
    return _object("v1", "ServiceAccount", run, writer_name(run)) | {
        "automountServiceAccountToken": False
    }


def role(run: evaluationrun.EvaluationRun, ledger: str) -> dict[str, Any]:
    """``get`` and ``update`` on the run's ledger ConfigMap ``ledger`` by name, nothing else."""
    body = _object(f"{rbac.RBAC_GROUP}/v1", "Role", run, writer_name(run))
    return body | {"rules": rbac.gateway_rules(ledger)}


def role_binding(run: evaluationrun.EvaluationRun) -> dict[str, Any]:
    """The run's Role, bound to the run's ServiceAccount."""
    namespace, _, _ = manifests.identity(run)
    name = writer_name(run)
    body = _object(f"{rbac.RBAC_GROUP}/v1", "RoleBinding", run, name)
    return body | {
        "roleRef": {"apiGroup": rbac.RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def _object(
    api_version: str, kind: str, run: evaluationrun.EvaluationRun, name: str
) -> dict[str, Any]:
    namespace, _, _ = manifests.identity(run)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": manifests.run_labels(run, COMPONENT),
            "ownerReferences": [manifests.owner_reference(run)],
        },
    }
