"""The route table: each API route's method, path, role, parameters and answer type, from
which both the application's routing and its OpenAPI document are built — one source, so
the document cannot drift from what is served.

A handler is ``async def handler(state, request, query, body) -> answer``: ``query`` is the
route's query model parsed from the URL (a bad value is one ``400`` line naming the
parameter), ``body`` its request model parsed from JSON, and the answer a value of its
``answer`` type, written as JSON by that type's pydantic serializer. A route without an
``answer`` type writes its own response (Server-Sent Events, a page).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
from aiohttp import web

from agent_health.server import access, errors

Handler = Callable[[Any, web.Request, Any, Any], Awaitable[Any]]
PATH_PARAMETER = re.compile(r"\{(\w+)\}")
MAX_BODY = 1 << 20


class Problem(pydantic.BaseModel):
    """An error answer: one line saying what was wrong and what to do."""

    error: str


@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    role: access.Role | None
    """What the caller needs; ``None``: no credential (the Host and CSRF are still checked)."""
    tag: str
    query: type[pydantic.BaseModel] | None = None
    body: type[pydantic.BaseModel] | None = None
    answer: Any = None
    media: str = "application/json"
    """What a route without an ``answer`` type writes (``text/event-stream``, ``text/html``)."""
    status: int = 200

    @property
    def operation_id(self) -> str:
        return self.handler.__name__.strip("_")


class Table:
    """Routes, declared with :meth:`route` as decorators in the modules that handle them."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self._adapters: dict[int, pydantic.TypeAdapter[Any]] = {}

    def route(
        self,
        method: str,
        path: str,
        *,
        summary: str,
        role: access.Role | None = "read",
        tag: str,
        query: type[pydantic.BaseModel] | None = None,
        body: type[pydantic.BaseModel] | None = None,
        answer: Any = None,
        media: str = "application/json",
        status: int = 200,
    ) -> Callable[[Handler], Handler]:
        def declare(handler: Handler) -> Handler:
            self.routes.append(
                Route(method, path, handler, summary, role, tag, query, body, answer, media, status)
            )
            return handler

        return declare

    def extend(self, other: Table) -> None:
        self.routes.extend(other.routes)

    def adapter(self, route: Route) -> pydantic.TypeAdapter[Any]:
        found = self._adapters.get(id(route))
        if found is None:
            found = self._adapters[id(route)] = pydantic.TypeAdapter(route.answer)
        return found

    def install(self, app: web.Application, state: Any) -> None:
        """Add every route to ``app``, each wrapped to parse its input and write its answer."""
        for route in self.routes:
            app.router.add_route(route.method, route.path, self._wrapped(route, state))

    def _wrapped(self, route: Route, state: Any) -> Callable[[web.Request], Awaitable[Any]]:
        async def serve(request: web.Request) -> web.StreamResponse:
            guards: access.Access = state.access
            view = guard_view(request)
            if route.role is None:
                guards.role_of(view)
                if request.method not in ("GET", "HEAD"):
                    guards.csrf(view)
            else:
                guards.allow(view, route.role)
            query = parse_query(route, request) if route.query is not None else None
            body = await parse_body(route, request) if route.body is not None else None
            answer = await route.handler(state, request, query, body)
            if isinstance(answer, web.StreamResponse):  # a page, a stream, a cookie set
                return answer
            data = self.adapter(route).dump_json(answer, by_alias=True)
            return web.Response(
                body=data, status=route.status, content_type="application/json", charset="utf-8"
            )

        serve.__name__ = route.operation_id
        return serve


def guard_view(request: web.Request) -> access.Request:
    """What the guards read of an aiohttp request."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return access.Request(
        method=request.method,
        host_values=tuple(request.headers.getall("Host", ())),
        port=int(sockname[1]) if sockname else 0,
        headers=request.headers,
        cookies=request.cookies,
        json_body=request.content_type == "application/json",
    )


def parse_query(route: Route, request: web.Request) -> Any:
    assert route.query is not None
    given: dict[str, Any] = {}
    for key in request.query:
        values = request.query.getall(key)
        given[key] = values[-1]
    try:
        return route.query.model_validate(given)
    except pydantic.ValidationError as err:
        raise web.HTTPBadRequest(
            text=problem(f"query: {one_line(err)}"), content_type="application/json"
        ) from err


async def parse_body(route: Route, request: web.Request) -> Any:
    assert route.body is not None
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_BODY, actual_size=request.content_length, text=problem("body too large")
        )
    raw = await request.read()
    try:
        return route.body.model_validate_json(raw or b"{}")
    except pydantic.ValidationError as err:
        raise web.HTTPBadRequest(
            text=problem(f"body: {one_line(err)}"), content_type="application/json"
        ) from err


def one_line(err: pydantic.ValidationError) -> str:
    """A validation error as one line per field: ``field: what is wrong``."""
    parts = []
    for e in err.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"]) or "value"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def problem(text: str) -> str:
    return json.dumps({"error": text})


def answer_error(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=problem(text), content_type="application/json")


def steering_error(err: errors.SteeringError) -> web.Response:
    return answer_error(err.status, str(err))


# -- the OpenAPI document ---------------------------------------------------------------------


def openapi(table: Table, *, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``table``'s routes (their schemas from the same pydantic
    types that parse and serialize them)."""
    components: dict[str, Any] = {"Problem": Problem.model_json_schema()}
    paths: dict[str, Any] = {}
    ref = "#/components/schemas/{model}"

    def schema_of(kind: Any, mode: str = "serialization") -> dict[str, Any]:
        found = pydantic.TypeAdapter(kind).json_schema(ref_template=ref, mode=mode)  # type: ignore[arg-type]
        components.update(found.pop("$defs", {}))
        return found

    for route in table.routes:
        operation: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "tags": [route.tag],
            "x-role": route.role or "none",
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in PATH_PARAMETER.findall(route.path)
            ],
        }
        if route.query is not None:
            shape = schema_of(route.query, "validation")
            required = set(shape.get("required", ()))
            for name, prop in shape.get("properties", {}).items():
                operation["parameters"].append(
                    {
                        "name": name,
                        "in": "query",
                        "required": name in required,
                        "description": prop.get("description", ""),
                        "schema": {k: v for k, v in prop.items() if k != "description"},
                    }
                )
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema_of(route.body, "validation")}},
            }
        if route.answer is not None:
            content = {"application/json": {"schema": schema_of(route.answer)}}
        else:
            content = {route.media: {"schema": {"type": "string"}}}
        problem_ref = {"application/json": {"schema": {"$ref": ref.format(model="Problem")}}}
        operation["responses"] = {
            str(route.status): {"description": route.summary, "content": content},
            "400": {"description": "a parameter or the body is not valid", "content": problem_ref},
            "401": {"description": "no valid credential", "content": problem_ref},
            "403": {"description": "the role does not allow it, or CSRF", "content": problem_ref},
            "404": {"description": "no such thing", "content": problem_ref},
        }
        if route.method != "GET":
            operation["parameters"].append(
                {
                    "name": access.CSRF_HEADER,
                    "in": "header",
                    "required": True,
                    "schema": {"const": "1"},
                    "description": "every change carries it (CSRF)",
                }
            )
        openapi_path = route.path
        paths.setdefault(openapi_path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agent-health serve",
            "version": version,
            "description": "The history of every run, live runs, and starting and steering "
            "them (docs/serve.md).",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": access.SESSION_COOKIE},
            },
        },
        "security": [{"bearer": []}, {"session": []}, {}],
    }
