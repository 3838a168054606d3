"""Run the agent as a command, once per ``agent.run()`` (``--agent cmd:PROGRAM ARGS``).

The command starts in its own process group with the REST v1 request JSON on stdin, in
an environment of its own (:mod:`.environment`: an allow-list of agent-health's, and the
spec's ``env``); the
prompt is also in ``$AGENT_HEALTH_PROMPT`` (and the run id in ``$AGENT_HEALTH_RUN_ID``,
the W3C trace context in ``$TRACEPARENT``, ``agent.run(env=...)`` as variables of their
own, ``provisioned=`` as JSON in ``$AGENT_HEALTH_PROVISIONED``, ``tools=`` as JSON in
``$AGENT_HEALTH_TOOLS``). ``agent.run(files=...)``
are written into a fresh directory named by ``$AGENT_HEALTH_FILES_DIR``, removed when the
run ends. Its stdout is either

* one REST protocol v1 JSON answer (``{"output": ..., "trajectory": [...], ...}``), or
* JSON lines: one step per line (``{"type": "tool_call", ...}``) and a final
  ``{"output": ..., "token_usage"?: {...}}`` line.

A conversation (``agent.run(turns=...)``) keeps one process for all its turns and talks
to it one line at a time: :mod:`.talks`.

A non-zero exit is :class:`~errors.AgentRunFailed` and a run past the timeout is
:class:`~errors.AgentTimeout` (the whole process group is killed; it keeps the stdout so
far, :mod:`.partial`); both quote the end of stderr. A cancelled run kills its process
group too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pydantic

from agent_health.connectors import environment, errors, partial, wire
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentReply, AgentRequest, Step
from agent_health.connectors.subprocess import talks
from agent_health.ledger import strictjson

TERM_GRACE_S = 2.0
"""How long a timed-out command may take to exit after SIGTERM before it gets SIGKILL."""


class SubprocessConnector:
    """Starts ``spec.command`` for each run and reads its answer from stdout."""

    holds_conversations = True

    def __init__(self, spec: ConnectorSpec) -> None:
        if not spec.command:
            raise errors.ConnectorConfigError(
                "the subprocess connector needs a command: --agent 'cmd:PROGRAM ARGS' or "
                '{"connector": "subprocess", "command": [...]} in the config'
            )
        argv = list(spec.command)
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the interpreter agent-health runs in
        self.argv = argv
        self.name = wire.snippet(shlex.join(spec.command), 80)
        self.spec = spec
        self._live: set[asyncio.subprocess.Process] = set()
        self._talks = talks.Talks()

    async def run(self, request: AgentRequest) -> AgentReply:
        if request.conversation:
            return await self._turn(request)
        if not request.files:
            return await self._run(request, None)
        where = await asyncio.to_thread(_materialise, request)
        try:
            return await self._run(request, where)
        finally:
            await asyncio.to_thread(shutil.rmtree, where, True)

    async def _turn(self, request: AgentRequest) -> AgentReply:
        """One turn of a conversation: the first starts the command, the others write to it."""
        timeout = wire.timeout_of(request, self.spec)
        talk = self._talks.get(request.run_id)
        if talk is None:
            if request.turn != 1:
                raise errors.ConnectorConfigError(
                    f"turn {request.turn} of run {request.run_id} has no conversation to join "
                    "(it ended, or its first turn never started the command)"
                )
            files_dir = None
            if request.files:
                files_dir = await asyncio.to_thread(_materialise, request)
            try:
                proc = await self._start(request, files_dir, conversation=True)
            except BaseException:
                if files_dir is not None:
                    await asyncio.to_thread(shutil.rmtree, files_dir, True)
                raise
            talk = talks.Talk(proc, self.name, files_dir)
            self._talks.add(request.run_id, talk)
        try:
            return await talk.turn(request, timeout, parse)
        except errors.AgentTimeout:
            await self.end_conversation(request.run_id)  # its process group is killed
            raise

    async def end_conversation(self, run_id: str) -> None:
        """Close the conversation's stdin and let its command exit (or stop it)."""
        talk = self._talks.pop(run_id)
        if talk is None:
            return
        try:
            code = await talk.end(_stop)
        finally:
            self._live.discard(talk.proc)
        failed = talks.ended_badly(self.name, code, talk)
        if failed is not None:
            raise failed

    async def _start(
        self, request: AgentRequest, files_dir: str | None, *, conversation: bool = False
    ) -> asyncio.subprocess.Process:
        env = {
            **environment.started(self.spec.env, os.environ),  # never agent-health's own
            **request.env,
            "AGENT_HEALTH_PROMPT": request.prompt,
            "AGENT_HEALTH_RUN_ID": request.run_id,
        }
        if request.traceparent:
            env["TRACEPARENT"] = request.traceparent
            if request.tracestate:
                env["TRACESTATE"] = request.tracestate
        if request.provisioned:
            env["AGENT_HEALTH_PROVISIONED"] = strictjson.dumps(request.provisioned)
        if request.tools:
            env["AGENT_HEALTH_TOOLS"] = strictjson.dumps(request.tool_list())
        if files_dir is not None:
            env["AGENT_HEALTH_FILES_DIR"] = files_dir
        if conversation:
            env["AGENT_HEALTH_CONVERSATION"] = "1"
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.spec.cwd,
                env=env,
                start_new_session=True,
                limit=talks.LINE_LIMIT,
            )
        except OSError as err:
            raise errors.ConnectorConfigError(
                f"cannot start agent command {self.name!r}: {wire.reason(err)}"
            ) from err
        self._live.add(proc)
        return proc

    async def _run(self, request: AgentRequest, files_dir: str | None) -> AgentReply:
        timeout = wire.timeout_of(request, self.spec)
        proc = await self._start(request, files_dir)
        stdout, stderr = bytearray(), bytearray()
        assert proc.stdout is not None
        assert proc.stderr is not None
        readers = [
            asyncio.create_task(talks.drain(proc.stdout, stdout)),
            asyncio.create_task(talks.drain(proc.stderr, stderr)),
        ]
        try:
            async with asyncio.timeout(timeout):
                await _feed(proc, request.wire_bytes())
                await asyncio.gather(*readers)
                code = await proc.wait()
        except TimeoutError as err:
            raise errors.AgentTimeout(
                f"agent command {self.name!r} did not finish within {timeout:g} s "
                f"(its process group was killed){_tail(stderr)}",
                partial=partial.of_bytes(stdout, "stdout"),
            ) from err
        finally:
            for reader in readers:
                reader.cancel()
            await _stop(proc)
            self._live.discard(proc)
        if code != 0:
            ended = talks.how(code)
            raise errors.AgentRunFailed(f"agent command {self.name!r} {ended}{_tail(stderr)}")
        return parse(stdout.decode(errors="replace"), self.name)

    async def aclose(self) -> None:
        for run_id in self._talks.all():
            with contextlib.suppress(errors.ConnectorError):
                await self.end_conversation(run_id)
        for proc in list(self._live):
            await _stop(proc)


def _materialise(request: AgentRequest) -> str:
    """Write the run's files into a new private directory and return its path."""
    root = Path(tempfile.mkdtemp(prefix=f"agent-health-{request.run_id[:12]}-"))
    for item in request.files:
        target = (root / item.path).resolve()
        if not target.is_relative_to(root.resolve()):  # agent.run checked; a custom caller may not
            shutil.rmtree(root, ignore_errors=True)
            raise errors.ConnectorConfigError(f"file path {item.path!r} leaves the files dir")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data())
    return str(root)


def parse(text: str, name: str) -> AgentReply:
    """Read a command's stdout: one REST v1 JSON answer, or JSON lines of steps + output."""
    stripped = text.strip()
    if not stripped:
        raise errors.AgentProtocolError(
            f"agent command {name!r} printed nothing on stdout; print one REST protocol v1 "
            'JSON answer, or JSON lines of steps ending with {"output": ...}'
        )
    try:
        whole = wire.parse_json(stripped)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "type" not in whole:
        return _validate(whole, name, "its JSON answer")
    steps: list[Any] = []
    final: dict[str, Any] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = wire.parse_json(line)
        except ValueError as err:
            raise errors.AgentProtocolError(
                f"agent command {name!r} printed stdout line {number} that is not JSON"
                f"{wire.why_not(err)}: {wire.snippet(line, 120)}"
            ) from err
        if isinstance(item, dict) and "type" in item:
            steps.append(_step(item, name, number))
        elif isinstance(item, dict) and "output" in item:
            final = item
        else:
            raise errors.AgentProtocolError(
                f"agent command {name!r} printed stdout line {number} that is neither a step "
                f'(with "type") nor the final {{"output": ...}}: {wire.snippet(line, 120)}'
            )
    if final is None:
        raise errors.AgentStreamIncomplete(
            f'agent command {name!r} printed {len(steps)} steps but no final {{"output": ...}} line'
        )
    trajectory = [*steps, *final.get("trajectory", [])]
    return _validate({**final, "trajectory": trajectory}, name, "its final line")


def _step(item: dict[str, Any], name: str, number: int) -> Step:
    try:
        return Step.model_validate(item)
    except pydantic.ValidationError as err:
        raise errors.AgentProtocolError(
            f"agent command {name!r} printed a step on stdout line {number} that is not a "
            f"REST protocol v1 step: {wire.validation_reason(err)}"
        ) from err


def _validate(body: dict[str, Any], name: str, what: str) -> AgentReply:
    wire.require_output(body, f"agent command {name!r}")
    try:
        return AgentReply.model_validate(body)
    except pydantic.ValidationError as err:
        raise errors.AgentProtocolError(
            f"agent command {name!r}: {what} is not REST protocol v1: {wire.validation_reason(err)}"
        ) from err


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    # A command that never reads its stdin (it has $AGENT_HEALTH_PROMPT) may exit first.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
        proc.stdin.close()
        await proc.stdin.wait_closed()


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """End the command's process group: SIGTERM, then SIGKILL after a grace period.

    The group is signalled even when the command itself has exited, so children it left
    running (holding our pipes open) go with it.
    """
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), TERM_GRACE_S)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _tail(stderr: bytearray, limit: int = 500) -> str:
    text = " ".join(stderr.decode(errors="replace").split())
    if not text:
        return " (nothing on stderr)"
    return ": " + (text if len(text) <= limit else "…" + text[-limit:])
