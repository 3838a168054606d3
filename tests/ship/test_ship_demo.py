"""`make demo` installs only what the demo needs, and the demo needs nothing more.

The dev extra (pytest, mypy, moto, kopf, kubernetes, ...) is for `make test`; a new user
running the demo gets the package and its runtime dependencies only.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from support import examples_support

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(target: str, venv: Path) -> list[str]:
    done = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_the_package_without_extras(tmp_path: Path) -> None:
    demo = _dry_run("demo", tmp_path / "fresh")
    assert any(line.endswith("pip install --quiet -e .") for line in demo), demo
    assert not any("[" in line for line in demo), demo  # no extra at all
    test = _dry_run("test", tmp_path / "fresh")
    assert any("-e '.[dev]'" in line for line in test), test  # make test still installs dev


def _dev_only_modules() -> list[str]:
    """Top-level modules of the distributions the dev extra adds to the package's own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}

    dev_only = names(project["optional-dependencies"]["dev"]) - names(project["dependencies"])
    modules = {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(d.lower().replace("_", "-") in dev_only for d in dists)
        and not module.startswith("_")
    }
    return sorted(modules)


@pytest.mark.slow
def test_the_quickstart_runs_with_no_dev_package_importable(tmp_path: Path) -> None:
    blocked = _dev_only_modules()
    assert {"pytest", "mypy", "moto", "kopf"} <= set(blocked)
    program = textwrap.dedent(
        f"""
        import importlib.abc, sys

        BLOCKED = set({blocked!r})

        class NotInstalled(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"{{name}} is not installed by make demo")
                return None

        sys.meta_path.insert(0, NotInstalled())
        for name in list(sys.modules):
            if name.split(".")[0] in BLOCKED:
                del sys.modules[name]
        from agent_health.cli import main
        sys.exit(main(["run", "--ledger", "file://{tmp_path}/ledger", "--reporter",
                       "json:{tmp_path}/report.json"]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=examples_support.copy(tmp_path, "01-quickstart"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


@pytest.mark.slow
def test_the_second_demo_shows_a_trend_of_two(tmp_path: Path) -> None:
    """What `make demo` runs, twice: the first run makes the history, the second says how the
    pass rate moved (README, "Set up and run")."""
    import os

    env = {**os.environ, "AGENT_HEALTH_HISTORY": f"sqlite:///{tmp_path / 'history.db'}"}
    quickstart = examples_support.copy(tmp_path, "01-quickstart")
    lines = []
    for i in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "agent_health.cli", "run", "--ledger", f"file://{tmp_path}/{i}"],
            cwd=quickstart,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        lines.append(next(line for line in done.stdout.splitlines() if line.startswith("history:")))
    assert "triage: its first run here" in lines[0]
    assert "triage over its last 2 runs: pass rate 100% → 100%" in lines[1]
