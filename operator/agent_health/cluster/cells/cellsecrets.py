"""The Secrets a cell mounts: per-cell principal tokens and the run's ledger key.

A trusted principal (the controller, each peer) proves who it is to the gateway with a
token only its own container has mounted. The run's ledger key stays with the operator: each
attempt at a cell gets its own key derived from it (:mod:`agent_health.ledger.keys`), beside
its tokens, mounted only into its gateway. Where an attempt's items are is a :class:`Place`:

* the first attempts of a run's planned cells share Secrets, ``<run>-tokens-N``
  (:func:`shared_secret`), each holding the items of up to :func:`cells_per_secret` cells in
  plan order as ``<cell>.<item>``, owned by the run: one API write for many cells;
* a retried attempt (and a cell the shared Secret does not list) has a Secret of its own,
  ``<cell>-tokens`` / ``<cell>-aN-tokens`` (:func:`token_secret`), owned by its Pod (or
  Sandbox) and collected with it.

Either way a pod mounts its own items and nothing else (``secret.items``, one volume per
container), so each container sees only its own file. Each Secret is immutable, and the
operator uses none it finds that another owner holds.

The ledger key travels as text (:func:`new_ledger_key`: 32 random bytes in base64), the
form ``agent-health ledger verify --key-file`` and the gateway read: a key file's trailing
whitespace (a newline from ``echo``) is ignored, so raw random bytes that happen to end in
a whitespace byte would lose it and no longer seal or verify.
"""

from __future__ import annotations

import base64
import dataclasses
import re
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


SHARED_COMPONENT = "tokens"
"""The ``agenthealth.dev/component`` label of a run's shared token Secrets."""
SHARED_SECRET_BYTES = 512 * 1024
"""What a shared Secret may hold, in bytes of its items (keys and values as stored): half of
the API server's 1 MiB limit on a Secret's data, so the object stays far below it."""
_TOKEN_CHARS = 43  # secrets.token_urlsafe(32)
_KEY_CHARS = 44  # new_ledger_key(): 32 bytes as base64


POOLED_SECRET = "cell-keys"
"""What the logical name of a warm pool's generated Secret starts with (``cell-keys-<random>``,
one per SandboxTemplate: :func:`.warmpool.new_secret_name`); the Secret the sandbox
controller makes for each sandbox from it holds every principal's token and the sandbox key."""

OUR_NAMES = re.compile(
    rf"^(.*-[0-9a-f]{{{manifests.HASH_CHARS}}}-r[0-9]+(-a[0-9]+)?-tokens|.*-tokens-[0-9]+"
    rf"|.*-ledger-key|.*{POOLED_SECRET}.*)$"
)
"""Names agent-health gives its own Secrets: an attempt's tokens (``<cell>-tokens``, the cell
name ending in ``-<hash>-r<repeat>``, a retry's ``-aN``), a run's shared tokens
(``<run>-tokens-N``), its ledger key (``<run>-ledger-key``) and a warm pool's generated
Secret, by its logical name in the template or by a sandbox's own (any name with
``cell-keys`` in it: the sandbox controller rewrites every reference to the logical name, the
target's included, to the sandbox's tokens and key). No RunSpec may name one, even before it
exists (a Secret squatting a future run's name)."""


@dataclasses.dataclass(frozen=True)
class Place:
    """Where one attempt's tokens and ledger key are: a Secret, and the prefix of its items
    (``""`` in the attempt's own Secret, ``"<cell>."`` in a run's shared one)."""

    secret: str
    prefix: str = ""

    def item(self, key: str) -> str:
        """The Secret key holding ``key`` (:func:`secret_key` of a principal, or
        :data:`CELL_LEDGER_KEY`)."""
        return f"{self.prefix}{key}"

    @classmethod
    def own(cls, cell: str, attempt: int = 0) -> Place:
        """The attempt's own Secret (:func:`token_secret`)."""
        return cls(token_secret_name(cell, attempt))

    @classmethod
    def shared(cls, run_name: str, index: int, cell: str) -> Place:
        """The cell's items in its run's shared Secret number ``index``."""
        return cls(shared_secret_name(run_name, index), f"{cell}.")


def shared_secret_name(run_name: str, index: int) -> str:
    """The run's shared token Secret number ``index``: ``<run>-tokens-<index>``."""
    suffix = f"-tokens-{index}"
    return manifests.fit(run_name, manifests.DNS_LABEL_MAX - len(suffix)) + suffix


def cells_per_secret(spec: runspec.RunSpec) -> int:
    """How many cells' items one shared Secret holds: as many as fit in
    :data:`SHARED_SECRET_BYTES`, counting the longest cell name (63) and every item's key and
    value as stored (base64)."""
    items = [*(secret_key(p) for p in principals(spec)), CELL_LEDGER_KEY]
    values = [_TOKEN_CHARS] * (len(items) - 1) + [_KEY_CHARS]
    per_cell = sum(
        manifests.DNS_LABEL_MAX + 1 + len(key) + 4 * (-(-size // 3)) + 8  # 8: JSON quoting
        for key, size in zip(items, values, strict=True)
    )
    return max(1, SHARED_SECRET_BYTES // per_cell)


def new_tokens(spec: runspec.RunSpec) -> dict[str, str]:
    """A fresh token for each of :func:`principals`."""
    return {p: secrets.token_urlsafe(32) for p in principals(spec)}


def shared_secret(
    run: evaluationrun.EvaluationRun,
    index: int,
    cells: Mapping[str, tuple[Mapping[str, str], bytes]],
) -> dict[str, Any]:
    """The run's shared Secret number ``index``: for each cell (by name), its tokens (one per
    principal) and the ledger key of its first attempt, as ``<cell>.<item>``."""
    namespace, name, _ = manifests.identity(run)
    data: dict[str, bytes] = {}
    for cell, (tokens, ledger_key) in cells.items():
        place = Place.shared(name, index, cell)
        for principal, token in tokens.items():
            data[place.item(secret_key(principal))] = token.encode()
        data[place.item(CELL_LEDGER_KEY)] = ledger_key
    return manifests.secret(
        shared_secret_name(name, index),
        namespace,
        manifests.owner_reference(run),
        manifests.run_labels(run, SHARED_COMPONENT),
        data,
    )


def place_of(body: Mapping[str, Any]) -> Place | None:
    """Where a cell's Pod (or Sandbox) takes its controller token from, read from its
    volumes; ``None`` when it mounts none (not a cell)."""
    spec = body.get("spec") or {}
    pod_spec = (spec.get("podTemplate") or {}).get("spec") or spec
    wanted = f"token-{secret_key(CONTROLLER)}"
    for volume in pod_spec.get("volumes") or []:
        source = volume.get("secret") or {}
        items = source.get("items") or []
        if volume.get("name") == wanted and source.get("secretName") and items:
            key = str(items[0].get("key") or "")
            return Place(source["secretName"], key.removesuffix(secret_key(CONTROLLER)))
    return None


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


def token_volume(principal: str, place: Place) -> dict[str, Any]:
    """A volume with ``principal``'s token alone (from ``place``), as the file ``token``."""
    key = secret_key(principal)
    return {
        "name": manifests.fit(f"token-{key}", manifests.DNS_LABEL_MAX),
        "secret": {
            "secretName": place.secret,
            "items": [{"key": place.item(key), "path": TOKEN_FILE}],
            "defaultMode": MODE,
        },
    }


def ledger_key_volume(place: Place) -> dict[str, Any]:
    """A volume with this attempt's own ledger key (from ``place``) as the file ``key``."""
    return {
        "name": "ledger-key",
        "secret": {
            "secretName": place.secret,
            "items": [{"key": place.item(CELL_LEDGER_KEY), "path": LEDGER_KEY}],
            "defaultMode": MODE,
        },
    }
