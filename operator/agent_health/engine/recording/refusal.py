"""A test whose ledger cell could not be sealed: never ``passed``, since nothing evidences it.

A cell's records are sealed in canonical JSON when its test ends (:mod:`.recording`); a value
JSON cannot hold (a custom connector's ``NaN``) makes that fail, and the cell is left out of
the ledger — named in the run file's seal as refused, and counted by ``ledger verify``. Its
test's result is then :func:`unrecorded`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_health.sdk.results import TestResult

AGENT_KINDS = frozenset({"run-result", "exchange", "spans"})
"""Records made of what the agent sent: its answer, what was seen of its calls, its spans."""


@dataclass(frozen=True)
class Refusal:
    """Why a cell's records could not be sealed, and the kind of the record that could not
    (``run-result``: the agent's answer held what JSON cannot; empty: none could be made)."""

    why: str
    kind: str = ""


def unrecorded(result: TestResult, refusal: Refusal) -> TestResult:
    """``result`` of a test whose ledger cell could not be sealed: never passed, since
    nothing holds the evidence of it; errored, blaming the agent when what could not be
    recorded was its own (its answer, as a connector blames a reply JSON cannot hold; its
    exchanges; the spans it exported: :data:`AGENT_KINDS`), else the infrastructure. An
    errored result keeps its cause and says this as well."""
    note = f"its ledger records could not be sealed: {refusal.why}"
    if result.status == "skipped":
        return result
    if result.status == "errored":
        return result.model_copy(update={"error": f"{result.error}; {note}"})
    cause = "agent" if refusal.kind in AGENT_KINDS else "infra"
    return result.model_copy(
        update={
            "status": "errored",
            "cause": cause,
            "score": None,
            "error": f"not {result.status}: nothing evidences it, {note}",
        }
    )
