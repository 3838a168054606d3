"""``kubectl get runspecs,evaluationruns`` shows a value in every column once a run is done.

Each printer column's JSONPath is evaluated (the two forms the CRDs use: ``.a.b`` and
``.a[?(@.type=="X")].b``) against the objects as the operator left them: a column that reads a
condition the operator never sets, or a field with no default, is empty and fails here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from agent_health.cluster.api import crds
from support.operator_support import Kubelet, cluster, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
_PART = re.compile(r'\w+\[\?\(@\.\w+=="[^"]*"\)\]|\w+')
_FILTER = re.compile(r'^(?P<field>\w+)\[\?\(@\.(?P<key>\w+)=="(?P<value>[^"]*)"\)\]$')


def jsonpath(body: Any, path: str) -> Any:
    """The value at ``path``, or ``None`` (what kubectl prints as an empty cell)."""
    value = body
    for part in _PART.findall(path):
        matched = _FILTER.match(part)
        if matched:
            items = (value or {}).get(matched["field"]) or []
            value = next((i for i in items if i.get(matched["key"]) == matched["value"]), None)
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def columns(kind: str) -> list[dict[str, Any]]:
    return list(next(k for k in crds.KINDS if k.kind == kind).columns)


def test_the_jsonpath_reader_reads_both_forms() -> None:
    body = {"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "B", "status": "y"}]}}
    assert jsonpath(body, '.status.conditions[?(@.type=="B")].status') == "y"
    assert jsonpath(body, '.status.conditions[?(@.type=="C")].status') is None
    assert jsonpath({"spec": {"a": 1}}, ".spec.a") == 1


async def test_every_printer_column_has_a_value_after_a_run() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        del runspec["spec"]["isolation"]  # omitted: the CRD's default fills it in
        run["spec"] |= {"repeats": 1}
        tests = listing(("suite/rca.py::payment rca", ["category:RCA"]))
        async with kubelet(Kubelet(k8s, tests, LEDGER)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await until(
                lambda: (k8s.run("triage-nightly").get("status") or {}).get("phase") == "Succeeded",
                "the run",
            )
        stored_spec, stored_run = k8s.runspec("triage"), k8s.run("triage-nightly")
    shown = {c["name"]: jsonpath(stored_spec, c["jsonPath"]) for c in columns("RunSpec")}
    assert shown["Isolation"] == "pod"
    assert shown["Ready"] == "True"
    assert shown["Tests"] == 1
    assert all(v is not None for v in shown.values()), shown
    shown = {c["name"]: jsonpath(stored_run, c["jsonPath"]) for c in columns("EvaluationRun")}
    assert shown["Phase"] == "Succeeded"
    assert all(v is not None for v in shown.values()), shown
