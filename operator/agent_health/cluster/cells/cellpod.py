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

from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import (
    cellenv,
    cellgateway,
    cellparts,
    cellsecrets,
    kueue,
    manifests,
    podsecurity,
    sandbox,
)

CONTROLLER = cellparts.CONTROLLER
TARGET = cellparts.TARGET
OWN_TOKEN_DIR = cellenv.OWN_TOKEN_DIR
peer_container_name = cellparts.peer_container_name


def cell_args(test_id: str, repeat: int, suite_dir: str) -> list[str]:
    """The controller's command line: run one test body."""
    return ["cell", "--test", test_id, "--repeat", str(repeat), "--suite", suite_dir]


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
    cell = manifests.cell_name(run_name, test_id, repeat, agent)
    cellparts.check(spec, settings)
    controller_image, volumes, suite_mounts = manifests.suite_source(spec, digests, settings)
    model = manifests.judge_model(run, spec, settings)
    place = place or cellsecrets.Place.own(cell, attempt)
    tokens = cellparts.Tokens.files(spec, place)
    volumes += [*tokens.volumes, *cellgateway.volumes(place, settings)]
    plan, routes = cellparts.routes_of(spec, settings, judged=model is not None)
    scratch = cellparts.scratch_of(spec, settings, volumes)
    sidecars = [
        cellgateway.container(
            identity=cellgateway.Identity(
                cell=cell,
                ledger_cell=manifests.ledger_cell(cell, attempt),
                test_id=test_id,
                repeat=repeat,
                attempt=attempt,
                agent=agent,
                images=cellparts.images_of(spec, digests, controller_image),
            ),
            routes=routes,
            tokens=tokens.gateway,
            ledger=cellenv.ledger_url(spec, settings),
            scratch=scratch[cellgateway.NAME],
            settings=settings,
            otlp=plan.otlp,
        ),
        *cellparts.members(spec, digests, settings, plan, scratch, tokens),
    ]

    timeout = run.spec.timeout_seconds or spec.spec.timeout_seconds
    env = [
        *cellparts.controller_env(spec),
        *tokens.own(CONTROLLER)[0],
        {"name": "AGENT_HEALTH_RUN_ID", "value": cell},
        {"name": "AGENT_HEALTH_CELL", "value": cell},
        {"name": "AGENT_HEALTH_EVALUATION_RUN", "value": run_name},
        {"name": "AGENT_HEALTH_TIMEOUT", "value": str(timeout)},
    ]
    if model is not None:
        env += cellparts.judge_env()
        env.append({"name": "AGENT_HEALTH_JUDGE_MODEL", "value": model})
    if run.spec.skip_judge:
        env.append({"name": "AGENT_HEALTH_SKIP_JUDGE", "value": "1"})
    if run.spec.skip_simulate:
        env.append({"name": "AGENT_HEALTH_SKIP_SIMULATE", "value": "1"})
    if agent is not None:
        env.append({"name": "AGENT_HEALTH_AGENT", "value": agent})
    env.extend(cellenv.otlp_env(spec, settings))
    controller = cellparts.controller_container(
        controller_image,
        cell_args(test_id, repeat, spec.spec.suite.path),
        env,
        [
            scratch[CONTROLLER],
            *tokens.own(CONTROLLER)[1],
            cellgateway.socket_mount(),
            *suite_mounts,
        ],
        settings,
    )
    pod_spec = cellparts.pod_spec_of(settings, sidecars, controller, volumes)
    pod_spec["activeDeadlineSeconds"] = deadline_seconds(run, spec, settings)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": cell,
            "namespace": namespace,
            "labels": {
                **manifests.cell_labels(run, test_id, repeat, agent),
                **kueue.labels(
                    kueue.queue_of(spec, run, settings.default_queue, settings.sandbox_queueing)
                ),
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
        run,
        spec,
        test_id=test_id,
        repeat=repeat,
        digests=digests,
        settings=settings,
        attempt=attempt,
        agent=agent,
        place=place,
    )
    isolation = spec.spec.isolation
    if isolation.mode == "agentSandbox":
        chosen = isolation.runtime_class_name or settings.sandbox_runtime_class
        box = sandbox.sandbox(pod, runtime_class_name=chosen or settings.runtime_class)
        # Kueue admits the Sandbox's pod (its pod template keeps the queue's label); the
        # Sandbox itself is no workload of Kueue's.
        box["metadata"]["labels"].pop(kueue.QUEUE_LABEL, None)
        return box
    return pod
