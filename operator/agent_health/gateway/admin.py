"""The admin listener: ``GET /healthz`` and ``POST /ledger/records`` (the controller's records).

In a cell the admin listener is a Unix socket in a directory only the gateway and the
controller mount, and the kubelet's startup probe runs in the gateway's container and asks
``/healthz`` over that socket (:data:`PROBE`): the gateway listens on no address another pod
can reach, and a target that binds TCP ports while the gateway restarts reaches neither the
socket nor anything the controller sends through it. Outside a cell, ``--health`` adds a
health-only TCP listener: it answers ``GET /healthz`` with ``{"ok": ...}`` alone and refuses
everything else (404) *without* a ledger record, since anyone who reaches it could otherwise
fill the cell's ledger with refusals.

``/healthz`` answers 200 while the gateway serves and every ledger write succeeded, else 503,
with a JSON summary (routes, exchanges recorded, refused calls, the last ledger failures).

``GET /otlp/spans?run_id=RUN`` answers the controller (its token again) with the spans the
OTLP receiver (:mod:`~agent_health.gateway.otlp`) kept for that run: its ``result.traces``.

``GET /peers/calls?run_id=RUN`` answers the controller (its token again) with the target's
calls to peers the run's cell has on record so far (:meth:`.recorder.Recorder.peer_calls`;
``partial`` when some are still in flight or past what the cell keeps readable): what the
controller holds its test's tool claims to, and explains the test with, before it appends
its records — as a local run reads its own gateway.

``/ledger/records`` is how a cell's controller, which holds no ledger key, appends its
``run-result``, ``signal`` and ``cell-end`` records to the gateway's cell: a JSON list of
records without ``seq`` and ``mac``, sent with the controller's token in
``X-Agent-Health-Token``. Exchanges and cell-meta are the gateway's own and are refused (422).

On the admin listener, every other caller is refused before its body is read — 403 on
``/ledger/records``, 404 or 405 elsewhere — and the refusal is recorded in the cell's ledger
with the caller's principal and evidence (see :mod:`~agent_health.gateway.guard`): a forged
append must leave a trace, not a record. A body above ``admin_max_bytes`` is answered 413;
one that does not arrive within ``body_timeout``, 408.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any, Protocol

from aiohttp import web

from agent_health.gateway import config, guard, otlp
from agent_health.gateway import recorder as recorder_mod

# The ledger's modules, not its face: the face names the stores' registry (ledger.backends),
# which the admin listener must not reach (pyproject.toml: registries and servers).
from agent_health.ledger import errors as ledger_errors
from agent_health.ledger import records

CONTROLLER_KINDS = frozenset({"run-result", "signal", "cell-end"})
HEALTH_PATH, RECORDS_PATH, SPANS_PATH = "/healthz", "/ledger/records", "/otlp/spans"
CALLS_PATH = "/peers/calls"
PROBE = """\
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"GET /healthz HTTP/1.0\\r\\nHost: gateway\\r\\n\\r\\n")
head = s.makefile("rb").readline().split()
sys.exit(0 if head[1:2] == [b"200"] else 1)
"""
"""The kubelet's probe of a cell's gateway: ``python -I -S -c PROBE ADMIN_SOCKET`` in the
gateway's container exits 0 when ``/healthz`` on the admin socket answers 200. The standard
library alone (``-S``: no site packages), so each probe costs a bare interpreter's start."""


class Gateway(Protocol):
    """What the admin listener needs of its gateway (:class:`.server.Gateway` is one).

    Declared here so the dependency runs one way: the server builds the admin listener.
    """

    settings: config.Settings
    tokens: config.Tokens
    recorder: recorder_mod.Recorder | None
    refusals: guard.Refusals
    spans: otlp.Collector | None

    def health(self) -> tuple[bool, dict[str, Any]]: ...


class Admin:
    """The admin listener's handler (an aiohttp low-level server handler)."""

    def __init__(self, gateway: Gateway, *, records: bool = True) -> None:
        self.gateway = gateway
        self.records = records
        """False on the health listener: it answers ``/healthz`` and refuses everything else."""

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == HEALTH_PATH and request.method in ("GET", "HEAD"):
            ok, body = self.gateway.health()
            if not self.records:  # no routes, ledger or counts to whoever reaches it
                body = {"ok": ok}
            return web.json_response(body, status=200 if ok else 503)
        if not self.records:
            # Anyone may reach this listener: nothing it is sent is recorded (it would fill
            # the ledger), and records come only through the admin socket, token or not.
            return guard.refusal(404, f"this listener serves GET {HEALTH_PATH} only")
        started_at = time.time()
        principal, evidence = self.gateway.tokens.evidence(request.headers.get(config.TOKEN_HEADER))
        if principal != "controller":
            status, reason = _refusal(request)
            return self._refuse(request, principal, evidence, status, reason, started_at)
        if request.path == SPANS_PATH and request.method == "GET":
            return self._spans(request)
        if request.path == CALLS_PATH and request.method == "GET":
            return await self._calls(request)
        if request.path != RECORDS_PATH:
            return _problem(404, f"no {request.path} here: the admin listener serves {_PATHS}")
        if request.method != "POST":
            return _problem(405, f"{RECORDS_PATH} takes POST, not {request.method}")
        return await self._append(request, started_at)

    def _refuse(
        self,
        request: web.BaseRequest,
        principal: str,
        evidence: str,
        status: int,
        reason: str,
        started_at: float,
        seen: bytes | None = None,
    ) -> web.Response:
        response = guard.refusal(status, reason)
        body = response.body if isinstance(response.body, bytes) else b""
        self.gateway.refusals.refuse(
            request,
            principal=principal,
            evidence=evidence,
            run_id=self.gateway.settings.run_id,
            status=status,
            reason=f"admin listener: {reason}",
            started_at=started_at,
            response_bytes=len(body),
            request_bytes=len(seen or b""),
            request_sha256=hashlib.sha256(seen or b"").hexdigest(),
        )
        return response

    async def _append(self, request: web.BaseRequest, started_at: float) -> web.Response:
        gateway = self.gateway
        cell = gateway.settings.cell
        if gateway.recorder is None or cell is None:
            return _problem(409, "this gateway records no cell (start it with --ledger and --cell)")
        limit = gateway.settings.admin_max_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._too_large(request, started_at, request.content_length, None)
        body = bytearray()
        try:
            async with asyncio.timeout(gateway.settings.body_timeout):
                async for chunk in request.content.iter_any():
                    body += chunk
                    if len(body) > limit:
                        return self._too_large(request, started_at, len(body), bytes(body))
        except TimeoutError:
            return _problem(408, f"the body did not arrive within {gateway.settings.body_timeout}s")
        try:
            payload = json.loads(body)
        except ValueError as err:
            return _problem(400, f"the body is not JSON: {err}")
        parsed = _parse(payload)
        if isinstance(parsed, web.Response):
            return parsed
        try:
            sealed = await gateway.recorder.append(cell, *parsed, wait=gateway.settings.grace)
        except ledger_errors.ChainError as err:
            return _problem(409, str(err))
        except ledger_errors.LedgerError as err:
            return _problem(503, f"the ledger failed: {err}")
        return web.json_response(
            {"cell": cell, "appended": len(sealed), "seqs": [r.seq for r in sealed]}
        )

    def _spans(self, request: web.BaseRequest) -> web.Response:
        """The spans the OTLP receiver kept for ``?run_id=`` (the controller's traces)."""
        collector = self.gateway.spans
        if collector is None:
            return _problem(
                409, "this gateway receives no OTLP spans (start it with --otlp-listen)"
            )
        run_id = request.query.get("run_id") or self.gateway.settings.run_id
        if not run_id:
            return _problem(400, f"{SPANS_PATH} needs ?run_id=RUN")
        return web.json_response(collector.report(run_id))

    async def _calls(self, request: web.BaseRequest) -> web.Response:
        """The target's calls to peers on record for ``?run_id=`` (the cell's own run when
        not given)."""
        recording = self.gateway.recorder
        if recording is None:
            return _problem(409, "this gateway records no cell (start it with --ledger)")
        run_id = request.query.get("run_id") or self.gateway.settings.run_id
        found = await recording.peer_calls(run_id)
        if found is None:
            return _problem(404, f"no open cell records run {run_id!r}")
        return web.json_response({"run_id": run_id, **found})

    def _too_large(
        self, request: web.BaseRequest, started_at: float, size: int, seen: bytes | None
    ) -> web.Response:
        limit = self.gateway.settings.admin_max_bytes
        reason = f"the body has more than {limit} bytes (--admin-max-bytes); got {size}+"
        principal, evidence = self.gateway.tokens.evidence(request.headers.get(config.TOKEN_HEADER))
        return self._refuse(request, principal, evidence, 413, reason, started_at, seen)


_PATHS = f"GET {HEALTH_PATH}, POST {RECORDS_PATH}, GET {SPANS_PATH}, GET {CALLS_PATH}"


def _refusal(request: web.BaseRequest) -> tuple[int, str]:
    if request.path == RECORDS_PATH:
        return 403, "only the controller's token may append records"
    if request.path == SPANS_PATH:
        return 403, "only the controller's token may read the run's spans"
    if request.path == CALLS_PATH:
        return 403, "only the controller's token may read the run's calls to peers"
    if request.path == HEALTH_PATH:
        return 405, f"{HEALTH_PATH} takes GET"
    return 404, f"no {request.path} here: the admin listener serves {_PATHS}"


def _problem(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _parse(payload: object) -> list[records.Record] | web.Response:
    items = payload if isinstance(payload, list) else [payload]
    parsed: list[records.Record] = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            return _problem(422, f"record {number} is not a JSON object")
        kind = item.get("kind")
        if kind not in CONTROLLER_KINDS:
            return _problem(
                422, f"record {number}: kind {kind!r} is not one of {sorted(CONTROLLER_KINDS)}"
            )
        fields = {k: v for k, v in item.items() if k not in ("seq", "mac")}
        fields.setdefault("version", records.BASE_VERSION)
        try:
            parsed.append(records.parse_object(fields, number))
        except ledger_errors.RecordError as err:
            return _problem(422, str(err))
    return parsed
