"""The judge service: judge() calls from cells, answered where the credentials and cache live.

In a cluster the operator serves this app; a cell holds no LLM credentials and reaches it
through its gateway. Each request's bearer token is resolved to the backend that answers
it (:func:`serving`; the operator answers each cell with its own RunSpec's judge), or to
``None`` — 401. :func:`app` is the simple case: one backend for every token ``authorize``
accepts. A resolver that will not judge for a known caller raises
:class:`~agent_health.judging.errors.NotServed`: 403 with the message. A resolver that
cannot build the backend (e.g. its key Secret is missing) raises a
:class:`~agent_health.judging.errors.JudgingError`: 502 with the message, which the
cell records as an ``errored`` verdict. Four routes:

* ``POST /api/judge`` — a :class:`~agent_health.judging.wire.WireJudgeRequest` → a Verdict
  (contextual and agentic modes, through the shared cache);
* ``POST /api/judge/chat`` — one model call for a custom evaluator's ``llm`` helper running
  in the cell (no cache: the evaluator's own call is cached by its caller);
* ``POST /api/judge/ask`` — ``{"text", "system"?}`` → ``{"text"}``: a free-form question
  to the judge model through the shared cache (a cell's insights ``llm``);
* ``POST /api/judge/user`` — a :class:`~agent_health.sdk.simulated.UserAsk` → a
  :class:`~agent_health.sdk.simulated.UserLine`: what a cell's simulated user says next,
  through the shared cache.

A usage error in the request (unknown tool pack, bad option) answers 422 with the message;
the client raises it into the test. A provider failure is an ``errored`` verdict (200).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pydantic
from aiohttp import web

from agent_health.judging import chat, dispatch, errors, wire
from agent_health.judging.providers import Provider
from agent_health.sdk import simulated

Authorize = Callable[[str | None], bool]
Resolve = Callable[[str | None], Awaitable[dispatch.Judging | None]]
"""A bearer token (``None``: none sent) → the backend answering it, or ``None`` (401)."""
Spent = Callable[[str | None, int, int], None]
"""Told, per answered call, the caller's bearer token and the model tokens (in, out) it
spent (cache hits spend none): the operator meters each run's judge spend (``spec.budget``)."""
RESOLVE: web.AppKey[Resolve] = web.AppKey("resolve")
SPENT: web.AppKey[Spent | None] = web.AppKey("spent")
RESOLVED = web.RequestKey("judging", dispatch.Judging)
MAX_BODY = 32 * 1024 * 1024


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


@web.middleware
async def _auth(
    request: web.Request, handler: Callable[[web.Request], object]
) -> web.StreamResponse:
    if request.path.startswith("/api/"):
        try:
            judging = await request.app[RESOLVE](_token(request))
        except errors.NotServed as err:
            return web.json_response({"error": str(err)}, status=403)
        except errors.JudgingError as err:
            return web.json_response({"error": str(err)}, status=502)
        if judging is None:
            return web.json_response(
                {"error": "the judge service accepts only the controller's token"}, status=401
            )
        request[RESOLVED] = judging
    response = await handler(request)  # type: ignore[misc]
    assert isinstance(response, web.StreamResponse)
    return response


async def _judge(request: web.Request) -> web.Response:
    try:
        call = wire.WireJudgeRequest.model_validate_json(await request.read())
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return web.json_response(
            {"error": f"bad judge request: {where}: {first['msg']}"}, status=400
        )
    try:
        verdict = await judging_of(request)(call.request())
    except errors.UsageError as err:
        return web.json_response({"error": str(err)}, status=422)
    if not verdict.cached:
        _spent(request, verdict.input_tokens, verdict.output_tokens)
    return web.json_response(text=verdict.model_dump_json())


def _spent(request: web.Request, tokens_in: int, tokens_out: int) -> None:
    spent = request.app.get(SPENT)
    if spent is not None and (tokens_in or tokens_out):
        spent(_token(request), tokens_in, tokens_out)


async def _chat(request: web.Request) -> web.Response:
    provider: Provider | None = judging_of(request).provider
    if provider is None:
        return web.json_response(
            {"error": "no judge model is configured on the judge service"}, status=409
        )
    try:
        call = wire.chat_from_json(await request.json())
    except (ValueError, KeyError, TypeError) as err:
        return web.json_response({"error": f"bad chat request: {err}"}, status=400)
    try:
        completion: chat.Completion = await provider(call)
    except errors.JudgingError as err:
        return web.json_response({"error": str(err)}, status=502)
    _spent(request, completion.input_tokens, completion.output_tokens)
    return web.json_response(wire.completion_to_json(completion))


async def _ask(request: web.Request) -> web.Response:
    """One free-form question to the judge model, through the shared cache (a cell's
    insights ``llm`` and anything else that asks in words rather than for a verdict)."""
    judging = judging_of(request)
    try:
        body = await request.json()
        text, system = body["text"], body.get("system", "")
        if not isinstance(text, str) or not isinstance(system, str):
            raise TypeError("text and system must be strings")
    except (ValueError, KeyError, TypeError) as err:
        return web.json_response({"error": f"bad ask request: {err}"}, status=400)
    try:
        answer = await judging.ask(text, system=system)
    except errors.NoJudgeModel as err:
        return web.json_response({"error": str(err)}, status=409)
    except errors.JudgingError as err:
        return web.json_response({"error": str(err)}, status=502)
    return web.json_response({"text": answer})


async def _user(request: web.Request) -> web.Response:
    """What a cell's simulated user says next, from the judge model through the shared
    cache (metered as judge spend, as a verdict is)."""
    try:
        ask = simulated.UserAsk.model_validate_json(await request.read())
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return web.json_response(
            {"error": f"bad simulated-user request: {where}: {first['msg']}"}, status=400
        )
    try:
        line = await judging_of(request).simulate(ask)
    except errors.UsageError as err:
        return web.json_response({"error": str(err)}, status=422)
    if not line.cached:
        _spent(request, line.input_tokens, line.output_tokens)
    return web.json_response(text=line.model_dump_json())


async def _healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def judging_of(request: web.Request) -> dispatch.Judging:
    """The backend the request's token resolved to (for middlewares inside the service's)."""
    return request[RESOLVED]


def serving(resolve: Resolve, spent: Spent | None = None) -> web.Application:
    """The judge service answering each token with the backend ``resolve`` gives for it;
    ``spent`` is told what each answered call spent."""
    application = web.Application(middlewares=[_auth], client_max_size=MAX_BODY)
    application[RESOLVE] = resolve
    application[SPENT] = spent
    application.router.add_post("/api/judge", _judge)
    application.router.add_post("/api/judge/chat", _chat)
    application.router.add_post("/api/judge/ask", _ask)
    application.router.add_post("/api/judge/user", _user)
    application.router.add_get("/healthz", _healthz)
    return application


def app(judging: dispatch.Judging, authorize: Authorize) -> web.Application:
    """The judge service with one backend for every token ``authorize`` accepts."""

    async def resolve(token: str | None) -> dispatch.Judging | None:
        return judging if authorize(token) else None

    return serving(resolve)
