"""The admin listener: ``GET /healthz`` and ``POST /ledger/records`` (the controller's records).

``/healthz`` answers 200 while the gateway serves and every ledger write succeeded, else 503,
with a JSON summary (routes, exchanges recorded, the last ledger failures).

``/ledger/records`` is how a cell's controller, which holds no ledger key, appends its
``run-result``, ``signal`` and ``cell-end`` records to the gateway's cell: a JSON list of
records without ``seq`` and ``mac``, sent with the controller's token in
``X-Agent-Health-Token``. Any other caller gets 403; exchanges and cell-meta are the
gateway's own and are refused (422).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from agent_health.gateway import config
from agent_health.ledger import errors as ledger_errors
from agent_health.ledger import records

if TYPE_CHECKING:
    from agent_health.gateway.server import Gateway

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway")
CONTROLLER_KINDS = frozenset({"run-result", "signal", "cell-end"})
MAX_RECORDS_BYTES = 16 * 1024 * 1024


def application(gateway: Gateway) -> web.Application:
    """The admin app of ``gateway``."""
    app = web.Application(client_max_size=MAX_RECORDS_BYTES)
    app[GATEWAY] = gateway
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/ledger/records", append_records)
    return app


async def healthz(request: web.Request) -> web.Response:
    ok, body = request.app[GATEWAY].health()
    return web.json_response(body, status=200 if ok else 503)


def _problem(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


async def append_records(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    who = gateway.tokens.identify(request.headers.get(config.TOKEN_HEADER))
    if who is None or who[0] != "controller":
        return _problem(403, "only the controller's token may append records")
    cell = gateway.settings.cell
    if gateway.recorder is None or cell is None:
        return _problem(409, "this gateway records no cell (start it with --ledger and --cell)")
    try:
        payload = json.loads(await request.read())
    except ValueError as err:
        return _problem(400, f"the body is not JSON: {err}")
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
        fields.setdefault("version", records.VERSION)
        try:
            parsed.append(records.parse_object(fields, number))
        except ledger_errors.RecordError as err:
            return _problem(422, str(err))
    try:
        sealed = await gateway.recorder.append(cell, *parsed, wait=gateway.settings.grace)
    except ledger_errors.ChainError as err:
        return _problem(409, str(err))
    except ledger_errors.LedgerError as err:
        return _problem(503, f"the ledger failed: {err}")
    return web.json_response(
        {"cell": cell, "appended": len(sealed), "seqs": [r.seq for r in sealed]}
    )
