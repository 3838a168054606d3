"""The parts every cell pod is made of, cold (:mod:`.cellpod`) or pooled (:mod:`.pooledpod`).

Both have the same containers, listeners, probes, limits and security context; they differ
only in when they learn their cell and how tokens reach the containers (:class:`Tokens`):

* a cold cell's tokens are files, one Secret volume per principal (``secret.items``), so each
  container sees its own alone and the gateway all of them;
* a pooled cell's tokens are values of the Secret the sandbox controller generated for that
  sandbox alone (its logical name in the template: ``cell-keys-<random>``,
  :func:`.warmpool.new_secret_name`), as environment variables from ``secretKeyRef`` — the
  one way such a Secret reaches a pod made from a template (the controller rewrites env
  references to each sandbox's own Secret, never volumes). The controller and each peer
  get their own token (``$AGENT_HEALTH_TOKEN``), the gateway every token and the sandbox's
  key; the target none (:func:`.warmpool.leak` checks a pod spec for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import (
    admission,
    cellenv,
    cellgateway,
    cellsecrets,
    manifests,
    podsecurity,
)
from agent_health.ledger import assignment

CONTROLLER = cellsecrets.CONTROLLER
TARGET = "target"
TOKEN_ENV = "AGENT_HEALTH_TOKEN"

Env = list[dict[str, Any]]
Mounts = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Tokens:
    """How the principals' tokens reach their containers and the gateway."""

    volumes: list[dict[str, Any]]
    gateway: cellgateway.GatewayTokens
    own: Callable[[str], tuple[Env, Mounts]]
    """A principal's own container: the env and mounts that give it its token."""

    @classmethod
    def files(cls, spec: runspec.RunSpec, place: cellsecrets.Place) -> Tokens:
        """A cold cell's: one Secret volume per principal, from ``place``."""
        volumes = {p: cellsecrets.token_volume(p, place) for p in cellsecrets.principals(spec)}

        def own(principal: str) -> tuple[Env, Mounts]:
            mount = {
                "name": volumes[principal]["name"],
                "mountPath": cellenv.OWN_TOKEN_DIR,
                "readOnly": True,
            }
            return [cellenv.own_token_env()], [mount]

        return cls(list(volumes.values()), cellgateway.GatewayTokens.files(volumes), own)

    @classmethod
    def generated(cls, spec: runspec.RunSpec, secret: str) -> Tokens:
        """A pooled cell's: values of the sandbox's generated Secret (logical name
        ``secret``), as env variables."""

        def env(name: str, key: str) -> dict[str, Any]:
            return secret_env(secret, name, key)

        def own(principal: str) -> tuple[Env, Mounts]:
            return [env(TOKEN_ENV, cellsecrets.secret_key(principal))], []

        principals = cellsecrets.principals(spec)
        return cls([], cellgateway.GatewayTokens.generated(principals, env), own)


def secret_env(secret: str, name: str, key: str) -> dict[str, Any]:
    """``name`` from item ``key`` of the sandbox's generated Secret ``secret``."""
    ref = {"name": secret, "key": key}
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def assignment_volume() -> dict[str, Any]:
    """The pod's assignment annotation as a file, for the gateway and the controller alone."""
    item = {
        "path": assignment.FILE.rsplit("/", 1)[1],
        "fieldRef": {"fieldPath": f"metadata.annotations['{assignment.ANNOTATION}']"},
    }
    return {
        "name": cellgateway.ASSIGNMENT_VOLUME,
        "downwardAPI": {"items": [item], "defaultMode": 0o444},
    }


def assignment_mount() -> dict[str, Any]:
    return {
        "name": cellgateway.ASSIGNMENT_VOLUME,
        "mountPath": assignment.DIRECTORY,
        "readOnly": True,
    }


def generated_secret(spec: runspec.RunSpec, secret: str) -> dict[str, Any]:
    """The SandboxTemplate's ``generatedSecrets`` entry, named ``secret``: a token per
    principal and the sandbox key, 32 random bytes each, made afresh for every sandbox."""
    keys = [cellsecrets.secret_key(p) for p in cellsecrets.principals(spec)]
    return {
        "name": secret,
        "data": [{"key": k, "lengthBytes": 32} for k in [*keys, cellgateway.SANDBOX_KEY_ITEM]],
    }


def check(spec: runspec.RunSpec, settings: manifests.Settings) -> None:
    """What every cell needs of its RunSpec: an HTTP target, within the operator's rules."""
    if spec.spec.target.port is None:
        raise errors.SpecError(
            f"RunSpec {spec.metadata.get('name', '?')}: target.connector subprocess cannot run "
            "in a cluster cell; serve the agent over HTTP (rest, agui or openai) with a port"
        )
    admission.admit(spec, settings)
    admission.refuse_our_secrets(spec, settings)


def peer_container_name(peer: str) -> str:
    """``peer-<name>``, shortened with a hash when the peer's name is long."""
    return manifests.fit(f"peer-{peer}", manifests.DNS_LABEL_MAX)


def routes_of(
    spec: runspec.RunSpec, settings: manifests.Settings, *, judged: bool
) -> tuple[cellgateway.Ports, list[cellgateway.Route]]:
    """The gateway's ports and routes (the judge's only when the cell is judged)."""
    plan = cellgateway.ports(spec)
    target_url = f"http://127.0.0.1:{spec.spec.target.port}"
    routes = [cellgateway.Route(CONTROLLER, TARGET, cellgateway.AGENT_SOCKET, target_url)]
    if judged and settings.judge is not None:
        routes.append(
            cellgateway.Route(CONTROLLER, "judge", cellgateway.JUDGE_SOCKET, settings.judge.url)
        )
    for peer in spec.spec.peers:
        peer_url = f"http://127.0.0.1:{peer.port}"
        principal = f"peer:{peer.name}"
        listen = plan.peers[peer.name]
        routes.append(cellgateway.Route(TARGET, principal, listen, peer_url, peer.protocol))
        routes.append(cellgateway.Route(principal, TARGET, plan.peer_target[peer.name], target_url))
    return plan, routes


def scratch_of(
    spec: runspec.RunSpec, settings: manifests.Settings, volumes: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each container's own ``/tmp`` mount; their volumes appended to ``volumes``."""
    scratch: dict[str, dict[str, Any]] = {}
    peers = [peer_container_name(p.name) for p in spec.spec.peers]
    for name in [cellgateway.NAME, TARGET, *peers, CONTROLLER]:
        volume, scratch[name] = manifests.scratch_volume(name, settings)
        volumes.append(volume)
    return scratch


def images_of(
    spec: runspec.RunSpec, digests: Mapping[str, str], controller_image: str
) -> dict[str, str]:
    """Container name → image pinned by digest, as the gateway seals them in the cell-meta."""
    return {
        TARGET: manifests.pinned(spec.spec.target.image, digests),
        **{
            peer_container_name(p.name): manifests.pinned(p.image, digests) for p in spec.spec.peers
        },
        CONTROLLER: controller_image,
    }


def members(
    spec: runspec.RunSpec,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    plan: cellgateway.Ports,
    scratch: Mapping[str, dict[str, Any]],
    tokens: Tokens,
) -> list[dict[str, Any]]:
    """The peers' and the target's sidecars, peers first: they listen before the target
    starts, so the target cannot take a peer's port first and answer in its name."""
    sidecars = []
    for peer in spec.spec.peers:
        name = peer_container_name(peer.name)
        env, mounts = tokens.own(f"peer:{peer.name}")
        to_target = f"http://127.0.0.1:{plan.peer_target[peer.name]}"
        sidecars.append(
            sidecar(
                name,
                manifests.pinned(peer.image, digests),
                env=[
                    *(m.wire() for m in peer.env),
                    *env,
                    {"name": "AGENT_HEALTH_TARGET_URL", "value": to_target},
                ],
                mounts=[scratch[name], *mounts],
                compute=admission.resources_of(spec, settings, peer),
                port=peer.port,
                settings=settings,
            )
        )
    target = spec.spec.target
    assert target.port is not None  # check() refused a subprocess target
    sidecars.append(
        sidecar(
            TARGET,
            manifests.pinned(target.image, digests),
            env=cellenv.target_env(spec, plan),
            mounts=[scratch[TARGET]],
            compute=admission.resources_of(spec, settings, None),
            port=target.port,
            settings=settings,
        )
    )
    return sidecars


def controller_env(spec: runspec.RunSpec) -> Env:
    """What the controller is told of its gateway, cold or pooled."""
    gateway = cellgateway.SOCKET_HOST
    agent_url = f"{spec.spec.target.connector}+http://{gateway}{spec.spec.target.path}"
    return [
        *manifests.python_env(),
        {"name": "AGENT_HEALTH_AGENT_URL", "value": agent_url},
        {"name": "AGENT_HEALTH_AGENT_SOCKET", "value": cellgateway.AGENT_SOCKET},
        {"name": "AGENT_HEALTH_GATEWAY_ADMIN", "value": f"http://{gateway}"},
        {"name": "AGENT_HEALTH_GATEWAY_ADMIN_SOCKET", "value": cellgateway.ADMIN_SOCKET},
    ]


def judge_env() -> Env:
    """Where the controller reaches the judge: the gateway's judge socket."""
    return [
        {"name": "AGENT_HEALTH_JUDGE_URL", "value": f"http://{cellgateway.SOCKET_HOST}"},
        {"name": "AGENT_HEALTH_JUDGE_SOCKET", "value": cellgateway.JUDGE_SOCKET},
    ]


def controller_container(
    image: str, args: list[str], env: Env, mounts: Mounts, settings: manifests.Settings
) -> dict[str, Any]:
    """The controller: the pod's main container (``mounts`` include the gateway's sockets)."""
    return {
        "name": CONTROLLER,
        "image": image,
        "command": list(manifests.COMMAND),
        "args": args,
        "env": env,
        "volumeMounts": mounts,
        "resources": settings.resources.controller.wire(),
        # A crash before the cell could record anything still leaves its reason on the pod.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": podsecurity.container_security_context(settings),
    }


def pod_spec_of(
    settings: manifests.Settings,
    sidecars: list[dict[str, Any]],
    controller: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    """The PodSpec around the containers (no deadline: a cold cell sets its own)."""
    pod_spec = podsecurity.pod_spec_base(settings)
    if settings.gateway_service_account is not None:
        pod_spec["serviceAccountName"] = settings.gateway_service_account
    pod_spec |= {
        "terminationGracePeriodSeconds": 15,
        "initContainers": sidecars,
        "containers": [controller],
        "volumes": volumes,
    }
    return pod_spec


def sidecar(
    name: str,
    image: str,
    *,
    env: Env,
    mounts: Mounts,
    compute: dict[str, Any],
    port: int,
    settings: manifests.Settings,
) -> dict[str, Any]:
    """A native sidecar that must accept TCP on ``port`` before the next container starts."""
    return {
        "name": name,
        "image": image,
        "env": env,
        "restartPolicy": "Always",
        "startupProbe": {
            "tcpSocket": {"port": port},
            "periodSeconds": 1,
            "failureThreshold": settings.startup_seconds,
        },
        "volumeMounts": mounts,
        "resources": compute,
        "securityContext": podsecurity.container_security_context(settings),
        # A target or peer that dies says why in its status (its log's tail: "Read-only file
        # system", "exec: not found"), which the cell's error quotes.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
