"""The application: the routes of each part, the guards in front of them, and serving it.

:func:`application` builds the aiohttp application of a :class:`~.state.State`;
:func:`serve` opens the history, starts the live parts and serves until stopped. Every API
route checks its caller before its handler runs (:mod:`.routes`: the Host, the credential
and its role, CSRF for a change — :mod:`.access`); the shell of the pages and its assets
hold no data and check the Host alone. Every answer carries the same security headers.

Why aiohttp: it is a dependency already (kopf runs on it, and the gateway serves on it), so
``serve`` needs no extra and runs from the operator's image; Server-Sent Events are a plain
streamed response; and the OpenAPI document is built from the same pydantic types that
parse and serialize each route (:mod:`.routes`), which is what a framework's generated
document would give.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
from aiohttp import web

from agent_health import history
from agent_health.engine import reports
from agent_health.server import access, errors, pages, reading, routes, state

log = logging.getLogger("agent_health.server")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
own = routes.Table()


class Me(pydantic.BaseModel):
    """Who the caller is to this server."""

    role: access.Role | None = pydantic.Field(description="None: a credential is needed")
    login: bool = pydantic.Field(description="this server takes a token (a page may log in)")
    cluster: bool = pydantic.Field(description="it watches EvaluationRuns")
    local: bool = pydantic.Field(description="it starts local runs")


class Login(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    token: str = pydantic.Field(min_length=1, max_length=4096)


@own.route("GET", "/api/me", summary="the caller's role", tag="session", role=None, answer=Me)
async def me(served: state.State, request: web.Request, _q: None, _b: None) -> Me:
    try:
        role = served.access.role_of(routes.guard_view(request))
    except access.Refused:
        role = None
    return Me(
        role=role,
        login=bool(served.access.tokens),
        cluster=served.cluster is not None,
        local=served.workers is not None,
    )


@own.route(
    "POST",
    "/api/session",
    summary="log a page in with a token (an HttpOnly cookie)",
    tag="session",
    role=None,
    body=Login,
    answer=Me,
)
async def log_in(served: state.State, request: web.Request, _q: None, body: Login) -> Any:
    session, role = served.access.open_session(body.token)
    answer = web.json_response(
        Me(
            role=role,
            login=True,
            cluster=served.cluster is not None,
            local=served.workers is not None,
        ).model_dump()
    )
    answer.set_cookie(
        access.SESSION_COOKIE,
        session,
        httponly=True,
        samesite="Strict",
        path="/",
        secure=request.secure,
        max_age=int(access.SESSION_SECONDS),
    )
    return answer


@own.route(
    "DELETE",
    "/api/session",
    summary="log a page out",
    tag="session",
    role=None,
    media="application/json",
)
async def log_out(served: state.State, request: web.Request, _q: None, _b: None) -> Any:
    served.access.close_session(request.cookies.get(access.SESSION_COOKIE))
    answer = web.json_response({"role": None})
    answer.del_cookie(access.SESSION_COOKIE, path="/")
    return answer


def table(served: state.State) -> routes.Table:
    """Every API route of the parts this server runs."""
    found = routes.Table()
    for part in (reading.table, pages.table, own):
        found.extend(part)
    if served.hub is not None:
        from agent_health.server import live

        found.extend(live.table)
    if served.workers is not None or served.cluster is not None:
        from agent_health.server import steering

        found.extend(steering.table)
    return found


def application(served: state.State) -> web.Application:
    """The aiohttp application of ``served``."""
    app = web.Application(middlewares=[_answered], client_max_size=routes.MAX_BODY)
    routing = table(served)
    routing.install(app, served)
    document = json.dumps(routes.openapi(routing, version=reports.agent_health_version()))

    async def openapi_json(request: web.Request) -> web.Response:
        served.access.allow(routes.guard_view(request), "read")
        return web.Response(text=document, content_type="application/json")

    app.router.add_get("/api/openapi.json", openapi_json)

    async def guarded_page(request: web.Request) -> web.StreamResponse:
        served.access.role_of(routes.guard_view(request))  # the Host alone: no data here
        handler = pages.static if request.path.startswith("/assets/") else pages.shell
        return await handler(request)

    for view in pages.VIEWS:
        app.router.add_get(view, guarded_page)
    app.router.add_get("/assets/{name}", guarded_page)
    return app


@web.middleware
async def _answered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal and error as one JSON line; the security headers on every answer."""
    try:
        response = await handler(request)
    except access.Refused as err:
        response = routes.answer_error(err.status, err.reason)
    except errors.SteeringError as err:
        response = routes.steering_error(err)
    except history.HistoryError as err:
        code = 404 if isinstance(err, history.NotFoundError) else 503
        response = routes.answer_error(code, str(err))
    except web.HTTPException as err:
        if err.content_type == "application/json":
            response = web.Response(status=err.status, text=err.text, content_type=err.content_type)
        else:
            response = routes.answer_error(err.status, err.reason)
    if not response.prepared:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        if "Cache-Control" not in response.headers:
            response.headers["Cache-Control"] = "no-store"
    return response


async def serve(
    settings: state.Settings,
    guards: access.Access,
    *,
    ready: Callable[[str], None] | None = None,
    stop: Any = None,
) -> None:
    """Serve until cancelled (or ``stop``, an :class:`asyncio.Event`, is set): open the
    history, start the live parts, listen; ``ready(url)`` once listening."""
    import asyncio
    import contextlib

    guards.check()
    opened = await asyncio.to_thread(history.open_history, settings.history)
    served = state.State(settings=settings, history=opened, access=guards)
    runner: web.AppRunner | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            await _start_parts(served, stack)
            runner = web.AppRunner(application(served), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, settings.host, settings.port)
            try:
                await site.start()
            except OSError as err:
                raise errors.SettingsError(
                    f"cannot listen on {settings.host}:{settings.port} ({err.strerror or err}); "
                    "pass another --port (0 picks a free one)"
                ) from err
            port = _bound_port(runner)
            served.url = f"http://{access.named(settings.host) or '127.0.0.1'}:{port}"
            if ready is not None:
                ready(served.url)
            await (stop.wait() if stop is not None else asyncio.Event().wait())
    finally:
        if runner is not None:
            await runner.cleanup()
        served.pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(opened.close)


async def _start_parts(served: state.State, stack: Any) -> None:
    """The live hub, the local workers and the cluster's watch, each closed with the server."""
    from agent_health.server import live

    served.hub = live.Hub()
    stack.push_async_callback(served.hub.close)
    from agent_health.server import steering

    served.workers = steering.Workers(served)
    stack.push_async_callback(served.workers.close)
    if served.settings.cluster:
        from agent_health.server import watching

        served.cluster = await watching.Cluster.start(served, served.settings.connection)
        stack.push_async_callback(served.cluster.close)


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise errors.SettingsError("the server is not listening")
