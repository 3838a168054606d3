"""The run's ledger key reaches every reader intact, whatever random bytes it holds."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import cellsecrets, manifests
from agent_health.ledger import chain

ROOT = Path(__file__).parents[2]
KEYS = 5000  # the old raw-bytes key lost a byte about once in 43 runs


def _run() -> evaluationrun.EvaluationRun:
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text())}
    body = docs["EvaluationRun"]
    body["metadata"]["uid"] = "0c1d2e3f-0000-4000-8000-000000000001"
    return evaluationrun.EvaluationRun.model_validate(body)


def _spec(peers: list[dict[str, Any]]) -> runspec.RunSpec:
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text())}
    body = docs["RunSpec"]
    body["spec"]["peers"] = peers
    return runspec.RunSpec.model_validate(body)


def test_every_generated_ledger_key_loads_from_the_file_the_gateway_mounts(
    tmp_path: Path,
) -> None:
    run = _run()
    mounted = tmp_path / cellsecrets.LEDGER_KEY
    seen: set[bytes] = set()
    for _ in range(KEYS):
        key = cellsecrets.new_ledger_key()
        secret = cellsecrets.ledger_key_secret(run, key)
        # The operator reads the Secret back; the kubelet writes its decoded value as the file.
        stored = base64.b64decode(secret["data"][cellsecrets.LEDGER_KEY])
        mounted.write_bytes(stored)
        assert chain.load_key(mounted) == stored == key  # the gateway's and the CLI's reader
        seen.add(key)
    assert len(seen) == KEYS  # fresh every time
    assert all(len(base64.b64decode(k)) == 32 for k in seen)  # 256 random bits each


def test_a_key_file_written_by_echo_still_loads(tmp_path: Path) -> None:
    key = cellsecrets.new_ledger_key()
    path = tmp_path / "key"
    path.write_bytes(key + b"\n")
    assert chain.load_key(path) == key


def test_every_name_agent_health_gives_its_secrets_is_known_as_its_own() -> None:
    """A RunSpec may name none of them, even one not made yet (squatting a future run's)."""
    ours = [
        cellsecrets.token_secret_name("run-0123456789-r0"),
        cellsecrets.token_secret_name("run-0123456789-r2", attempt=1),
        cellsecrets.shared_secret_name("nightly", 0),
        cellsecrets.shared_secret_name("nightly", 12),
        cellsecrets.ledger_key_secret_name("nightly"),
    ]
    assert all(cellsecrets.OUR_NAMES.match(name) for name in ours), ours
    assert not any(cellsecrets.OUR_NAMES.match(n) for n in ("api-keys", "tokens", "my-tokens-x"))


def test_a_shared_secret_of_as_many_cells_as_fit_stays_under_the_api_limit() -> None:
    """The longest cell names, the most principals: the Secret as sent stays below 1 MiB."""
    peers = [
        {"name": f"peer{i:02d}", "image": "ghcr.io/acme/p:1", "port": 9000 + i} for i in range(8)
    ]
    spec = _spec(peers)
    per = cellsecrets.cells_per_secret(spec)
    assert per > 100  # one write for many cells
    cells = {
        f"{'x' * 50}-{n:012d}": (cellsecrets.new_tokens(spec), cellsecrets.new_ledger_key())
        for n in range(per)
    }
    assert all(len(name) == manifests.DNS_LABEL_MAX for name in cells)
    body = cellsecrets.shared_secret(_run(), 0, cells)
    assert len(json.dumps(body)) <= cellsecrets.SHARED_SECRET_BYTES + 4096 < 1024 * 1024
    assert len(body["data"]) == per * (len(peers) + 2)
