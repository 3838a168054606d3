"""``spec.selection.grep`` is matched by RE2: a catastrophic pattern stalls nobody.

The attack (issue 16): a tenant names tests ``aaaa…a!`` and runs them with
``selection.grep: (a+)+$``. Python's backtracking ``re`` would take exponential time in the
title's length on the operator's one event loop — kopf, the judge service and ``/healthz``
with it. RE2 answers at once, and the run goes on (and fails for its own reason: nothing
matched). Without the fix this test never finishes (pytest's timeout fails it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun
from agent_health.cluster.reconcile import listing as listing_mod
from agent_health.cluster.reconcile import pattern, plan
from support.operator_support import Kubelet, cluster, kubelet, listing, until

EVIL = "(a+)+$"
TITLE = "a" * 64 + "!"  # 2**64 ways to split the a's for a backtracking engine
LEDGER = "configmap://default/triage-ledger-{run}"


def suite(*ids: str) -> tuple[listing_mod.Test, ...]:
    return tuple(listing_mod.Test(id=i, title=i.split("::")[-1]) for i in ids)


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    found = pattern.compile(EVIL)
    assert not found.search(TITLE * 1000)  # 65,000 characters, at once
    assert found.search("a" * 10_000)


def test_what_re2_cannot_match_linearly_is_refused_naming_the_field() -> None:
    for source, why in (
        (r"(a)\1", "invalid escape sequence: \\1"),
        ("pay(?=ment)", "invalid perl operator: (?="),
        ("x{1000}{1000}", "bad repetition operator"),
    ):
        with pytest.raises(errors.SpecError) as caught:
            pattern.compile(source)
        message = str(caught.value)
        assert message.startswith(f"spec.selection.grep {source!r} is not a pattern")
        assert why in message
        assert "RE2" in message


def test_selection_keeps_python_regex_basics() -> None:
    found = suite("suite/rca.py::Payment RCA", "suite/rca.py::billing", "suite/ui.py::page")
    chosen = plan.select(found, evaluationrun.Selection(grep="(?i)payment|ui\\.py"))
    assert [t.id for t in chosen] == ["suite/rca.py::Payment RCA", "suite/ui.py::page"]


def test_selection_matches_labels_letter_case_aside_as_the_cli_does() -> None:
    # Case files keep upstream's labels as written (difficulty:Easy); --label difficulty:easy
    # selects them on the command line, and so does spec.selection.labels.
    found = (
        listing_mod.Test(id="cases.json::a", title="a", labels=("difficulty:Easy",)),
        listing_mod.Test(id="cases.json::b", title="b", labels=("difficulty:Hard",)),
    )
    chosen = plan.select(found, evaluationrun.Selection(labels=["difficulty:easy"]))
    assert [t.id for t in chosen] == ["cases.json::a"]


@pytest.mark.slow
async def test_a_catastrophic_grep_fails_its_run_and_stalls_nothing() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"selection": {"grep": EVIL}}
        fake = Kubelet(k8s, listing((f"suite/evil.py::{TITLE}", [])), None)
        async with kubelet(fake), k8s.operator() as op, httpx.AsyncClient() as client:
            await k8s.apply(runspec)
            await k8s.apply(run)
            done: dict[str, Any] = await until(
                lambda: (
                    (k8s.run("triage-nightly").get("status") or {}).get("phase") == "Failed"
                    and k8s.run("triage-nightly")["status"]
                ),
                "the run to fail",
            )
            health = await client.get(f"http://127.0.0.1:{op.ports['health']}/healthz")
            judge = await client.post(f"http://127.0.0.1:{op.ports['judge']}/api/judge")
        failed = next(c for c in done["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "NoTestsSelected"
        assert health.status_code == 200
        assert judge.status_code == 401  # the judge service answered too
        assert not k8s.pods()  # no cell for a test the pattern did not choose


@pytest.mark.slow
def test_the_benchmark_prints_the_ratio_per_length() -> None:
    script = Path(__file__).resolve().parents[2] / "bench" / "grep_selection.py"
    done = subprocess.run(
        [sys.executable, str(script), "--max-n", "12"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ratio re/RE2" in done.stdout
    assert "RE2 against 65,001 characters" in done.stdout
