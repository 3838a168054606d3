"""The cell pod as the target sees it: nothing in its container proves anyone's identity.

No token volume, no service-account token, no variable carrying a token or reading one of
agent-health's Secrets, no shared process namespace — so the target cannot present the
controller's token, whatever it runs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import cellgateway, cellpod, cellsecrets, manifests

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text())}
DIGEST = "sha256:" + "0" * 64
SETTINGS = manifests.Settings(
    controller_image=f"ghcr.io/agent-health/controller@{DIGEST}",
    gateway_image=f"ghcr.io/agent-health/gateway@{DIGEST}",
    judge=manifests.JudgeService(
        url="http://agent-health-judge.agent-health.svc:8080",
        namespace="agent-health",
        pod_labels={"app.kubernetes.io/name": "agent-health-operator"},
        port=8081,
    ),
    gateway_service_account="ledger-writer",
    ledger_credentials_secret="ledger-s3",
)
TEST_ID = "rca/payment.test.py::payment RCA names the DB outage"
PEERS = [
    {"name": "logs", "image": "ghcr.io/acme/logs:1", "port": 9000},
    {"name": "user", "image": "ghcr.io/acme/user-sim:1", "port": 9100},
]


def _objects(**target: Any) -> tuple[evaluationrun.EvaluationRun, runspec.RunSpec]:
    spec_body = copy.deepcopy(EXAMPLE["RunSpec"])
    spec_body["metadata"] |= {"uid": "4f1c2b7e-0000-4000-8000-000000000001"}
    spec_body["spec"]["peers"] = PEERS
    spec_body["spec"]["target"] |= target
    run_body = copy.deepcopy(EXAMPLE["EvaluationRun"])
    run_body["metadata"] |= {"uid": "9a8b7c6d-0000-4000-8000-000000000002"}
    return (
        evaluationrun.EvaluationRun.model_validate(run_body),
        runspec.RunSpec.model_validate(spec_body),
    )


def _pod(**target: Any) -> dict[str, Any]:
    run, spec = _objects(**target)
    digests = {image: DIGEST for image in spec.images()}
    return cellpod.cell_pod(
        run, spec, test_id=TEST_ID, repeat=0, digests=digests, settings=SETTINGS
    )


def _secret_volumes(pod: dict[str, Any]) -> set[str]:
    """Volumes that carry a Secret or a projected (service-account) token."""
    return {v["name"] for v in pod["spec"]["volumes"] if "secret" in v or "projected" in v}


def test_the_target_container_holds_no_token_no_account_and_no_window_on_others() -> None:
    pod = _pod()
    spec = pod["spec"]
    target = next(c for c in spec["initContainers"] if c["name"] == cellpod.TARGET)
    assert spec["shareProcessNamespace"] is False
    assert spec["automountServiceAccountToken"] is False
    assert (spec["hostPID"], spec["hostIPC"], spec["hostNetwork"]) == (False, False, False)
    mounted = {m["name"] for m in target["volumeMounts"]}
    assert not mounted & _secret_volumes(pod), "the target mounts a Secret or a token"
    assert not any(m["mountPath"].startswith("/var/run/secrets") for m in target["volumeMounts"])
    assert not any(
        m["mountPath"].startswith("/var/run/agent-health") for m in target["volumeMounts"]
    )
    assert "envFrom" not in target
    secret_refs = [e["name"] for e in target["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert secret_refs == ["OPENAI_API_KEY"]  # its own LLM key from the RunSpec, nothing of ours
    assert not any("TOKEN" in e["name"] for e in target["env"])
    # The service-account token is projected for the gateway alone.
    assert {
        c["name"]
        for c in [*spec["initContainers"], *spec["containers"]]
        if any(m["name"] == cellgateway.SERVICE_ACCOUNT_VOLUME for m in c["volumeMounts"])
    } == {"gateway"}


def test_no_token_is_written_into_the_pod_itself() -> None:
    run, spec = _objects()
    tokens = {p: f"secret-token-of-{p}-0123456789" for p in cellsecrets.principals(spec)}
    secret = cellsecrets.token_secret(
        run, spec, test_id=TEST_ID, repeat=0, tokens=tokens, ledger_key=b"k" * 44
    )
    rendered = json.dumps(_pod())
    assert not any(token in rendered for token in tokens.values())
    assert secret["metadata"]["name"] in rendered  # the pod only names the Secret


@pytest.mark.parametrize(
    "secret",
    [
        "triage-nightly-0123456789-r0-tokens",  # a cell's principal tokens
        "triage-nightly-ledger-key",  # the run's ledger HMAC key
        "ledger-s3",  # the ledger store's credentials
    ],
)
@pytest.mark.parametrize("who", ["target", "peer"])
def test_a_runspec_cannot_hand_a_target_or_peer_one_of_our_secrets(secret: str, who: str) -> None:
    env = [{"name": "STOLEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "x"}}}]
    run, spec = _objects()
    if who == "peer":
        body = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["spec"]["peers"][0]["env"] = env
        spec = runspec.RunSpec.model_validate(body)
    else:
        run, spec = _objects(env=env)
    digests = {image: DIGEST for image in spec.images()}
    with pytest.raises(errors.SpecError, match=rf"env\[STOLEN\] reads Secret {secret!r}"):
        cellpod.cell_pod(run, spec, test_id=TEST_ID, repeat=0, digests=digests, settings=SETTINGS)
