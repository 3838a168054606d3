"""A cell: one (test, repeat) as one Pod — the controller, and the gateway, target and peers.

``controller`` is the main container (``agent-health cell``); ``gateway``, ``target`` and
each peer are native sidecars (init containers with ``restartPolicy: Always``), so the pod
completes when the controller exits. The gateway starts first and must pass its startup
probe (run in its own container, over its admin socket) before anything else starts; the
target and each peer must accept TCP on their port (on the pod IP, as the kubelet probes it
there) before the next container starts. No other pod reaches those ports: the run's
NetworkPolicy admits no ingress.

Secrets are mounted per container (see :mod:`.cellgateway` for who is recorded how): the
ledger key and ledger credentials only into the gateway; each principal's token only into
its own container and the gateway. The target gets no token and no service-account token,
and reaches its peers only through the gateway, whose listeners replace the peers' URLs.
Nor may a RunSpec hand the target or a peer one of agent-health's Secrets through ``env``
(:func:`.admission.refuse_our_secrets`).

Every container has CPU and memory limits (:mod:`.resources`; a RunSpec's own for its target
and peers, within the operator's cap); the pod names every container but the gateway in
``eks.amazonaws.com/skip-containers``, so EKS's identity webhook gives the cells'
ServiceAccount role to the gateway alone; an operator that requires a RuntimeClass
(``--cell-runtime-class``) runs every cell with it. :func:`.admission.admit` checks a
RunSpec against the operator's rules before anything is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    admission,
    cellenv,
    cellgateway,
    cellsecrets,
    kueue,
    manifests,
    podsecurity,
    sandbox,
)

CONTROLLER = cellsecrets.CONTROLLER
TARGET = "target"
OWN_TOKEN_DIR = cellenv.OWN_TOKEN_DIR


def cell_args(test_id: str, repeat: int, suite_dir: str) -> list[str]:
    """The controller's command line: run one test body."""
    return ["cell", "--test", test_id, "--repeat", str(repeat), "--suite", suite_dir]


def peer_container_name(peer: str) -> str:
    """``peer-<name>``, shortened with a hash when the peer's name is long."""
    return manifests.fit(f"peer-{peer}", manifests.DNS_LABEL_MAX)


def cell_pod(
    run: evaluationrun.EvaluationRun,
    spec: runspec.RunSpec,
    *,
    test_id: str,
    repeat: int,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    attempt: int = 0,
    agent: str | None = None,
    place: cellsecrets.Place | None = None,
) -> dict[str, Any]:
    """The Pod of one (test, repeat) of ``run``; ``digests`` maps each RunSpec image to its digest.
    ``agent``: an agent matrix's agent (``spec`` is then :meth:`RunSpec.for_agent`'s).

    The attempt's tokens and ledger key are mounted from ``place``: the run's shared Secret
    (:func:`.cellsecrets.shared_secret`), or by default the attempt's own
    (:func:`.cellsecrets.token_secret`), which the caller creates, as it creates
    :func:`.cellsecrets.ledger_key_secret` for the run. A target
    with the ``subprocess`` connector cannot run in a cell (it would have to share the
    controller's container).
    The judge listener exists only when the cell is judged (:func:`.manifests.judge_model`);
    otherwise ``judge()`` in the cell is skipped.
    """
    namespace, run_name, _ = manifests.identity(run)
    target = spec.spec.target
    if target.port is None:
        raise errors.SpecError(
            f"RunSpec {spec.metadata.get('name', '?')}: target.connector subprocess cannot run "
            "in a cluster cell; serve the agent over HTTP (rest, agui or openai) with a port"
        )
    cell = manifests.cell_name(run_name, test_id, repeat, agent)
    admission.admit(spec, settings)
    admission.refuse_our_secrets(spec, settings)
    plan = cellgateway.ports(spec)
    controller_image, volumes, suite_mounts = manifests.suite_source(spec, digests, settings)
    model = manifests.judge_model(run, spec, settings)
    judged = model is not None
    target_url = f"http://127.0.0.1:{target.port}"

    routes = [cellgateway.Route(CONTROLLER, TARGET, cellgateway.AGENT_SOCKET, target_url)]
    if judged and settings.judge is not None:
        judge_route = cellgateway.Route(
            CONTROLLER, "judge", cellgateway.JUDGE_SOCKET, settings.judge.url
        )
        routes.append(judge_route)
    for peer in spec.spec.peers:
        peer_url = f"http://127.0.0.1:{peer.port}"
        peer_principal = f"peer:{peer.name}"
        routes.append(cellgateway.Route(TARGET, peer_principal, plan.peers[peer.name], peer_url))
        routes.append(
            cellgateway.Route(peer_principal, TARGET, plan.peer_target[peer.name], target_url)
        )

    place = place or cellsecrets.Place.own(cell, attempt)
    tokens = {p: cellsecrets.token_volume(p, place) for p in cellsecrets.principals(spec)}
    volumes += [*tokens.values(), *cellgateway.volumes(place, settings)]
    scratch: dict[str, dict[str, Any]] = {}
    peers = [peer_container_name(p.name) for p in spec.spec.peers]
    for name in [cellgateway.NAME, TARGET, *peers, CONTROLLER]:
        volume, scratch[name] = manifests.scratch_volume(name, settings)
        volumes.append(volume)

    def own_token(principal: str) -> dict[str, Any]:
        return {"name": tokens[principal]["name"], "mountPath": OWN_TOKEN_DIR, "readOnly": True}

    sidecars = [
        cellgateway.container(
            identity=cellgateway.Identity(
                cell=cell,
                ledger_cell=manifests.ledger_cell(cell, attempt),
                test_id=test_id,
                repeat=repeat,
                attempt=attempt,
                agent=agent,
                images={
                    TARGET: manifests.pinned(target.image, digests),
                    **{
                        peer_container_name(p.name): manifests.pinned(p.image, digests)
                        for p in spec.spec.peers
                    },
                    CONTROLLER: controller_image,
                },
            ),
            routes=routes,
            token_volumes=tokens,
            ledger=cellenv.ledger_url(spec, settings),
            scratch=scratch[cellgateway.NAME],
            settings=settings,
            otlp=plan.otlp,
        ),
    ]
    for peer, container_name in zip(spec.spec.peers, peers, strict=True):
        to_target = f"http://127.0.0.1:{plan.peer_target[peer.name]}"
        sidecars.append(
            _sidecar(
                container_name,
                manifests.pinned(peer.image, digests),
                env=[
                    *(m.wire() for m in peer.env),
                    cellenv.own_token_env(),
                    {"name": "AGENT_HEALTH_TARGET_URL", "value": to_target},
                ],
                mounts=[scratch[container_name], own_token(f"peer:{peer.name}")],
                compute=admission.resources_of(spec, settings, peer),
                port=peer.port,
                settings=settings,
            )
        )
    # Peers listen before the target starts, so the target cannot take a peer's port first
    # and answer in its name.
    sidecars.append(
        _sidecar(
            TARGET,
            manifests.pinned(target.image, digests),
            env=cellenv.target_env(spec, plan),
            mounts=[scratch[TARGET]],
            compute=admission.resources_of(spec, settings, None),
            port=target.port,
            settings=settings,
        )
    )

    timeout = run.spec.timeout_seconds or spec.spec.timeout_seconds
    gateway = cellgateway.SOCKET_HOST
    agent_url = f"{target.connector}+http://{gateway}{target.path}"
    env = [
        *manifests.python_env(),
        {"name": "AGENT_HEALTH_AGENT_URL", "value": agent_url},
        cellenv.own_token_env(),
        {"name": "AGENT_HEALTH_RUN_ID", "value": cell},
        {"name": "AGENT_HEALTH_CELL", "value": cell},
        {"name": "AGENT_HEALTH_EVALUATION_RUN", "value": run_name},
        {"name": "AGENT_HEALTH_TIMEOUT", "value": str(timeout)},
        {"name": "AGENT_HEALTH_AGENT_SOCKET", "value": cellgateway.AGENT_SOCKET},
        {"name": "AGENT_HEALTH_GATEWAY_ADMIN", "value": f"http://{gateway}"},
        {"name": "AGENT_HEALTH_GATEWAY_ADMIN_SOCKET", "value": cellgateway.ADMIN_SOCKET},
    ]
    if model is not None:
        env.append({"name": "AGENT_HEALTH_JUDGE_URL", "value": f"http://{gateway}"})
        env.append({"name": "AGENT_HEALTH_JUDGE_SOCKET", "value": cellgateway.JUDGE_SOCKET})
        env.append({"name": "AGENT_HEALTH_JUDGE_MODEL", "value": model})
    if run.spec.skip_judge:
        env.append({"name": "AGENT_HEALTH_SKIP_JUDGE", "value": "1"})
    if run.spec.skip_simulate:
        env.append({"name": "AGENT_HEALTH_SKIP_SIMULATE", "value": "1"})
    if agent is not None:
        env.append({"name": "AGENT_HEALTH_AGENT", "value": agent})
    env.extend(cellenv.otlp_env(spec, settings))
    controller = {
        "name": CONTROLLER,
        "image": controller_image,
        "command": list(manifests.COMMAND),
        "args": cell_args(test_id, repeat, spec.spec.suite.path),
        "env": env,
        "volumeMounts": [
            scratch[CONTROLLER],
            own_token(CONTROLLER),
            cellgateway.socket_mount(),
            *suite_mounts,
        ],
        "resources": settings.resources.controller.wire(),
        # A crash before the cell could record anything still leaves its reason on the pod.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": podsecurity.container_security_context(settings),
    }

    pod_spec = podsecurity.pod_spec_base(settings)
    if settings.gateway_service_account is not None:
        pod_spec["serviceAccountName"] = settings.gateway_service_account
    pod_spec |= {
        "activeDeadlineSeconds": deadline_seconds(run, spec, settings),
        "terminationGracePeriodSeconds": 15,
        "initContainers": sidecars,
        "containers": [controller],
        "volumes": volumes,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": cell,
            "namespace": namespace,
            "labels": {
                **manifests.cell_labels(run, test_id, repeat, agent),
                **kueue.labels(kueue.queue_of(spec, run, settings.default_queue)),
            },
            "annotations": {
                manifests.ANNOTATION_TEST_ID: test_id,
                manifests.ANNOTATION_RUNSPEC: run.spec.run_spec_ref.name,
                **podsecurity.skip_cloud_identity(pod_spec, keep=cellgateway.NAME),
            },
            "ownerReferences": [manifests.owner_reference(run)],
        },
        "spec": pod_spec,
    }


def deadline_seconds(
    run: evaluationrun.EvaluationRun, spec: runspec.RunSpec, settings: manifests.Settings
) -> int:
    """A cell's ``activeDeadlineSeconds``: the test's timeout plus the startup slack."""
    return (run.spec.timeout_seconds or spec.spec.timeout_seconds) + settings.startup_seconds


def cell(
    run: evaluationrun.EvaluationRun,
    spec: runspec.RunSpec,
    *,
    test_id: str,
    repeat: int,
    digests: Mapping[str, str],
    settings: manifests.Settings,
    attempt: int = 0,
    agent: str | None = None,
    place: cellsecrets.Place | None = None,
) -> dict[str, Any]:
    """The object to create for one cell: the Pod, or a Sandbox around it (``agentSandbox``).

    ``attempt`` counts infrastructure retries; each attempt records into its own ledger cell.
    ``agent`` (an agent matrix) runs that named target of ``spec`` as the cell's target.
    ``place``: where its tokens and ledger key are (default: the attempt's own Secret).
    """
    spec = spec.for_agent(agent)
    pod = cell_pod(
        run, spec, test_id=test_id, repeat=repeat, digests=digests, settings=settings,
        attempt=attempt, agent=agent, place=place,
    )  # fmt: skip
    isolation = spec.spec.isolation
    if isolation.mode == "agentSandbox":
        chosen = isolation.runtime_class_name or settings.sandbox_runtime_class
        return sandbox.sandbox(pod, runtime_class_name=chosen or settings.runtime_class)
    return pod


def _sidecar(
    name: str,
    image: str,
    *,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
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
