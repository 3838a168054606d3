"""examples/03-connectors runs green through the CLI with each of its connectors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.helpers import run_cli_sync

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example and the agents it starts, so a run writes nothing into the repo."""
    root = tmp_path_factory.mktemp("examples")
    ignore = shutil.ignore_patterns("__pycache__", ".agent-health", ".report.json")
    shutil.copytree(EXAMPLES / "agents", root / "agents", ignore=ignore)
    shutil.copytree(EXAMPLES / "03-connectors", root / "03-connectors", ignore=ignore)
    return root / "03-connectors"


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["rest", "agui", "openai", "cli"])
def test_example_passes_through_each_connector(example: Path, agent: str) -> None:
    run = run_cli_sync(example, "--agent", agent)
    assert run.code == 0, [(t["name"], t["status"], t["error"]) for t in run.report["tests"]]
    assert run.report["summary"]["passed"] == 3
    assert run.report["summary"]["tokens"] > 0
