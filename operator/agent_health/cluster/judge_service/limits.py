"""What a cell may ask the judge service for: its RunSpec's models, its token ceiling.

The judge service spends the key of a RunSpec's judge (or the operator's own) on behalf of
a cell's controller — code the tenant wrote. A controller token alone would let that code
ask for any model at any length on that key. So each request is held to its RunSpec's
:class:`Limits` before it reaches a provider:

* the model: ``judge(model=...)`` and a chat call's ``model`` must be ``spec.judge.model``
  or one of ``spec.judge.models`` (the operator's own judge: its one model);
* output tokens per model call: the options ``max_output_tokens`` (and an agentic loop's
  ``max_tokens`` budget, at most :data:`MAX_STEPS` times that) of ``/api/judge``, and
  ``max_tokens`` of ``/api/judge/chat``, at most ``spec.judge.maxTokens``, itself capped by
  the operator's ``--judge-max-tokens``;
* an agentic judge's ``max_steps``: at most :data:`MAX_STEPS`;
* a simulated user's model (``/api/judge/user``), as a judge's.

A request beyond them is answered 422 with what was asked and what is allowed: the test
body gets a usage error (cause ``test``), and nothing is spent.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from agent_health.cluster.api import runspec

MAX_STEPS = 16
"""The most model calls one agentic judge() may make through the judge service."""
DEFAULT_CEILING = 4096
"""The operator's default ``--judge-max-tokens``."""
JUDGE_PATH, CHAT_PATH, USER_PATH = "/api/judge", "/api/judge/chat", "/api/judge/user"
ASKING_PATHS = frozenset({JUDGE_PATH, USER_PATH})
"""The routes whose calls ``agent_health_judge_calls_total`` counts: a verdict, a line."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one RunSpec's cells may ask the judge service for."""

    owner: str
    """Whose limits these are, for messages: ``RunSpec NAMESPACE/NAME``."""
    models: frozenset[str]
    max_tokens: int

    @classmethod
    def of(cls, owner: str, judge: runspec.Judge, ceiling: int) -> Limits:
        """A RunSpec's judge, its ``maxTokens`` capped by the operator's ``ceiling``."""
        return cls(owner, judge.allowed_models(), min(judge.max_tokens, ceiling))

    def problem(self, path: str, body: Any) -> str | None:
        """Why a request to ``path`` with JSON ``body`` asks for more than allowed, or ``None``."""
        if not isinstance(body, dict):
            return None  # the service's own parsing answers 400
        if path == CHAT_PATH:
            return self._model(body.get("model"), "the chat call's model") or self._tokens(
                body.get("max_tokens", 1024), "max_tokens"
            )
        if path == USER_PATH:  # a simulated user's turn: its model, at the judge's length
            return self._model(body.get("model"), "simulated_user(model=...)")
        if path != JUDGE_PATH:
            return None
        options = body.get("options") or {}
        if not isinstance(options, dict):
            return None
        steps = options.get("max_steps")
        if isinstance(steps, int) and steps > MAX_STEPS:
            return f"judge(max_steps={steps}) asks for more than {MAX_STEPS} model calls"
        return (
            self._model(body.get("model"), "judge(model=...)")
            or self._tokens(options.get("max_output_tokens"), "judge(max_output_tokens=...)")
            or self._tokens(options.get("max_tokens"), "judge(max_tokens=...)", MAX_STEPS)
        )

    def _model(self, model: object, what: str) -> str | None:
        if model is None or model in self.models:
            return None
        allowed = ", ".join(sorted(self.models))
        return (
            f"{what} {model!r} is not a model {self.owner} offers its cells ({allowed}); "
            "add it to spec.judge.models"
        )

    def _tokens(self, asked: object, what: str, times: int = 1) -> str | None:
        if not isinstance(asked, int) or asked <= self.max_tokens * times:
            return None
        return (
            f"{what} asks for {asked} tokens; {self.owner} allows {self.max_tokens * times} "
            "(spec.judge.maxTokens, capped by the operator's --judge-max-tokens)"
        )


LimitsOf = Callable[[str | None], Limits | None]
"""A bearer token → the limits of its cell's RunSpec (``None``: not a cell's, or unlimited)."""


def middleware(limits_of: LimitsOf) -> Callable[..., Awaitable[web.StreamResponse]]:
    """An aiohttp middleware holding ``/api/judge`` and ``/api/judge/chat`` requests to
    their cell's :class:`Limits` (422 beyond them). Place it after the service's own
    authentication: it trusts the token to be a live cell's."""

    @web.middleware
    async def limit(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "POST" and request.path in (JUDGE_PATH, CHAT_PATH, USER_PATH):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            limits = limits_of(token.strip() if scheme.lower() == "bearer" else None)
            if limits is not None:
                try:
                    body = json.loads(await request.read())  # kept: the handler reads it again
                except ValueError:
                    body = None
                why = limits.problem(request.path, body)
                if why is not None:
                    return web.json_response({"error": why}, status=422)
        return await handler(request)

    return limit
