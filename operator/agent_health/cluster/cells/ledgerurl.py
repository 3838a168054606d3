"""Where a run's cells record: a ledger URL template, filled in per run and checked early.

A RunSpec's ``spec.ledger.url`` and the operator's ``--ledger-url`` may contain
``{namespace}``, ``{run}`` and ``{runspec}``, filled in for each EvaluationRun (one ledger
per run: ``configmap://{namespace}/ledger-{run}``). :func:`problem` says why a template can
name no ledger (an unknown scheme or placeholder, a ConfigMap URL without its namespace), so
that a bad URL fails the RunSpec, the run or the operator's start with that reason instead of
failing every cell.
"""

from __future__ import annotations

import re

from agent_health.ledger import backends, store
from agent_health.ledger import errors as ledger_errors

PLACEHOLDERS = ("namespace", "run", "runspec")
_FILLED = re.compile(r"\{(namespace|run|runspec)\}")
_LEFT = re.compile(r"\{[^{}]*\}")


def fill(template: str, *, namespace: str, run: str, runspec: str) -> str:
    """``template`` with ``{namespace}``, ``{run}`` and ``{runspec}`` filled in."""
    values = {"namespace": namespace, "run": run, "runspec": runspec}
    return _FILLED.sub(lambda m: values[m[1]], template)


def problem(template: str) -> str | None:
    """Why ``template`` names no usable ledger, or ``None`` when it does."""
    left = _LEFT.search(_FILLED.sub("x", template))
    if left is not None:
        known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        return f"unknown placeholder {left[0]} in {template!r}; use {known}"
    url = fill(template, namespace="namespace", run="run", runspec="runspec")
    try:
        backends.from_url(url, store.Options())
    except ledger_errors.LedgerError as err:
        return str(err)
    return None
