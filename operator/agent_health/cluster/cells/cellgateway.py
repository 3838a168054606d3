"""A cell's gateway sidecar: its listeners, its command line, its container.

Every exchange of a cell goes through one of the gateway's loopback listeners:

=====================  ==================  ==========================================
caller → callee        listener            who is recorded
=====================  ==================  ==========================================
controller → target    ``agent.sock``      controller (its token), else target
controller → judge     ``judge.sock``      controller; the judge service checks it too
target → peer NAME     one port per peer   target, unless a valid token says otherwise
peer NAME → target     one port per peer   peer:NAME (its token), else target
=====================  ==================  ==========================================

The controller talks to the gateway only through Unix sockets (``agent.sock``,
``judge.sock``, ``admin.sock`` in :data:`SOCKET_DIR`, an ``emptyDir`` mounted into those two
containers alone): its token never goes to a TCP port, which the target could bind while the
kubelet restarts the gateway. The gateway's TCP listeners bind the pod's loopback only: no
other pod (another run's target, say) can reach any of them, whatever the NetworkPolicy. The
kubelet's startup probe runs *in* the gateway's container (an ``exec`` probe, a bare Python
asking ``/healthz`` on the admin socket: :data:`~agent_health.gateway.admin.PROBE`), so no
port is opened for it either.

Peers share that loopback with the target, which could call a peer's own port and bypass
the record. Each peer's token is mounted into that peer (``$AGENT_HEALTH_TOKEN_FILE``) and
the gateway sends it in ``X-Agent-Health-Via-Gateway`` on every call it forwards to the peer,
so a peer can serve the gateway's calls alone (``examples/agents/log_server.py`` does).

The gateway alone mounts its cell's ledger key (derived for this attempt, never the run's),
every token (to verify callers), the ledger credentials and — when the operator names a
ServiceAccount for an object-store ledger — that account's token. With a ConfigMap ledger it
holds no credential at all: it writes its sealed records to its own log
(:mod:`agent_health.ledger.podlog`) and the operator stores them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_health.cluster.api import runspec
from agent_health.cluster.cells import cellsecrets, ledgerurl, manifests, podsecurity
from agent_health.gateway import admin
from agent_health.ledger import assignment

NAME = "gateway"
TOKENS_DIR = "/var/run/agent-health/tokens"
LEDGER_KEY_DIR = "/var/run/agent-health/ledger-key"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_VOLUME = "gateway-sa"
SPOOL_DIR = f"{manifests.SCRATCH}/ledger-spool"
FIRST_PORT = 15000


SOCKET_DIR = "/var/run/agent-health/gateway"
SOCKET_VOLUME = "gateway-socket"
AGENT_SOCKET, JUDGE_SOCKET, ADMIN_SOCKET = (
    f"{SOCKET_DIR}/{name}.sock" for name in ("agent", "judge", "admin")
)
SOCKET_HOST = "gateway"
ASSIGNMENT_VOLUME = "assignment"
SANDBOX_KEY_ITEM = "sandbox-key"
"""Its item holding the sandbox's own key, which unwraps the cell's ledger key."""
SANDBOX_KEY_ENV = "AGENT_HEALTH_SANDBOX_KEY"
"""The host name the controller's URLs carry: the connection itself goes to a socket."""


@dataclasses.dataclass(frozen=True)
class Route:
    """One gateway listener: ``principal``'s calls to ``to`` go to ``upstream``. ``listen``
    is a port on 127.0.0.1, or the path of a Unix socket in :data:`SOCKET_DIR`."""

    principal: str
    to: str
    listen: int | str
    upstream: str
    protocol: str = "http"
    """``mcp``: the gateway reads the route's traffic as MCP (a ``protocol: mcp`` peer)."""

    @property
    def address(self) -> str:
        if isinstance(self.listen, str):
            return f"unix:{self.listen}"
        return f"127.0.0.1:{self.listen}"


@dataclasses.dataclass(frozen=True)
class Ports:
    """The gateway's loopback ports, chosen from 15000 up, skipping every port the RunSpec
    uses (the controller's listeners are Unix sockets)."""

    peers: Mapping[str, int]
    """Peer name → the listener the target calls to reach that peer."""
    peer_target: Mapping[str, int]
    """Peer name → the listener that peer calls to reach the target."""
    otlp: int
    """The OTLP/HTTP receiver the target exports its OpenTelemetry spans to."""


OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


def otlp_env(plan: Ports, env: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The target's ``OTEL_EXPORTER_OTLP_ENDPOINT``: the gateway's OTLP receiver, which joins
    its spans to the cell's run (docs/agent-protocol.md) — unless the RunSpec's ``env``
    names an endpoint of its own (its collector wins)."""
    if any(var.get("name") == OTLP_ENDPOINT_ENV for var in env):
        return []
    return [{"name": OTLP_ENDPOINT_ENV, "value": f"http://127.0.0.1:{plan.otlp}"}]


def ports(spec: runspec.RunSpec) -> Ports:
    """Deterministic listener ports for ``spec`` (every cell of a RunSpec gets the same)."""
    taken = {spec.spec.target.port, *(p.port for p in spec.spec.peers)}
    free = (p for p in itertools.count(FIRST_PORT) if p not in taken)
    peers = {p.name: next(free) for p in spec.spec.peers}
    peer_target = {p.name: next(free) for p in spec.spec.peers}
    return Ports(peers, peer_target, otlp=next(free))


@dataclasses.dataclass(frozen=True)
class Identity:
    """What the gateway writes into the cell's first (cell-meta) record."""

    cell: str
    ledger_cell: str
    """The ledger cell this attempt records into (see :func:`manifests.ledger_cell`)."""
    test_id: str
    repeat: int
    images: Mapping[str, str]
    attempt: int = 0
    """Container name → image pinned by digest."""
    agent: str | None = None
    """An agent matrix's agent (``spec.agents``): sealed in the cell-meta, so ``agent-health
    grade`` and ``--replay`` of the ledger know whose cell it is."""


@dataclasses.dataclass(frozen=True)
class Pooled:
    """A pooled gateway's: its cell comes in the assignment file (:mod:`.warmpool`)."""

    images: Mapping[str, str]
    mount: dict[str, Any]
    """The assignment file's mount (:func:`.cellparts.assignment_mount`)."""
    secret: str
    """The logical name of the sandbox's generated Secret, as its template declares it."""


def identity_env(identity: Identity | Pooled) -> list[dict[str, Any]]:
    """A pooled gateway's sandbox key, from the sandbox's generated Secret."""
    if not isinstance(identity, Pooled):
        return []
    ref = {"name": identity.secret, "key": SANDBOX_KEY_ITEM}
    return [{"name": SANDBOX_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}]


def gateway_args(
    *,
    routes: Sequence[Route],
    tokens: Mapping[str, str],
    ledger: str,
    identity: Identity | Pooled,
    key_file: str,
    caps: tuple[int | None, int | None] = (None, None),
    otlp: int | None = None,
) -> list[str]:
    """The gateway's command line (``agent-health gateway``) — the one place its flags live.

    ``tokens`` maps a principal to the file holding its token. The cell's run id is its
    name, as the controller's ``AGENT_HEALTH_RUN_ID`` says. ``caps`` are the most exchanges,
    and bytes of them, the cell may record (``None``: no cap). ``otlp``: the loopback port
    of the OTLP receiver the target is told of (``OTEL_EXPORTER_OTLP_ENDPOINT``).
    """
    args = ["gateway"]
    for route in routes:
        mcp = ",protocol=mcp" if route.protocol == "mcp" else ""
        args += [
            "--route",
            f"principal={route.principal},to={route.to},"
            f"listen={route.address},upstream={route.upstream}{mcp}",
        ]
    if ledgerurl.collected(ledger):
        # A ConfigMap ledger: the sealed records go to the gateway's log, and the operator
        # collects them once the pod ended, many cells to a write (no API call, no token).
        args += ["--ledger-log"]
    elif isinstance(identity, Pooled):
        args += ["--spool", SPOOL_DIR]  # its run's ledger URL comes with the assignment
    else:
        # The cell's records wait in the gateway's own /tmp (an emptyDir: it outlives a
        # restart of the gateway, not the pod) and reach the ledger in one write at its end.
        args += ["--ledger", ledger, "--spool", SPOOL_DIR]
    if isinstance(identity, Pooled):
        # The cell, its ledger URL, key and caps come with the assignment.
        args += ["--assignment", assignment.FILE, "--sandbox-key-env", SANDBOX_KEY_ENV]
    else:
        args += ["--cell", identity.ledger_cell, "--key-file", key_file]
        args += ["--run-id", identity.cell, "--test-id", identity.test_id]
        args += ["--repeat", str(identity.repeat), "--attempt", str(identity.attempt)]
    exchanges, size = caps
    if exchanges is not None:
        args += ["--max-cell-exchanges", str(exchanges)]
    if size is not None:
        args += ["--max-cell-bytes", str(size)]
    if isinstance(identity, Identity) and identity.agent is not None:
        args += ["--agent", identity.agent]
    if otlp is not None:
        args += ["--otlp-listen", f"127.0.0.1:{otlp}"]
    for name, image in identity.images.items():
        args += ["--image", f"{name}={image}"]
    for principal, path in tokens.items():
        args += ["--token", f"{principal}={path}"]
    # The controller's records, and the kubelet's probe, go to a Unix socket only the gateway
    # and the controller mount: nothing of the gateway listens beyond the pod's loopback.
    return [*args, "--admin", f"unix:{ADMIN_SOCKET}"]


@dataclasses.dataclass(frozen=True)
class GatewayTokens:
    """Every principal's token as the gateway reads it: ``--token`` values, and the mounts
    and env that put them there."""

    args: Mapping[str, str]
    """Principal → a file, or ``env:VAR``."""
    mounts: list[dict[str, Any]]
    env: list[dict[str, Any]]

    @classmethod
    def files(cls, volumes: Mapping[str, dict[str, Any]]) -> GatewayTokens:
        """A cold cell's: each principal's token volume mounted under :data:`TOKENS_DIR`, and
        the attempt's ledger key."""
        mounts = [{"name": "ledger-key", "mountPath": LEDGER_KEY_DIR, "readOnly": True}]
        args = {}
        for principal, volume in volumes.items():
            directory = f"{TOKENS_DIR}/{cellsecrets.secret_key(principal)}"
            mounts.append({"name": volume["name"], "mountPath": directory, "readOnly": True})
            args[principal] = f"{directory}/{cellsecrets.TOKEN_FILE}"
        return cls(args, mounts, [])

    @classmethod
    def generated(
        cls, principals: Sequence[str], secret_env: Callable[[str, str], dict[str, Any]]
    ) -> GatewayTokens:
        """A pooled cell's: each principal's token from the sandbox's generated Secret as
        ``AGENT_HEALTH_TOKEN_<KEY>`` (``secret_env(var, item)`` makes the env entry)."""
        args, env = {}, []
        for principal in principals:
            key = cellsecrets.secret_key(principal)
            var = "AGENT_HEALTH_TOKEN_" + key.upper().replace("-", "_")
            env.append(secret_env(var, key))
            args[principal] = f"env:{var}"
        return cls(args, [], env)


def container(
    *,
    identity: Identity | Pooled,
    routes: Sequence[Route],
    tokens: GatewayTokens,
    ledger: str,
    scratch: dict[str, Any],
    settings: manifests.Settings,
    otlp: int | None = None,
) -> dict[str, Any]:
    """The gateway's native-sidecar container (its volumes come from :func:`volumes`)."""
    mounts = [scratch, *tokens.mounts[:1], socket_mount(), *tokens.mounts[1:]]
    if isinstance(identity, Pooled):
        mounts.append(identity.mount)
    if settings.gateway_service_account is not None:
        mounts.append(
            {"name": SERVICE_ACCOUNT_VOLUME, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}
        )
    args = gateway_args(
        routes=routes,
        tokens=tokens.args,
        ledger=ledger,
        identity=identity,
        key_file=f"{LEDGER_KEY_DIR}/{cellsecrets.LEDGER_KEY}",
        caps=settings.cell_caps,
        otlp=otlp,
    )
    body: dict[str, Any] = {
        "name": NAME,
        "image": settings.gateway_image,
        "command": list(manifests.COMMAND),
        "args": args,
        "env": [*manifests.python_env(), *tokens.env, *identity_env(identity)],
        "restartPolicy": "Always",
        # Until it passes, no other container starts: the target cannot take a listener's
        # port first. No readiness probe: nothing routes to a cell, and an exec per period
        # per cell would cost its node a process start each time.
        "startupProbe": {
            "exec": {"command": probe_command()},
            "periodSeconds": 1,
            "timeoutSeconds": 5,
            "failureThreshold": settings.startup_seconds,
        },
        "volumeMounts": mounts,
        "resources": settings.resources.gateway.wire(),
        "securityContext": podsecurity.container_security_context(settings),
    }
    if settings.ledger_credentials_secret is not None:
        body["envFrom"] = [{"secretRef": {"name": settings.ledger_credentials_secret}}]
    return body


def probe_command() -> list[str]:
    """The gateway's startup probe: ``/healthz`` on its admin socket, from inside its container."""
    return ["python", "-I", "-S", "-c", admin.PROBE, ADMIN_SOCKET]


def volumes(place: cellsecrets.Place, settings: manifests.Settings) -> list[dict[str, Any]]:
    """The volumes only the gateway mounts: this attempt's ledger key (never the run's; from
    ``place``) and its service-account token."""
    return [cellsecrets.ledger_key_volume(place), socket_volume(), *account_volumes(settings)]


def account_volumes(settings: manifests.Settings) -> list[dict[str, Any]]:
    """The gateway's service-account token, when the operator names an account for it."""
    return [] if settings.gateway_service_account is None else [_service_account_volume()]


def socket_volume() -> dict[str, Any]:
    """The directory of the gateway's sockets for the controller: an ``emptyDir`` mounted
    into those two containers alone, so the target can neither reach the sockets nor put
    one of its own in their place (while the gateway restarts, say) to take the
    controller's token."""
    return {"name": SOCKET_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}


def socket_mount() -> dict[str, Any]:
    return {"name": SOCKET_VOLUME, "mountPath": SOCKET_DIR}


def _service_account_volume() -> dict[str, Any]:
    """What automounting would give every container, projected for the gateway alone."""
    namespace = {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
    return {
        "name": SERVICE_ACCOUNT_VOLUME,
        "projected": {
            "defaultMode": cellsecrets.MODE,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {"downwardAPI": {"items": [namespace]}},
            ],
        },
    }
