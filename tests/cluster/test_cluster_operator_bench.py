"""``bench/operator_scale.py`` runs end to end at tiny sizes and prints its figures.

No timing is asserted (the figures depend on the machine); what must hold is that every
cell passed, the figures were computed and the run's status was patched in batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "operator_scale.py"


@pytest.mark.slow
def test_the_scale_benchmark_prints_its_figures(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    args = ["--tests", "4", "--repeats", "2", "--parallelism", "3", "--cell-seconds", "0"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--cap-seconds", "120", "--json", str(figures)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("cells created per second:", "write requests per cell:", "operator peak RSS:"):
        assert line in done.stdout
    found = json.loads(figures.read_text())
    assert found["counts"]["passed"] == 8
    kinds = found["writes_per_cell_by_kind"]
    assert kinds["pods"] >= 1  # a pod per cell (and the suite's discovery pod)
    # Their tokens and ledger keys share one Secret, the run's key another.
    assert kinds["secrets"] == pytest.approx(2 / 8)
    # The operator makes the run's ConfigMap and stores the cells it collects from their
    # gateways' logs, several per merge patch; the gateways make no request at all.
    assert 2 / 8 <= kinds["ledger"] <= 9 / 8  # the ConfigMap, and its patches (batched:
    # how many share one depends on the machine; test_cluster_operator_writes counts them)
    assert found["gateway_writes_per_cell"] == 0
    assert found["gateway_requests_per_cell"] == {}
    assert found["writes_per_cell"] == pytest.approx(sum(kinds.values()), abs=0.01)
    assert found["writes_per_cell"] == pytest.approx(
        found["operator_writes_per_cell"] + found["gateway_writes_per_cell"], abs=0.002
    )
    assert found["first_cells"] == 3  # the parallelism
    # Patched at all, and never more than once per cell event (created, running, graded)
    # plus one per phase change. How far batching goes below that depends on the machine's
    # speed (one patch per interval), so it is held by a count in test_cluster_status.py.
    assert 1 <= found["status_patches"] <= 3 * 8 + 4
    assert found["operator_peak_rss_mb"] > 0


@pytest.mark.slow
def test_the_scale_benchmark_queues_its_cells_in_kueue_at_a_quota(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    args = ["--tests", "6", "--repeats", "1", "--parallelism", "4", "--cell-seconds", "0"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--queue-quota", "2", "--ledger", "file",
         "--cap-seconds", "120", "--json", str(figures)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Kueue: quota 2 cells" in done.stdout
    assert "run created to first cell running:" in done.stdout
    found = json.loads(figures.read_text())
    assert found["counts"]["passed"] == 6
    assert found["peak_cells_admitted"] == 2  # the quota, never more
    assert found["seconds_to_first_cell_running"] is not None
    assert found["seconds_to_all_cells_done"] > 0
