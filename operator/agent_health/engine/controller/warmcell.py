"""``agent-health cell --assignment FILE``: a pooled (warm) cell's controller.

A cell from a warm pool is a pod started before its cell exists
(:mod:`agent_health.ledger.assignment`): its target and peers start and become ready, its
gateway listens, and its controller waits here until the operator assigns the sandbox a
cell and the kubelet projects the assignment into ``FILE``. Then it runs as ``agent-health
cell --test ID --repeat N`` would, the assignment giving what a cold cell's environment
gives (:mod:`.cell`): the run id, the EvaluationRun, the timeout, the judge model (none:
judging is skipped, as a cold cell without ``AGENT_HEALTH_JUDGE_MODEL`` has no judge route),
``skipJudge``, ``skipSimulate`` and the agent of a matrix. Where the target, the gateway's
admin listener and the judge are, and the controller's token, still come from the
environment (the token from ``AGENT_HEALTH_TOKEN``: a pooled cell's tokens are env vars).

It waits with no deadline of its own: the operator's deadline on the pod bounds a cell. A
malformed assignment ends it with the reason and exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from agent_health import connectors, tls
from agent_health.engine import visible
from agent_health.engine.controller import cell, cellsuite
from agent_health.ledger import assignment
from agent_health.sdk import errors
from agent_health.sdk.results import TestResult


def settings(
    assigned: assignment.Assignment, *, suite: Path, environ: Mapping[str, str] | None = None
) -> cell.CellSettings:
    """The cell settings of ``assigned``: the environment's, with the assignment's identity."""
    env = dict(os.environ if environ is None else environ)
    env["AGENT_HEALTH_RUN_ID"] = assigned.cell
    base = cell.CellSettings.from_env(
        suite=suite, test_id=assigned.test_id, repeat=assigned.repeat, environ=env
    )
    return dataclasses.replace(
        base,
        run_id=assigned.cell,
        evaluation_run=assigned.evaluation_run,
        timeout=float(assigned.timeout),
        judge_model=assigned.judge_model,
        # No judge model, no judging: the operator assigns a model to every judged cell.
        judge_url=base.judge_url if assigned.judge_model is not None else None,
        skip_judge=assigned.skip_judge,
        skip_simulate=assigned.skip_simulate,
        matrix_agent=assigned.agent,
    )


async def wait_and_run(path: Path, suite: Path) -> tuple[int, TestResult | None]:
    """Load the suite, wait for the assignment in ``path``, then run its cell.

    The suite is loaded (its modules imported, its cases read) and the target's connector
    made while the sandbox waits in its pool, so a warm cell's test starts as soon as it is
    assigned; a suite that cannot be loaded is reported in the assigned cell's ledger, as a
    cold cell reports it."""
    loaded: cellsuite.Loaded | Exception
    try:
        loaded = cellsuite.load(suite)
        # The connector too (its HTTP stack imported, its client made): where the target is
        # and the controller's token are the pod's, whichever cell comes.
        unassigned = {**os.environ, "AGENT_HEALTH_RUN_ID": "unassigned"}
        provisional = cell.CellSettings.from_env(
            suite=suite, test_id="", repeat=0, environ=unassigned
        )
        loaded = dataclasses.replace(
            loaded, connector=cell.connector_of(provisional, loaded.config)
        )
    except cell.SetUpError as err:
        loaded = err
    print(f"waiting for the cell's assignment in {path}", file=sys.stderr)
    try:
        assigned = await assignment.wait(path)
    except OSError as err:
        raise cell.CellError(f"cannot read the assignment {path}: {err.strerror or err}") from err
    except assignment.AssignmentError as err:
        raise cell.CellError(f"the cell's assignment: {err}") from err
    print(
        f"assigned cell {assigned.cell}: {assigned.test_id} repeat {assigned.repeat}",
        file=sys.stderr,
    )
    chosen = settings(assigned, suite=suite)
    await gateway_assigned(chosen)
    return await cell.run_cell(chosen, loaded)


async def gateway_assigned(chosen: cell.CellSettings) -> None:
    """Until the pod's gateway has taken the cell too: both read the same file, and what the
    controller sends the gateway before it has a cell is refused (503), not recorded."""
    if chosen.admin is None:
        return
    transport = cell.through(chosen.admin_socket)
    verify = tls.for_url(chosen.admin)
    async with httpx.AsyncClient(transport=transport, timeout=10.0, verify=verify) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                answer = await client.get(f"{chosen.admin}/healthz")
                if answer.json().get("assigned", True):
                    return
            await asyncio.sleep(assignment.POLL_SECONDS)


def main(suite: Path, path: Path) -> int:
    """The ``agent-health cell --assignment FILE`` command (exit codes as :func:`cell.main`)."""
    try:
        code, result = asyncio.run(wait_and_run(path, suite))
    except (cell.CellError, errors.ConfigError, connectors.ConnectorError) as err:
        print(f"error: {visible.line(str(err))}", file=sys.stderr)
        return cell.EXIT_MISCONFIGURED
    except cell.RecordingFailed as err:
        print(f"error: {visible.line(str(err))}", file=sys.stderr)
        return cell.EXIT_UNRECORDED
    if result is not None:
        print(cell.report(result))
    return code
