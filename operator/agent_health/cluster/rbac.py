"""Every Kubernetes API permission the operator needs: :data:`CLUSTER_RULES` cluster-wide,
:data:`NAMESPACE_RULES` only in the namespaces cells run in.

The Helm chart renders its ClusterRole from :data:`CLUSTER_RULES` and a Role in each cell
namespace from :data:`NAMESPACE_RULES`; a test replays the end-to-end runs against the
emulator and checks that every request the operator (kopf included) makes is allowed —
a request that names no namespace by the ClusterRole alone — and that nothing here goes
unused except what :data:`UNSEEN` explains. Cluster-wide, the operator watches and reads;
it creates pods, reads Secrets and grants roles only where the Roles let it.

=======================================  ==================================================
who                                      why
=======================================  ==================================================
kopf                                     list/watch the CRDs it serves, RunSpecs,
                                         EvaluationRuns, cell and discovery Pods (and
                                         Sandboxes); patch its progress annotations; post
                                         Events
specs (RunSpec reconciler)               read pull Secrets; create discovery Pods; read
                                         their logs; patch RunSpec status
runs (scheduler)                         read RunSpecs; create/list Secrets (ledger key,
                                         cell tokens); create/get/list/delete cells; patch
                                         EvaluationRun status; create/patch Events; create
                                         a run's ConfigMap ledger (409 when it exists)
grading (ConfigMap ledger)               read each ended cell's gateway log (its sealed
                                         records); get and merge-``patch`` the run's
                                         ConfigMap to store many cells at a time
grading (other ledgers)                  read ConfigMap ledgers
runs (``--network-policy``)              create each run's NetworkPolicy (409 when it
                                         exists: nothing to read back), and each
                                         RunSpec's discovery policy; read the API
                                         server's addresses once at start (Endpoints
                                         ``default/kubernetes``, by name)
garbage collection                       ``update`` on ``*/finalizers`` of the owners: the
                                         API server demands it to set
                                         ``blockOwnerDeletion`` on an owner reference
=======================================  ==================================================

A cell's gateway is granted nothing: with a ConfigMap ledger it writes its records to its
own log and the operator stores them (:mod:`.reconcile.collector`).
"""

from __future__ import annotations

from typing import Any

from agent_health.cluster import apigroup

RBAC_GROUP = "rbac.authorization.k8s.io"
SANDBOX_GROUP = "agents.x-k8s.io"
POOL_GROUP = "extensions.agents.x-k8s.io"

CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": [apigroup.GROUP],
        "resources": ["runspecs"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {
        "apiGroups": [apigroup.GROUP],
        "resources": ["evaluationruns"],
        "verbs": ["list", "watch", "patch"],
    },
    {
        "apiGroups": [apigroup.GROUP],
        "resources": ["runspecs/status", "evaluationruns/status"],
        "verbs": ["patch"],
    },
    {
        "apiGroups": [apigroup.GROUP],
        "resources": ["runspecs/finalizers", "evaluationruns/finalizers"],
        "verbs": ["update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {
        "apiGroups": [""],
        "resources": ["endpoints"],
        "verbs": ["get"],
        "resourceNames": ["kubernetes"],
    },
    {"apiGroups": [SANDBOX_GROUP], "resources": ["sandboxes"], "verbs": ["list", "watch"]},
    {"apiGroups": [POOL_GROUP], "resources": ["sandboxclaims"], "verbs": ["list", "watch"]},
]
"""The ClusterRole: watching what tenants create anywhere, and posting Events about it."""

NAMESPACE_RULES: list[dict[str, Any]] = [
    # patch: a warm-pool cell's assignment, written on its claimed sandbox's pod.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]},
    {
        "apiGroups": [SANDBOX_GROUP],
        "resources": ["sandboxes"],
        "verbs": ["get", "create", "delete"],
    },
    {
        "apiGroups": [POOL_GROUP],
        "resources": ["sandboxclaims"],
        "verbs": ["get", "create", "delete"],
    },
    {
        "apiGroups": [POOL_GROUP],
        "resources": ["sandboxtemplates", "sandboxwarmpools"],
        "verbs": ["get", "create", "patch"],
    },
]
"""A Role in each cell namespace (the chart's ``cells.namespaces``, the release namespace and
the watched one): making cells, reading their Secrets, their gateways' logs and ledgers,
writing ConfigMap ledgers. Nowhere else may the
operator create a pod or read a Secret."""

RULES: list[dict[str, Any]] = [*CLUSTER_RULES, *NAMESPACE_RULES]
"""Everything the operator holds somewhere."""

UNSEEN: dict[tuple[str, str, str], str] = {
    ("", "pods", "get"): "a pod that already exists when created (409), e.g. after a crash",
    ("", "events", "patch"): "an Event repeated within 10 minutes (a count bump)",
    (apigroup.GROUP, "runspecs/finalizers", "update"): "checked by admission, not a request",
    (apigroup.GROUP, "evaluationruns/finalizers", "update"): "checked by admission, not a request",
    **{
        (SANDBOX_GROUP, "sandboxes", verb): "isolation mode agentSandbox (--sandboxes)"
        for verb in ("get", "list", "watch", "create", "delete")
    },
    ("", "pods", "patch"): "a warm-pool cell's assignment (--warm-pools)",
    **{
        (POOL_GROUP, resource, verb): "a warm-pool run (isolation.warmPool, --warm-pools)"
        for resource, verbs in (
            ("sandboxclaims", ("get", "list", "watch", "create", "delete")),
            ("sandboxtemplates", ("get", "create", "patch")),
            ("sandboxwarmpools", ("get", "create", "patch")),
        )
        for verb in verbs
    },
}
"""Rules an emulated pod-isolation run does not exercise, and when a real one does."""


def allowed(rules: list[dict[str, Any]] | None = None) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) ``rules`` (default :data:`RULES`) grant."""
    return {
        (group, resource, verb)
        for rule in (RULES if rules is None else rules)
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
