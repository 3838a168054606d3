"""A stdio MCP server behind HTTP, so its calls pass the gateway and are recorded.

Most agents launch their MCP servers as commands and talk to them over stdio, where no proxy
sees them. :class:`Bridge` runs such a command and serves it as MCP's Streamable HTTP
transport: a gateway route (``protocol=mcp``) in front of the bridge records every call, as
for any HTTP MCP server, and the agent's configuration changes by one line — the server's
``command`` becomes the ``url`` it is given (docs/agent-protocol.md, "MCP servers")::

    agent-health mcp bridge --listen 127.0.0.1:9000 -- python -m mcp_server_time

Each MCP session is its own process: an ``initialize`` POST starts the command and its
answer carries a new ``Mcp-Session-Id``; later POSTs name it, ``DELETE`` ends it (and the
process), and a client of the stateless protocol (no ``initialize``) shares one process. At
most ``max_sessions`` run at once (503 past it). Requests are renumbered on their way to the
process, so a client that reuses an id still gets each answer to its own request; what the
process sends of its own (notifications, requests) goes to the open stream of that session.
Each line the process prints is read as one JSON-RPC message, at most
``max_line_bytes`` long: a longer one is dropped, and the request it answered gets an error
saying so; a line that is not JSON is logged and skipped. A process that exits fails its
pending requests with its last line of standard error.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import secrets
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from aiohttp import web

from agent_health.ledger import strictjson
from agent_health.peers import errors, streamable

log = logging.getLogger("agent_health.peers")
STATELESS = ""
"""The session key of a client that sent no session id and no ``initialize``."""
_STDERR_LINES = 20


_Stream = asyncio.Queue[tuple[bool, streamable.Message] | None]
"""What one open event stream is sent: (is it an answer, the message); None: the process ended."""


@dataclass
class _Pending:
    """A client request the process has not answered yet."""

    id: Any
    answer: asyncio.Future[streamable.Message]


@dataclass
class _Session:
    """One process and what waits on it."""

    id: str
    process: asyncio.subprocess.Process
    pending: dict[int, _Pending] = field(default_factory=dict)
    streams: list[_Stream] = field(default_factory=list)
    stderr: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=_STDERR_LINES)
    )
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one write to stdin at a time
    exited: str | None = None


class Bridge:
    """``command`` served over Streamable HTTP, one process per MCP session."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        max_sessions: int = 16,
        max_line_bytes: int = 16 * 1024 * 1024,
        timeout: float = 300.0,
        token: str | None = None,
    ) -> None:
        """``env``: the command's whole environment (``None``: the bridge's own); ``token``:
        serve only calls that carry it (a peer in a cell: the gateway's)."""
        if not command:
            raise errors.PeerConfigError("the bridge needs the MCP server's command")
        self.command = list(command)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.max_sessions = max_sessions
        self.max_line_bytes = max_line_bytes
        self.timeout = timeout
        self.token = token
        self._sessions: dict[str, _Session] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    # -- serving ----------------------------------------------------------------------------

    def app(self) -> web.Application:
        guard: list[Any] = [streamable.only_via_gateway(self.token)] if self.token else []
        app = web.Application(client_max_size=streamable.MAX_BODY, middlewares=guard)
        app.router.add_post("/{tail:.*}", self._post)
        app.router.add_get("/{tail:.*}", self._get)
        app.router.add_delete("/{tail:.*}", self._delete)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0, path: str = "/mcp") -> str:
        """Serve on ``host:port`` (0: a free port); the URL the agent is given."""
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as err:
            await self._runner.cleanup()
            raise errors.PeerConfigError(
                f"the bridge cannot listen on {host}:{port}: {err.strerror or err}"
            ) from err
        bound: Any = self._runner.addresses[0]
        self.url = f"http://{host}:{bound[1]}{path}"
        return self.url

    async def stop(self) -> None:
        """Stop serving and end every session's process."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.gather(*(self._end(s) for s in list(self._sessions.values())))

    async def __aenter__(self) -> Bridge:
        if self.url is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the transport --------------------------------------------------------------------

    async def _post(self, request: web.Request) -> web.StreamResponse:
        try:
            posted = await streamable.read(request)
            session, created = await self._session_of(request, posted)
        except streamable.Refused as refused:
            return refused.response
        headers = {streamable.SESSION_HEADER: session.id} if created and session.id else {}
        waits: list[tuple[Any, asyncio.Future[streamable.Message]]] = []
        lines: list[bytes] = []
        for message in posted.messages:
            if "id" in message and "method" in message:
                ours = next(self._ids)
                answer: asyncio.Future[streamable.Message] = (
                    asyncio.get_running_loop().create_future()
                )
                session.pending[ours] = _Pending(message["id"], answer)
                waits.append((message["id"], answer))
                message = {**message, "id": ours}
            lines.append(json.dumps(message).encode() + b"\n")
        if not await self._write(session, b"".join(lines)):
            for _, answer in waits:
                answer.cancel()
            why = f"the MCP server's process has exited: {session.exited}"
            return web.json_response(
                streamable.error(None, mcp_types.INTERNAL_ERROR, why), status=502
            )
        if not waits:
            return web.Response(status=202, headers=headers)
        if not streamable.wants_stream(request):
            answers = [await self._answer(session, id, answer) for id, answer in waits]
            return streamable.json_answer(answers, batch=posted.batch, headers=headers)
        response = await streamable.stream_start(request, headers)
        queue: _Stream = asyncio.Queue(maxsize=256)
        session.streams.append(queue)

        async def deliver(id: Any, answer: asyncio.Future[streamable.Message]) -> None:
            await queue.put((True, await self._answer(session, id, answer)))

        delivering = [asyncio.create_task(deliver(id, answer)) for id, answer in waits]
        left = len(waits)
        try:
            while left:
                item = await queue.get()
                if item is None:
                    continue  # the process exited: its answers (errors) are on their way
                answered, message = item
                await response.write(streamable.event(message))
                left -= answered
            await response.write_eof()
        except ConnectionError:
            pass  # the client left; its answers are dropped as they come
        finally:
            session.streams.remove(queue)
            for task in delivering:
                task.cancel()
        return response

    async def _get(self, request: web.Request) -> web.StreamResponse:
        """The stream of what the server says unasked (notifications, its own requests)."""
        session = self._sessions.get(request.headers.get(streamable.SESSION_HEADER, STATELESS))
        if session is None or not streamable.wants_stream(request):
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        response = await streamable.stream_start(request, {})
        queue: _Stream = asyncio.Queue(maxsize=256)
        session.streams.append(queue)
        try:
            while (item := await queue.get()) is not None:
                await response.write(streamable.event(item[1]))
        except ConnectionError:
            pass
        finally:
            session.streams.remove(queue)
        return response

    async def _delete(self, request: web.Request) -> web.Response:
        session = self._sessions.get(request.headers.get(streamable.SESSION_HEADER) or "\0")
        if session is None:
            return web.Response(status=404)
        await self._end(session)
        return web.Response(status=200)

    async def _session_of(
        self, request: web.Request, posted: streamable.Posted
    ) -> tuple[_Session, bool]:
        """The POST's session: a new one for ``initialize``, else the one it names."""
        named = request.headers.get(streamable.SESSION_HEADER)
        if any(m.get("method") == "initialize" for m in posted.requests):
            return await self._open(secrets.token_hex(16)), True
        if named:
            session = self._sessions.get(named)
            if session is None:
                raise streamable.refusal(
                    404, mcp_types.INVALID_REQUEST, f"no session {named!r}: initialize again"
                )
            return session, False
        if STATELESS in self._sessions:
            return self._sessions[STATELESS], False
        return await self._open(STATELESS), False

    async def _open(self, id: str) -> _Session:
        if len(self._sessions) >= self.max_sessions:
            raise streamable.refusal(
                503,
                mcp_types.INTERNAL_ERROR,
                f"{self.max_sessions} sessions are open (the bridge's --max-sessions)",
            )
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                limit=self.max_line_bytes,
                start_new_session=True,
            )
        except OSError as err:
            raise streamable.refusal(
                502,
                mcp_types.INTERNAL_ERROR,
                f"cannot start the MCP server {self.command[0]!r}: {err.strerror or err}",
            ) from err
        session = _Session(id, process)
        session.tasks = [
            asyncio.create_task(self._read_stdout(session)),
            asyncio.create_task(self._read_stderr(session)),
        ]
        self._sessions[id] = session
        return session

    async def _write(self, session: _Session, data: bytes) -> bool:
        stdin = session.process.stdin
        if session.exited is not None or stdin is None:
            return False
        async with session.lock:
            try:
                stdin.write(data)
                await stdin.drain()
            except (ConnectionError, RuntimeError):
                return False
        return True

    async def _answer(
        self, session: _Session, id: Any, answer: asyncio.Future[streamable.Message]
    ) -> streamable.Message:
        """The process's answer with the client's id back in place (an error if none)."""
        try:
            async with asyncio.timeout(self.timeout):
                message = await answer
        except TimeoutError:
            for ours, waiting in list(session.pending.items()):
                if waiting.answer is answer:
                    del session.pending[ours]
            return streamable.error(
                id, mcp_types.REQUEST_TIMEOUT, f"no answer within {self.timeout:g} s"
            )
        return {**message, "id": id}

    # -- the process ------------------------------------------------------------------------

    async def _read_stdout(self, session: _Session) -> None:
        stdout = session.process.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as err:
                if err.partial.strip():
                    self._said(session, err.partial)
                break
            except asyncio.LimitOverrunError:
                await self._skip_line(session, stdout)
                continue
            except (ConnectionError, ValueError):
                break
            self._said(session, line)
        await session.process.wait()
        why = session.stderr[-1] if session.stderr else f"exit status {session.process.returncode}"
        session.exited = why
        for waiting in session.pending.values():
            if not waiting.answer.done():
                waiting.answer.set_result(
                    streamable.error(None, mcp_types.INTERNAL_ERROR, f"the server exited: {why}")
                )
        session.pending.clear()
        for queue in session.streams:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)

    async def _skip_line(self, session: _Session, stdout: asyncio.StreamReader) -> None:
        """A line past ``max_line_bytes``: dropped; the one request waiting gets an error."""
        while True:
            try:
                await stdout.readuntil(b"\n")
                break
            except asyncio.LimitOverrunError as err:
                await stdout.readexactly(err.consumed)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
        log.warning(
            "MCP server %s printed a line over %d bytes: dropped",
            self.command[0],
            self.max_line_bytes,
        )
        if len(session.pending) == 1:
            ours, waiting = session.pending.popitem()
            if not waiting.answer.done():
                waiting.answer.set_result(
                    streamable.error(
                        ours,
                        mcp_types.INTERNAL_ERROR,
                        f"the server's answer is over {self.max_line_bytes} bytes (the "
                        "bridge's --max-line-bytes)",
                    )
                )

    def _said(self, session: _Session, line: bytes) -> None:
        try:
            message = strictjson.loads(line, max_depth=strictjson.FAST_DEPTH)
        except ValueError as err:
            log.warning("MCP server %s printed a line that is not JSON (%s)", self.command[0], err)
            return
        if not isinstance(message, dict):
            return
        if "method" not in message and ("result" in message or "error" in message):
            ours = message.get("id")
            waiting = session.pending.pop(ours, None) if isinstance(ours, int) else None
            if waiting is not None and not waiting.answer.done():
                waiting.answer.set_result(message)
            return
        # Unasked: to the newest stream open for the session, else it is not delivered (a
        # client that wants it keeps a GET stream open).
        if session.streams:
            with contextlib.suppress(asyncio.QueueFull):
                session.streams[-1].put_nowait((False, message))

    async def _read_stderr(self, session: _Session) -> None:
        stderr = session.process.stderr
        assert stderr is not None
        while True:
            try:
                line = await stderr.readline()
            except (ValueError, ConnectionError):
                continue
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                session.stderr.append(text[:500])

    async def _end(self, session: _Session) -> None:
        self._sessions.pop(session.id, None)
        process = session.process
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            async with asyncio.timeout(2):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(3):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        for task in session.tasks:
            task.cancel()
        await asyncio.gather(*session.tasks, return_exceptions=True)
