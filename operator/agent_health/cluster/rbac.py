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
grading                                  read ConfigMap ledgers
runs (ConfigMap ledger)                  create each run's ledger ConfigMap, its writer
                                         ServiceAccount, Role and RoleBinding (read back
                                         on 409); ``patch`` on ConfigMaps only because
                                         the API server lets no one grant a Role more
                                         than it holds (:func:`gateway_rules`)
runs (``--network-policy``)              create each run's NetworkPolicy (409 when it
                                         exists: nothing to read back), and each
                                         RunSpec's discovery policy; read the API
                                         server's addresses once at start (Endpoints
                                         ``default/kubernetes``, by name)
garbage collection                       ``update`` on ``*/finalizers`` of the owners: the
                                         API server demands it to set
                                         ``blockOwnerDeletion`` on an owner reference
=======================================  ==================================================

:func:`gateway_rules` are a cell gateway's: a Role per run, on its ConfigMap ledger by name
(:mod:`.cells.ledgerwriter`), for what :mod:`agent_health.ledger.configmap` sends.
"""

from __future__ import annotations

from typing import Any

GROUP = "agenthealth.dev"
RBAC_GROUP = "rbac.authorization.k8s.io"
SANDBOX_GROUP = "agents.x-k8s.io"

CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": [GROUP], "resources": ["runspecs"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [GROUP], "resources": ["evaluationruns"], "verbs": ["list", "watch", "patch"]},
    {
        "apiGroups": [GROUP],
        "resources": ["runspecs/status", "evaluationruns/status"],
        "verbs": ["patch"],
    },
    {
        "apiGroups": [GROUP],
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
]
"""The ClusterRole: watching what tenants create anywhere, and posting Events about it."""

NAMESPACE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "create"]},
    {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": ["get", "create"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]},
    {
        "apiGroups": [SANDBOX_GROUP],
        "resources": ["sandboxes"],
        "verbs": ["get", "create", "delete"],
    },
]
"""A Role in each cell namespace (the chart's ``cells.namespaces``, the release namespace and
the watched one): making cells, reading their Secrets and ledgers. Nowhere else may the
operator create a pod or read a Secret."""

RULES: list[dict[str, Any]] = [*CLUSTER_RULES, *NAMESPACE_RULES]
"""Everything the operator holds somewhere."""

GATEWAY_VERBS = ("get", "patch")
"""What a gateway sends its run's ConfigMap ledger: GET it, then a merge PATCH of its cell's
chunks (the operator made it, so no POST; no PUT, no list, no delete)."""


def gateway_rules(ledger: str) -> list[dict[str, Any]]:
    """The rules of a run's ledger Role: its one ConfigMap ``ledger``, by name."""
    return [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [ledger],
            "verbs": list(GATEWAY_VERBS),
        }
    ]


UNSEEN: dict[tuple[str, str, str], str] = {
    ("", "pods/log", "get"): "a listing too long for the termination message",
    ("", "pods", "get"): "a pod that already exists when created (409), e.g. after a crash",
    ("", "events", "patch"): "an Event repeated within 10 minutes (a count bump)",
    (GROUP, "runspecs/finalizers", "update"): "checked by admission, not a request",
    (GROUP, "evaluationruns/finalizers", "update"): "checked by admission, not a request",
    ("", "configmaps", "patch"): "checked when the operator creates a run's ledger Role",
    **{
        (SANDBOX_GROUP, "sandboxes", verb): "isolation mode agentSandbox (--sandboxes)"
        for verb in ("get", "list", "watch", "create", "delete")
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
