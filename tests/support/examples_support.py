"""A test's own copy of the repository's examples, to run an example in.

An example run writes beside its config (``.agent-health/``: the ledger, ``last-failed.json``,
the history): run in place, two tests running it at once (``make test`` spreads tests over
worker processes) would write the same files, and each run would leave them in the checkout.
A copy of the whole ``examples/`` folder keeps the neighbours an example names by relative
path (``../agents/triage_agent.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def copy(into: Path, example: str) -> Path:
    """``examples/`` copied into ``into`` (without what earlier runs left); the copy's
    ``example`` folder, to run it in."""
    target = into / "examples"
    shutil.copytree(EXAMPLES, target, ignore=shutil.ignore_patterns("__pycache__", ".agent-health"))
    return target / example
