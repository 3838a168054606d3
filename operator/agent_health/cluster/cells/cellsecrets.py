"""The Secrets a cell mounts: per-cell principal tokens and the run's ledger key.

A trusted principal (the controller, each peer) proves who it is to the gateway with a
token only its own container has mounted. The run's ledger key stays with the operator: each
attempt at a cell gets its own key derived from it (:mod:`agent_health.ledger.keys`), in
its token Secret, mounted only into its gateway. Each Secret is immutable; the run's is owned
by the run, a cell's by the cell's Pod (or Sandbox), and the operator uses none it finds that
another owner holds.

The ledger key travels as text (:func:`new_ledger_key`: 32 random bytes in base64), the
form ``agent-health ledger verify --key-file`` and the gateway read: a key file's trailing
whitespace (a newline from ``echo``) is ignored, so raw random bytes that happen to end in
a whitespace byte would lose it and no longer seal or verify.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from typing import Any

from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import manifests

CONTROLLER = "controller"
LEDGER_KEY = "key"
CELL_LEDGER_KEY = "ledger-key"  # in a cell's Secret: that attempt's own key, for its gateway
TOKEN_FILE = "token"
MODE = 0o440  # group-readable: the pod's fsGroup is the group that may read it


def token_secret_name(cell: str, attempt: int = 0) -> str:
    """The Secret of one attempt at a cell: one token per trusted principal and the cell's
    ledger key. Each attempt has its own, so a retry never meets the last one's (which is
    collected with its pod) nor its ledger key."""
    return f"{cell}-tokens" if attempt == 0 else f"{cell}-a{attempt}-tokens"


def ledger_key_secret_name(run_name: str) -> str:
    """The per-run Secret holding the ledger HMAC key."""
    return f"{manifests.fit(run_name, manifests.DNS_LABEL_MAX - 11)}-ledger-key"


def principals(spec: runspec.RunSpec) -> list[str]:
    """The principals that present tokens: the controller and each peer (``peer:NAME``)."""
    return [CONTROLLER, *(f"peer:{p.name}" for p in spec.spec.peers)]


def secret_key(principal: str) -> str:
    """A principal's key in the token Secret (``peer:logs`` → ``peer-logs``)."""
    return principal.replace(":", "-")


def token_secret(
    run: evaluationrun.EvaluationRun,
    spec: runspec.RunSpec,
    *,
    test_id: str,
    repeat: int,
    tokens: Mapping[str, str],
    ledger_key: bytes,
    attempt: int = 0,
    agent: str | None = None,
) -> dict[str, Any]:
    """The Secret of one attempt at a cell: ``tokens`` maps each of :func:`principals` to a
    fresh secret; ``ledger_key`` is the attempt's own ledger key
    (:func:`agent_health.ledger.keys.cell_key`), never the run's."""
    if set(tokens) != set(principals(spec)):
        raise ValueError(f"tokens must cover exactly {principals(spec)}, got {sorted(tokens)}")
    namespace, name, _ = manifests.identity(run)
    cell = manifests.cell_name(name, test_id, repeat, agent)
    return manifests.secret(
        token_secret_name(cell, attempt),
        namespace,
        manifests.owner_reference(run),
        manifests.cell_labels(run, test_id, repeat, agent),
        {**{secret_key(p): t.encode() for p, t in tokens.items()}, CELL_LEDGER_KEY: ledger_key},
    )


def new_ledger_key() -> bytes:
    """A fresh run ledger key: 256 random bits as base64 text (44 bytes, no whitespace)."""
    return base64.b64encode(secrets.token_bytes(32))


def ledger_key_secret(run: evaluationrun.EvaluationRun, key: bytes) -> dict[str, Any]:
    """The run's ledger key Secret (the key from :func:`new_ledger_key`)."""
    namespace, name, _ = manifests.identity(run)
    return manifests.secret(
        ledger_key_secret_name(name),
        namespace,
        manifests.owner_reference(run),
        manifests.run_labels(run, "ledger-key"),
        {LEDGER_KEY: key},
    )


def token_volume(principal: str, cell: str, attempt: int = 0) -> dict[str, Any]:
    """A volume with ``principal``'s token alone, as the file ``token``."""
    key = secret_key(principal)
    return {
        "name": manifests.fit(f"token-{key}", manifests.DNS_LABEL_MAX),
        "secret": {
            "secretName": token_secret_name(cell, attempt),
            "items": [{"key": key, "path": TOKEN_FILE}],
            "defaultMode": MODE,
        },
    }


def ledger_key_volume(cell: str, attempt: int = 0) -> dict[str, Any]:
    """A volume with this attempt's own ledger key (from its Secret) as the file ``key``."""
    return {
        "name": "ledger-key",
        "secret": {
            "secretName": token_secret_name(cell, attempt),
            "items": [{"key": CELL_LEDGER_KEY, "path": LEDGER_KEY}],
            "defaultMode": MODE,
        },
    }
