"""The ``agent`` fixture: ``await agent.run(prompt)`` is the only way an agent runs."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import pydantic

from agent_health import connectors, timeouts
from agent_health.connectors.protocol import AgentRequest, ContextItem, FileItem, ToolDefinition
from agent_health.sdk import context as ctx_mod
from agent_health.sdk import conversation, errors
from agent_health.sdk.results import RunResult

_NOT_IN_TRACESTATE = re.compile(r"[^A-Za-z0-9_.-]")
"""What a run id loses in the ``tracestate``: all but ASCII letters, digits, ``-_.``."""


def traceparent() -> str:
    """A new W3C ``traceparent`` (version 00, sampled)."""
    ids = os.urandom(24).hex()  # the trace id and the parent id, from one read of the OS
    return f"00-{ids[:32]}-{ids[32:]}-01"


def tracestate(run_id: str) -> str:
    """The W3C ``tracestate`` sent beside the traceparent: ``agent-health=<run id>``, so that
    whatever the agent calls on with the trace context can be told to this run."""
    # A run id of ASCII letters and digits (the ids a run makes: 32 hex digits) loses
    # nothing: the pattern is asked only of others (a cell's id, a replay's).
    kept = run_id if run_id.isascii() and run_id.isalnum() else _NOT_IN_TRACESTATE.sub("", run_id)
    return f"agent-health={kept[:200]}"


def _context_items(
    value: Sequence[Mapping[str, str] | ContextItem] | None, test: str
) -> tuple[ContextItem, ...]:
    items = []
    for i, item in enumerate(value or ()):
        if isinstance(item, ContextItem):
            items.append(item)
            continue
        if not isinstance(item, Mapping) or "value" not in item:
            raise errors.AgentRunError(
                f"test {test!r}: context[{i}] must be {{'description': ..., 'value': ...}}, "
                f"got {item!r}"
            )
        items.append(
            ContextItem(description=str(item.get("description", "")), value=str(item["value"]))
        )
    return tuple(items)


def _files(value: Mapping[str, str | bytes] | None, test: str) -> tuple[FileItem, ...]:
    """``files={"relative/path": text or bytes}`` as wire items; a bad path or value is an
    error naming it (an agent that writes the files must never be steered outside its dir)."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise errors.AgentRunError(
            f"test {test!r}: agent.run(files=...) takes a mapping of relative path to "
            f"content, got {type(value).__name__}"
        )
    items = []
    for path, content in value.items():
        where = f"test {test!r}: agent.run(files=...) entry {path!r}"
        if not isinstance(path, str) or not path.strip():
            raise errors.AgentRunError(f"{where}: a path must be a non-empty string")
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts or "\\" in path or path.startswith("~"):
            raise errors.AgentRunError(
                f"{where}: use a relative path inside the agent's files (no leading '/', "
                "'~', '..' or backslashes)"
            )
        if isinstance(content, bytes):
            encoded = base64.b64encode(content).decode("ascii")
            items.append(FileItem(path=str(pure), content=encoded, encoding="base64"))
        elif isinstance(content, str):
            items.append(FileItem(path=str(pure), content=content))
        else:
            raise errors.AgentRunError(
                f"{where}: content must be str or bytes, got {type(content).__name__}"
            )
    return tuple(items)


def _provisioned(value: Mapping[str, Any] | None, test: str) -> dict[str, Any]:
    """``provisioned={...}``: structured values for the agent, which must be plain JSON."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise errors.AgentRunError(
            f"test {test!r}: agent.run(provisioned=...) takes a mapping of name to JSON "
            f"value, got {type(value).__name__}"
        )
    plain: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise errors.AgentRunError(
                f"test {test!r}: agent.run(provisioned=...) keys must be strings, got {key!r}"
            )
        try:
            # Round-trip: the agent receives exactly what JSON can carry, nothing shared.
            plain[key] = json.loads(json.dumps(item, allow_nan=False))
        except (TypeError, ValueError) as err:
            raise errors.AgentRunError(
                f"test {test!r}: agent.run(provisioned=...) value {key!r} is not plain JSON "
                f"(dicts, lists, str, numbers, bools, None): {err}"
            ) from err
    return plain


def _tools(
    value: Sequence[Mapping[str, Any] | ToolDefinition] | None, test: str
) -> tuple[ToolDefinition, ...]:
    """``tools=[{"name", "description", "parameters"}]`` as wire items; a bad one is an
    error naming it."""
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise errors.AgentRunError(
            f"test {test!r}: agent.run(tools=...) takes a list of tool definitions "
            f'{{"name", "description", "parameters"}}, got {type(value).__name__}'
        )
    items = []
    for i, item in enumerate(value):
        if isinstance(item, ToolDefinition):
            items.append(item)
            continue
        try:
            items.append(ToolDefinition.model_validate(item))
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise errors.AgentRunError(
                f"test {test!r}: agent.run(tools=...)[{i}]"
                f"{'.' + where if where else ''}: {first['msg']} (a tool definition is "
                '{"name": str, "description": str, "parameters": JSON schema object})'
            ) from err
    return tuple(items)


class Agent:
    """Runs the agent under test, once per test."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ctx_mod.TestContext) -> None:
        self._ctx = ctx

    async def run(
        self,
        prompt: str | None = None,
        *,
        context: Sequence[Mapping[str, str] | ContextItem] | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str | bytes] | None = None,
        provisioned: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any] | ToolDefinition] | None = None,
        timeout: float | None = None,
        turns: Sequence[str] | None = None,
        user: conversation.User | None = None,
        max_turns: int | None = None,
    ) -> RunResult:
        """Send ``prompt`` (or the test's ``default_prompt``) and return what the agent did.

        ``env`` (string → string), ``files`` (relative path → text or bytes) and
        ``provisioned`` (name → any JSON value) provision the run: each connector passes
        them to the agent as docs/agent-protocol.md says (REST: fields of the request body).
        ``tools`` (``[{"name", "description", "parameters"}]``) are the tool definitions the
        client offers the agent; each connector sends them in its protocol's form.
        A second call in the same test raises: one test is one run of the agent.

        ``turns`` (follow-up messages, sent in order) or ``user`` (a function of the
        conversation so far returning the next message, or ``Stop()`` / ``None``; a simulated
        user) make the run a conversation of up to ``max_turns`` turns: ``result.turns`` has
        each, ``result.output`` is the last answer and ``result.ended`` says why it ended.
        ``timeout`` bounds each turn.
        """
        ctx = self._ctx
        case = ctx.case
        if ctx.prompt_sent is not None:
            raise errors.AgentRunError(
                f"test {case.title!r} called agent.run() a second time; a test runs the "
                "agent once (split it into two tests, or use --repeat)"
            )
        text = prompt if prompt is not None else case.default_prompt
        if text is None:
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run() got no prompt and the test has no default_prompt"
            )
        if not isinstance(text, str):
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run() prompt must be a string, got "
                f"{type(text).__name__}"
            )
        if ctx.agent_caller is None:
            raise errors.AgentRunError(
                "no agent to run: pass --agent NAME|URL or set default_agent in "
                "agent-health.config.py"
            )
        # Each part the call gives is checked; one it leaves out (most calls: a prompt
        # alone) is not looked at, its empty value given as the checks would make it.
        given = context if context is not None else case.context
        items = _context_items(given, case.title) if given else ()
        bad_env = (
            [k for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)]
            if env
            else []
        )
        if bad_env:
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run(env=...) maps strings to strings; "
                f"{bad_env[0]!r} is not (pass structured values as provisioned=...)"
            )
        wrong = timeouts.problem(timeout) if timeout is not None else None
        if wrong is not None:
            raise errors.AgentRunError(f"test {case.title!r}: agent.run(timeout=...) {wrong}")
        file_items = _files(files, case.title) if files is not None else ()
        values = _provisioned(provisioned, case.title) if provisioned is not None else {}
        offered = _tools(tools, case.title) if tools is not None else ()
        follow_ups = conversation.scripted(turns, case.title) if turns is not None else ()
        if user is not None and not callable(user):
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run(user=...) takes a function of the "
                f"conversation so far (or a simulated user), got {type(user).__name__}"
            )
        talking = bool(follow_ups) or user is not None
        if max_turns is not None and not talking:
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run(max_turns=...) limits a conversation; give "
                "it turns=[...] or user=... too"
            )
        if max_turns is None and user is not None:  # a simulated user may bring its own
            max_turns = getattr(user, "max_turns", None)
        # A single run is one turn (max_turns without a conversation was refused above).
        limit = (
            conversation.turn_limit(max_turns, len(follow_ups), user, case.title) if talking else 1
        )
        holder = conversation.support(ctx.agent_caller) if talking else None
        if talking and holder is None:
            raise errors.AgentRunError(
                f"test {case.title!r}: agent.run(turns=... / user=...) needs an agent that "
                "holds a conversation, and this agent's connector does not (a connector of "
                "your own sets holds_conversations = True and reads request.messages: "
                "docs/agent-protocol.md#conversations)"
            )
        prepare = getattr(user, "before_conversation", None)
        if prepare is not None:  # a simulated user that cannot speak skips the test here
            prepare(ctx)
        ctx.prompt_sent = text
        request = AgentRequest(
            prompt=text,
            context=items,
            run_id=ctx.info.run_id,
            env=dict(env or {}),
            files=file_items,
            provisioned=values,
            tools=offered,
            traceparent=traceparent(),
            tracestate=tracestate(ctx.info.run_id),
            timeout_s=timeout,
            conversation=talking,
        )
        ctx.traceparent = request.traceparent
        if holder is not None:
            return await conversation.converse(ctx, request, holder, follow_ups, user, limit)
        started = time.perf_counter()
        began = time.time()
        try:
            with ctx.waiting("agent"):
                reply = await ctx.agent_caller(request)
        except Exception as err:
            ctx.agent_error = str(err) or type(err).__name__
            if isinstance(err, connectors.AgentTimeout):
                ctx.partial = err.partial  # how far the agent got, for the result
            raise
        finally:
            ctx.agent_window = (began, time.time())
        duration_ms = (time.perf_counter() - started) * 1000
        if ctx.replayed_duration_ms is not None:  # answered from a recording (--replay)
            duration_ms = ctx.replayed_duration_ms
        result = RunResult(
            run_id=request.run_id,
            prompt=text,
            context=items,
            output=reply.output,
            trajectory=reply.trajectory,
            token_usage=reply.token_usage,
            duration_ms=duration_ms,
            raw=reply.extra_fields(),
            traceparent=request.traceparent,
            unreported=reply.unreported,
        )
        ctx.result = result
        return result
