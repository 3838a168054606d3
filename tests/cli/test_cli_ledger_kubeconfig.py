"""``ledger verify`` and ``grade`` read a ``configmap://`` ledger from a workstation.

Outside a cluster there is no service account: the commands log in as kubectl does, with the
kubeconfig's current context — here one whose user is an exec credential plugin, as GKE's
and EKS's kubeconfigs are — and read the ConfigMap through the API server (the emulator).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import yaml
from agent_health.cluster.cells import cellsecrets
from agent_health.ledger import backends, chain, store
from support.kube import serve
from support.operator_support import cell_records

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger"
EXEC_TOKEN = "token-from-the-exec-plugin"
CREDENTIAL = {
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {"token": EXEC_TOKEN},
}


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose user gets its token from an exec plugin (a Python one-liner)."""
    plugin = f"import json; print(json.dumps({CREDENTIAL!r}))"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "workstation",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [
            {
                "name": "me",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": sys.executable,
                        "args": ["-c", plugin],
                    }
                },
            }
        ],
        "contexts": [{"name": "workstation", "context": {"cluster": "emulator", "user": "me"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def agent_health(*args: str, env: dict[str, str]) -> tuple[int, str]:
    command = Path(sys.executable).parent / "agent-health"
    process = await asyncio.create_subprocess_exec(
        str(command), *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_verify_and_grade_read_a_configmap_ledger_with_the_kubeconfig(
    tmp_path: Path,
) -> None:
    key = cellsecrets.new_ledger_key()
    (tmp_path / "key").write_bytes(key)
    async with serve() as (emulator, url):
        writer_options = store.Options(kube_api_url=url, kube_token="gateway")
        backend = backends.from_url(LEDGER, writer_options)
        for n, passed in enumerate((True, False)):
            cell = f"run-cell-{n}"
            await chain.Writer(backend, cell, key).append(
                *cell_records(f"suite/t.py::t{n}", 0, cell, passed)
            )
        await backend.close()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),  # no ~/.kube/config but ours
            "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", url)),
        }
        key_file = str(tmp_path / "key")
        verified = await agent_health("ledger", "verify", LEDGER, "--key-file", key_file, env=env)
        # A cluster's ledger records into the history of the folder it is graded from:
        # one of this test's own.
        history = f"sqlite:///{tmp_path / 'history.db'}"
        graded = await agent_health(
            "grade", LEDGER, "--key-file", key_file, "--history", history, env=env
        )
        no_config = await agent_health(
            "ledger", "verify", LEDGER, "--key-file", key_file,
            env=env | {"KUBECONFIG": str(tmp_path / "missing")},
        )  # fmt: skip
        seen = {r.headers.get("Authorization") for r in emulator if r.resource is not None}
    assert verified[0] == 0, verified[1]
    assert "2 cells verified" in verified[1]
    assert graded[0] == 1, graded[1]  # one test failed: grade exits as `run` would
    assert "1 passed" in graded[1]
    assert "1 failed" in graded[1]
    assert f"Bearer {EXEC_TOKEN}" in seen  # read with the kubeconfig's identity
    assert no_config[0] == 2, no_config[1]
    assert "kubeconfig" in no_config[1]
    assert "Traceback" not in no_config[1]
