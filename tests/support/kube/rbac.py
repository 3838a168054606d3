"""RBAC for the emulator: a ServiceAccount's request is allowed only as the API server's RBAC
authorizer would allow it, from the Roles, ClusterRoles and bindings stored in the emulator.

A bearer token ``serviceaccount:NAMESPACE:NAME`` stands for that ServiceAccount's projected
token (user ``system:serviceaccount:NAMESPACE:NAME``); every other token (``operator``,
``kubelet``) is not checked here — those callers' rights are checked by comparing what they
asked for with the chart's rules (``tests/cluster/test_cluster_operator_rbac.py``). A refusal is a
403 with the API server's wording.

What is implemented of RBAC: RoleBindings (to a Role in their namespace or a ClusterRole)
and ClusterRoleBindings, ServiceAccount subjects, rules by apiGroup, resource (with
``/subresource``), verb and ``resourceNames`` (which, as in Kubernetes, never match a
``create``, ``list`` or ``watch``), and ``*``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from support.kube import store

GROUP = "rbac.authorization.k8s.io"
KINDS = (
    store.Kind(GROUP, "v1", "roles", "Role"),
    store.Kind(GROUP, "v1", "rolebindings", "RoleBinding"),
    store.Kind(GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False),
    store.Kind(GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
)
PREFIX = "serviceaccount:"


def service_account_token(namespace: str, name: str) -> str:
    """The bearer token that speaks as ServiceAccount ``namespace/name`` in the emulator."""
    return f"{PREFIX}{namespace}:{name}"


def refusal(
    objects: store.Store,
    token: str | None,
    *,
    group: str,
    resource: str,
    verb: str,
    namespace: str | None,
    name: str | None,
) -> str | None:
    """Why the request is forbidden, in the API server's words; ``None`` when allowed (or
    when ``token`` is not a ServiceAccount's)."""
    if token is None or not token.startswith(PREFIX):
        return None
    sa_namespace, _, sa_name = token.removeprefix(PREFIX).partition(":")
    user = f"system:serviceaccount:{sa_namespace}:{sa_name}"
    for rule in _rules(objects, sa_namespace, sa_name, namespace):
        if _matches(rule, group, resource, verb, name):
            return None
    what = f'{resource} "{name}"' if name else resource
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return (
        f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{group}"{where}'
    )


def _rules(
    objects: store.Store, sa_namespace: str, sa_name: str, namespace: str | None
) -> Iterator[Mapping[str, Any]]:
    """Every rule granted to the ServiceAccount for a request in ``namespace``."""
    kinds = {k.plural: k for k in objects.kinds.values() if k.group == GROUP}
    if not kinds:
        return
    bindings: list[tuple[Mapping[str, Any], str | None]] = []
    if namespace is not None and "rolebindings" in kinds:
        for binding in objects.list(kinds["rolebindings"], namespace, lambda _l: True):
            bindings.append((binding, namespace))
    if "clusterrolebindings" in kinds:
        for binding in objects.list(kinds["clusterrolebindings"], None, lambda _l: True):
            bindings.append((binding, None))
    for binding, where in bindings:
        if not any(_is(s, sa_namespace, sa_name) for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        kind = kinds.get("roles" if ref.get("kind") == "Role" else "clusterroles")
        if kind is None or (ref.get("kind") == "Role" and where is None):
            continue
        try:
            role = objects.get(kind, where if ref.get("kind") == "Role" else None, ref["name"])
        except store.ApiError:
            continue  # a binding to a role that does not exist grants nothing
        yield from role.get("rules") or []


def _is(subject: Mapping[str, Any], namespace: str, name: str) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == name
        and subject.get("namespace") == namespace
    )


def _matches(
    rule: Mapping[str, Any], group: str, resource: str, verb: str, name: str | None
) -> bool:
    def has(values: Any, value: str) -> bool:
        return "*" in (values or []) or value in (values or [])

    if not (has(rule.get("apiGroups"), group) and has(rule.get("resources"), resource)):
        return False
    if not has(rule.get("verbs"), verb):
        return False
    names = rule.get("resourceNames") or []
    if not names:
        return True
    return verb not in ("create", "list", "watch") and name is not None and name in names
