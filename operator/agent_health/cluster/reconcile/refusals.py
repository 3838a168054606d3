"""What the operator says when the API server refuses it: the chart's RBAC and what to change.

The chart grants the operator rights only in some namespaces (``cells.namespaces``); a run
created elsewhere is refused with a 403 whose text names a verb and a resource. The run's
condition says that and what a user does about it.
"""

from __future__ import annotations

from agent_health.cluster import kube


def advice(err: BaseException, namespace: str) -> str:
    """What to do, when ``err`` (or what caused it) is the API server refusing the operator
    (403) in ``namespace``; otherwise nothing."""
    cause: BaseException | None = err
    while cause is not None and not (isinstance(cause, kube.ApiError) and cause.status == 403):
        cause = cause.__cause__
    if cause is None:
        return ""
    return (
        f" — the operator holds no rights in namespace {namespace}: the chart grants them "
        "only in its release namespace, operator.watchNamespace and the namespaces listed in "
        f"cells.namespaces; add {namespace} to cells.namespaces (helm upgrade --reuse-values "
        "--set 'cells.namespaces={...}') or create the run in one of those"
    )
