"""Before the first test: is each agent the run needs there at all?

A wrong agent URL used to read as a 100-point regression: every test errored with the same
connection error, cause ``agent``, and the run ended "0 passed … pass rate 0 %". One look
before the first test tells a missing agent from a failing one, and says so as a usage error
naming the URL and the likely fix.

The look is cheap and is never a run of the agent: one ``OPTIONS`` request to the URL the
connector POSTs to (REST v1 and AG-UI: the agent's URL; OpenAI-compatible:
``…/chat/completions``), with the agent's configured headers and none of a run's, made
outside the connector, so it is in no ledger, no exchange count, no token or cost figure.
``OPTIONS`` asks a server what it allows at a path, and every HTTP framework answers it
without running a handler's body: aiohttp, Starlette/FastAPI and Go's method patterns with
405 and an ``Allow`` header, Flask and Express with 200 and ``Allow``, a bare
``http.server`` handler with 501. A subprocess agent (``cmd:PROGRAM``) is checked without
starting it: its program must exist.

What it finds (:func:`check`), each said in one line by :class:`~.errors.AgentAbsent`:

* nothing answers (refused, reset, no such host, TLS refused, no answer within
  :data:`TIMEOUT`): the agent is not running there;
* an ``Allow`` header without ``POST``: the path answers, but not the method every
  connector uses (a health check, a page): not the agent's endpoint;
* ``502``/``503``/``504``: a proxy in front of it answered for an agent it cannot reach.

A ``404`` (or ``410``) to ``OPTIONS`` is only a note, said after the run beside its results:
a server with a catch-all route (an Express app's final 404 middleware, an aiohttp or
Starlette ``/{tail:.*}`` route) answers ``OPTIONS`` with 404 at the very path it serves
``POST`` at, so a 404 cannot tell a wrong path from a working agent; refusing the run on it
would refuse working agents. Anything else (405, 501, 200, 401, 500 …) is an agent that
answers. What an ``OPTIONS`` cannot see either is whether the agent speaks the connector's
protocol: that takes a request body, which would run the agent (its tools, its tokens).

So the first real call finishes the look (:class:`FirstAnswer`): until an agent has
answered one call, an answer whose status says the request was not one it takes (a wrong
path, a REST request at an AG-UI agent: the statuses of :data:`~.wire.LIKELY`) stops the
run as a usage error naming the URL and the likely fix, rather than erroring every test
and reading as a regression. Once the agent has answered a call, such a status is that
test's error (``errored``, cause ``agent``), as any other.
"""

from __future__ import annotations

import asyncio
import http
import os
import shutil
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from agent_health.connectors import base, environment, errors, transport, wire
from agent_health.connectors.base import HTTP_KINDS, ConnectorSpec

if TYPE_CHECKING:
    from agent_health.connectors.protocol import AgentReply, AgentRequest

    Call = Callable[[AgentRequest], Coroutine[Any, Any, AgentReply]]

C = TypeVar("C", bound="Callable[..., Coroutine[Any, Any, Any]]")

TIMEOUT = 30.0
"""Seconds the probe waits for an answer (less when the agent's own ``timeout`` is less): an
agent that cold-starts on its first request still answers within it, a dropped connection
does not keep the run waiting for the agent's whole timeout."""

NOT_SERVED = frozenset({404, 410})
PROXY_ALONE = frozenset({502, 503, 504})
NO_PREFLIGHT = "--no-preflight"


async def check(
    spec: ConnectorSpec, name: str | None = None, *, via: transport.Transport | None = None
) -> str | None:
    """Raise :class:`~.errors.AgentAbsent` when the agent ``spec`` reaches is not there;
    return a note for the run's closing lines when what answered may not be it (a 404).

    ``name`` is the agent's name in the config (or ``None`` for a URL given on the command
    line). A kind that is not built in owns its transport and is not checked.
    """
    if spec.connector == "subprocess":
        await asyncio.to_thread(_check_program, spec, name)  # looks at the file system
        return None
    if spec.connector not in HTTP_KINDS:
        return None
    url = endpoint(spec)
    who = _who(spec, name, url)
    sender = via or transport.AiohttpTransport(spec.uds)
    probe = transport.Request("OPTIONS", url, dict(spec.headers), b"")
    wait = min(TIMEOUT, spec.timeout)
    try:
        async with asyncio.timeout(wait), sender.send(probe) as response:
            status, allow = response.status, response.headers.get("allow")
    except errors.AgentUnreachable as err:
        raise errors.AgentAbsent(
            f"{who} does not answer: {_reason(err)}; start it, or fix the host and port "
            "(checked before the first test; nothing ran)"
        ) from err
    except TimeoutError as err:
        raise errors.AgentAbsent(
            f"{who} did not answer within {wait:g} s: is the host right, or is a firewall "
            "dropping the connection? (checked before the first test; nothing ran)"
        ) from err
    finally:
        if via is None:
            await sender.aclose()
    return _judge(spec, who, url, status, allow)


def endpoint(spec: ConnectorSpec) -> str:
    """The URL the built-in HTTP connector of ``spec`` POSTs each run to."""
    url = wire.require_url(spec, spec.connector)
    if spec.connector == "openai":
        from agent_health.connectors import openai_chat  # the run loads it for its connector

        return openai_chat.endpoint(url)
    return url


def _judge(spec: ConnectorSpec, who: str, url: str, status: int, allow: str | None) -> str | None:
    """What an answer to ``OPTIONS`` says: raise when it says no agent is there, a note when
    it may be the wrong path (see the module docstring), else nothing."""
    allowed = {m.strip().upper() for m in (allow or "").split(",") if m.strip()}
    escape = f" (or pass {NO_PREFLIGHT} if it does answer POST there)"
    if allowed and "POST" not in allowed:
        raise errors.AgentAbsent(
            f"{who} takes {', '.join(sorted(allowed))} there, not POST: this is not the "
            f"agent's endpoint (a health check, a page?); {_path_hint(spec, url)}{escape}"
        )
    if status in PROXY_ALONE:
        raise errors.AgentAbsent(
            f"{who} answered {_status(status)} before the first test: a proxy in front of "
            f"it cannot reach the agent; start it, or point the proxy at it{escape}"
        )
    if status in NOT_SERVED:
        return (
            f"{who} answered {_status(status)} to OPTIONS before the first test: if its calls "
            f"were answered {status} too, nothing is served at this path; "
            f"{_path_hint(spec, url)}"
        )
    return None


def _status(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _path_hint(spec: ConnectorSpec, url: str) -> str:
    if spec.connector == "openai":
        return (
            f"an OpenAI-compatible agent is given by its base URL (openai+http://HOST:PORT/v1) "
            f"and called at BASE/chat/completions, here {errors.without_credentials(url)}"
        )
    return (
        f"a {spec.connector} agent is called at the URL given, path included "
        f"({spec.connector}+http://HOST:PORT/run, if it serves /run)"
    )


def _who(spec: ConnectorSpec, name: str | None, url: str) -> str:
    named = f"agent {name!r} " if name else "the agent "
    return f"{named}({spec.connector}) at {errors.without_credentials(url)}"


def _reason(err: errors.AgentUnreachable) -> str:
    cause = err.__cause__
    inner = getattr(cause, "os_error", None) or cause
    return transport.reason(inner) if inner is not None else str(err)


def _check_program(spec: ConnectorSpec, name: str | None) -> None:
    """A subprocess agent's program exists (and its ``cwd``), without starting it."""
    argv = list(spec.command or ())
    if not argv:
        return  # the connector says what is missing, with its own message
    program = sys.executable if argv[0] in ("python", "python3") else argv[0]
    who = f"agent {name!r}" if name else "the agent"
    if spec.cwd is not None and not os.path.isdir(spec.cwd):
        raise errors.AgentAbsent(
            f"{who} runs in {spec.cwd!r}, which is not a directory; fix its cwd "
            "(checked before the first test; nothing ran)"
        )
    if os.sep in program:
        where = program if spec.cwd is None else os.path.join(spec.cwd, program)
        if not (os.path.isfile(where) and os.access(where, os.X_OK)):
            raise errors.AgentAbsent(
                f"{who}'s command {program!r} is not an executable file; fix the path, or "
                "start it through its interpreter (cmd:python agent.py) "
                "(checked before the first test; nothing ran)"
            )
    elif shutil.which(program, path=_path_of(spec)) is None:
        raise errors.AgentAbsent(
            f"{who}'s command {program!r} is not on PATH; install it, or give its path "
            "(checked before the first test; nothing ran)"
        )


def _path_of(spec: ConnectorSpec) -> str | None:
    """The ``PATH`` the agent's command is looked up in: the one it is started with (its
    config's ``env`` may set it), else agent-health's own."""
    try:
        env = environment.started(spec.env, os.environ)
    except errors.ConnectorError:
        return None  # the connector names what is wrong with its env when it starts it
    return env.get("PATH")


class FirstAnswer:
    """An agent's calls, watched until it answers one: the end of the look before the
    first test (see the module docstring).

    ``stop(reason)`` is told once, when the agent's first answers all say the requests were
    not ones it takes (:data:`~.wire.LIKELY`) and none was answered: the run then starts no
    more tests and ends as a usage error. The call's own error is raised as always.
    """

    def __init__(self, call: Call, who: str, stop: Callable[[str], None]) -> None:
        self._call = call
        self._who = errors.without_credentials(who)
        self._stop = stop
        self.answered = False
        self.misdirected: str | None = None
        # It holds conversations as the connector behind ``call`` does (the SDK asks it).
        held = base.conversations_of(call)
        self.holds_conversations = held is not None
        self.end_conversation = held.end if held is not None else None

    def __call__(self, request: AgentRequest) -> Coroutine[Any, Any, AgentReply]:
        # Once the agent has answered, the call itself, awaited by the caller: no coroutine
        # of ours between a test and its connector (each time the call waited, its wake-up
        # passed through this frame too: every test of a run, issue #40).
        if self.answered:
            return self._call(request)
        return self._first(request)

    async def _first(self, request: AgentRequest) -> AgentReply:
        """The call, until one is answered: a first answer that says the requests are not
        ones the agent takes stops the run."""
        try:
            reply = await self._call(request)
        except errors.AgentHTTPError as err:
            likely = wire.LIKELY.get(err.status)
            if likely is not None and not self.answered and self.misdirected is None:
                self.misdirected = (
                    f"{self._who} answered {_status(err.status)} to the run's first call: "
                    f"{likely} (no more tests were started)"
                )
                self._stop(self.misdirected)
            raise
        self.answered = True
        return reply


def first_answer(
    spec: ConnectorSpec, name: str | None, call: C, stop: Callable[[str], None]
) -> C | FirstAnswer:
    """``call`` watched by :class:`FirstAnswer` when ``spec`` is a built-in HTTP agent (the
    statuses it watches for are those agents' answers); else ``call`` itself."""
    if spec.connector not in HTTP_KINDS:
        return call
    return FirstAnswer(call, _who(spec, name, endpoint(spec)), stop)
