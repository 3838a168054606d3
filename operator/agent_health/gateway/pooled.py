"""A pooled (warm) cell's gateway: listening before its cell exists, recording it once assigned.

A cell from a warm pool is a pod started before the operator knows which (test, repeat) it
will run (:mod:`agent_health.ledger.assignment`). Its gateway starts with ``--assignment
FILE --sandbox-key-env VAR`` instead of ``--cell``, ``--run-id``, ``--test-id``,
``--repeat``, ``--attempt``, ``--agent`` and ``--key-file``: it binds every listener and
answers ``/healthz`` at once (its startup probe passes, so the target starts and becomes
ready), and until the file names its cell every other call — on every route, the admin
listener and the OTLP receiver — is answered 503 by the :class:`Gate`: not forwarded, not
recorded (no ledger cell exists to hold it), counted in ``/healthz``. A target that calls its
peers while it warms up gets those 503s; it must not need its peers to become ready.

Once assigned, the gateway is a cold cell's: the assignment gives its identity, the run's
ledger URL and caps (:func:`cell_settings`; else its flags') and its ledger key, which the
operator wrapped for this sandbox alone (:func:`cell_key`,
:func:`agent_health.ledger.keys.unwrap_cell_key`): it opens the ledger and the cell with its
``cell-meta`` record, and hands every listener to its real handler. A malformed assignment
stops the gateway with the reason (exit 2), so the operator sees the cell fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from aiohttp import web

from agent_health.gateway import admin, config, errors, guard
from agent_health.ledger import assignment, chain, keys

log = logging.getLogger("agent_health.gateway")
UNASSIGNED = (
    "this sandbox has not been assigned a cell yet: its gateway forwards and records nothing "
    "until the operator assigns it one"
)
OTLP_UNAVAILABLE = 14
"""The gRPC status code UNAVAILABLE, which an OTLP exporter reads as "retry later"."""


class Gate:
    """What a pooled gateway's listeners answer until its cell is assigned."""

    def __init__(self) -> None:
        self.refused = 0
        """Calls answered 503 before the assignment (none of them recorded)."""
        self.assigned = False

    def handler(
        self, name: str, *, otlp: bool = False, health: guard.Handler | None = None
    ) -> guard.Handler:
        """The handler of listener ``name`` while unassigned; ``health`` still answers
        ``/healthz`` (the admin listener's, probed by the kubelet)."""

        async def answer(request: web.BaseRequest) -> web.StreamResponse:
            if health is not None and request.path == admin.HEALTH_PATH:
                return await health(request)
            return self.refuse(request, name, otlp=otlp)

        return answer

    def refuse(self, request: web.BaseRequest, name: str, *, otlp: bool) -> web.Response:
        self.refused += 1
        if self.refused == 1:
            log.warning(
                "listener %s: %s %s before the sandbox was assigned a cell: answered 503, not "
                "recorded (the later ones are counted in /healthz)",
                name,
                request.method,
                request.path[:200],
            )
        if otlp:  # the Status message of OTLP/HTTP, as the receiver answers
            body: dict[str, object] = {"code": OTLP_UNAVAILABLE, "message": UNASSIGNED}
        else:
            body = {"error": UNASSIGNED, "listener": name}
        response = web.json_response(body, status=503)
        response.headers["Retry-After"] = "1"
        response.force_close()  # its body is never read
        return response

    def summary(self) -> dict[str, object]:
        return {"assigned": self.assigned, "refused_unassigned": self.refused}


def sandbox_key(settings: config.Settings) -> bytes:
    """The sandbox's own key, from ``$sandbox_key_env`` (whitespace stripped, as a key file's
    is); a :class:`GatewayConfigError` when it is missing or short."""
    variable = settings.sandbox_key_env
    assert variable is not None
    key = os.environ.get(variable, "").strip().encode("utf-8")
    if not key:
        raise errors.GatewayConfigError(
            f"--sandbox-key-env {variable}: ${variable} is unset or empty (the sandbox's key, "
            "from its Secret, unwraps its cell's ledger key)"
        )
    if len(key) < chain.MIN_KEY_BYTES:
        raise errors.GatewayConfigError(
            f"--sandbox-key-env {variable}: the sandbox key is {len(key)} bytes; at least "
            f"{chain.MIN_KEY_BYTES} are needed"
        )
    return key


def cell_key(settings: config.Settings, sandbox: bytes, assigned: assignment.Assignment) -> bytes:
    """The assigned cell's ledger key, unwrapped with the sandbox's key."""
    try:
        return keys.unwrap_cell_key(sandbox, assigned.ledger_cell, assigned.ledger_key)
    except ValueError as err:
        raise errors.GatewayConfigError(f"{settings.assignment}: {err}") from err


def cell_settings(settings: config.Settings, assigned: assignment.Assignment) -> config.Settings:
    """The settings of the assigned cell: a cold gateway's, as if its flags had named it."""
    fields = settings.model_dump(exclude={"assignment", "sandbox_key_env"})
    fields |= {
        "cell": assigned.ledger_cell,
        "run_id": assigned.cell,
        "test_id": assigned.test_id,
        "repeat": assigned.repeat,
        "attempt": assigned.attempt,
        "agent": assigned.agent,
    }
    # The run's ledger and caps, when it names them (a ConfigMap ledger's gateway logs its
    # records: the operator collects them into the run's ledger).
    if assigned.ledger is not None and not settings.ledger_log:
        fields["ledger_url"] = assigned.ledger
    if assigned.max_cell_exchanges is not None:
        fields["max_cell_exchanges"] = assigned.max_cell_exchanges
    if assigned.max_cell_bytes is not None:
        fields["max_cell_bytes"] = assigned.max_cell_bytes
    try:
        return config.build(fields)
    except errors.GatewayConfigError as err:
        raise errors.GatewayConfigError(f"{settings.assignment}: {err}") from err


async def wait(settings: config.Settings, stop: asyncio.Event) -> assignment.Assignment | None:
    """The assignment, once its file holds one; ``None`` when ``stop`` comes first."""
    assert settings.assignment is not None
    path = Path(settings.assignment)
    waiting = asyncio.ensure_future(assignment.wait(path))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiting, stopping):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if waiting.cancelled():
        return None
    try:
        return waiting.result()
    except assignment.AssignmentError as err:
        raise errors.GatewayConfigError(f"the cell's assignment: {err}") from err
    except OSError as err:
        raise errors.GatewayConfigError(
            f"cannot read the assignment {path}: {err.strerror or err}"
        ) from err
