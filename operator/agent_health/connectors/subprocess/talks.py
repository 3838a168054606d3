"""A conversation with a command agent: one process for every turn, one line per message.

For ``agent.run(turns=...)`` / ``user=...`` the subprocess connector starts the command
once, with ``$AGENT_HEALTH_CONVERSATION=1`` and the single run's environment, and keeps its
stdin open. Each turn writes one line on stdin — that turn's REST v1 request JSON (its
``prompt`` the user's message, ``messages`` the conversation so far, ``turn`` its number)
— and reads the answer from stdout as JSON lines: steps, then the final
``{"output": ...}`` line, which ends the turn. When the conversation ends stdin is closed;
the command should exit (a command still running :data:`TERM_GRACE_S` later is stopped).

A command that exits before answering a turn, or that answered one turn and then stopped
reading its stdin, is told so in one error naming the turn; a non-zero exit after the
conversation is the agent's failure too.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import Callable, Mapping

from agent_health.connectors import errors, partial, wire
from agent_health.connectors.protocol import AgentReply, AgentRequest

TERM_GRACE_S = 2.0
"""How long a command may take to exit after its stdin closed (or after SIGTERM)."""
LINE_LIMIT = 16 * 1024 * 1024
"""The longest stdout line read (a step or an answer): a runaway agent cannot fill memory."""
_PROTOCOL = "docs/agent-protocol.md#conversations"

Parse = Callable[[str, str], AgentReply]


class Talk:
    """One conversation's process and what it wrote to stderr."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        name: str,
        files_dir: str | None,
    ) -> None:
        self.proc = proc
        self.name = name
        self.files_dir = files_dir
        self.stderr = bytearray()
        assert proc.stderr is not None
        self._stderr = asyncio.create_task(drain(proc.stderr, self.stderr))
        self.answered = 0

    async def turn(self, request: AgentRequest, timeout: float, parse: Parse) -> AgentReply:
        """Send ``request`` as one stdin line and read its answer."""
        if self.proc.returncode is not None:
            raise self._gone(request.turn)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request.wire_bytes() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as err:
            raise self._gone(request.turn) from err
        lines = bytearray()
        try:
            async with asyncio.timeout(timeout):
                await self._answer(lines, request.turn)
        except TimeoutError as err:
            raise errors.AgentTimeout(
                f"agent command {self.name!r} did not answer turn {request.turn} within "
                f"{timeout:g} s (its process group was killed){self.tail()}",
                partial=partial.of_bytes(lines, "stdout"),
            ) from err
        self.answered = request.turn
        return parse(lines.decode(errors="replace"), self.name)

    async def _answer(self, lines: bytearray, turn: int) -> None:
        """Read stdout lines up to the one that ends the turn (``{"output": ...}``)."""
        assert self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except ValueError as err:  # asyncio's LimitOverrunError, as readline raises it
                raise errors.AgentProtocolError(
                    f"agent command {self.name!r} printed a stdout line longer than "
                    f"{LINE_LIMIT // (1024 * 1024)} MiB in turn {turn}"
                ) from err
            if not line:
                code = await self.proc.wait()
                if not lines and turn > 1:  # it ended after the turn before
                    raise self._gone(turn)
                raise errors.AgentStreamIncomplete(
                    f"agent command {self.name!r} {how(code)} before it finished turn {turn} "
                    f'(no final {{"output": ...}} line){self.tail()}'
                )
            lines.extend(line)
            if _ends_turn(line):
                return

    def _gone(self, turn: int) -> errors.ConnectorError:
        code = self.proc.returncode
        ended = how(code) if code is not None else "stopped reading its stdin"
        return errors.AgentRunFailed(
            f"agent command {self.name!r} {ended} after answering turn {self.answered}, so it "
            f"cannot hold a conversation: turn {turn} had nowhere to go. A conversation's "
            f"command reads one request per stdin line until stdin closes ({_PROTOCOL})"
            f"{self.tail()}"
        )

    def tail(self, limit: int = 500) -> str:
        text = " ".join(self.stderr.decode(errors="replace").split())
        if not text:
            return " (nothing on stderr)"
        return ": " + (text if len(text) <= limit else "…" + text[-limit:])

    async def end(self, stop: Callable[[asyncio.subprocess.Process], object]) -> int | None:
        """Close stdin and wait for the command to exit; its exit code, or ``None`` when it
        had to be stopped (it kept running: not a failure, many agents loop forever)."""
        stdin = self.proc.stdin
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.close()
                await stdin.wait_closed()
        code: int | None
        try:
            code = await asyncio.wait_for(self.proc.wait(), TERM_GRACE_S)
        except TimeoutError:
            code = None
        outcome = stop(self.proc)
        if asyncio.iscoroutine(outcome):
            await outcome
        self._stderr.cancel()
        if self.files_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self.files_dir, True)
        return code


class Talks:
    """The conversations a connector holds, by run id."""

    def __init__(self) -> None:
        self._open: dict[str, Talk] = {}

    def get(self, run_id: str) -> Talk | None:
        return self._open.get(run_id)

    def add(self, run_id: str, talk: Talk) -> None:
        self._open[run_id] = talk

    def pop(self, run_id: str) -> Talk | None:
        return self._open.pop(run_id, None)

    def all(self) -> Mapping[str, Talk]:
        return dict(self._open)


def ended_badly(name: str, code: int | None, talk: Talk) -> errors.ConnectorError | None:
    """The error of a command that exited non-zero once the conversation was over."""
    if code is None or code == 0:
        return None
    return errors.AgentRunFailed(
        f"agent command {name!r} {how(code)} when its conversation ended (after turn "
        f"{talk.answered}){talk.tail()}"
    )


def _ends_turn(line: bytes) -> bool:
    """Whether a stdout line is the final ``{"output": ...}`` of a turn (not a step)."""
    stripped = line.strip()
    if not stripped.startswith(b"{") or b'"output"' not in stripped:
        return False
    try:
        item = wire.parse_json(stripped.decode(errors="replace"))
    except ValueError:
        return False  # the parser says what is wrong with it, with the line's number
    return isinstance(item, dict) and "output" in item and "type" not in item


async def drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    """Read ``stream`` to its end into ``into``."""
    while chunk := await stream.read(65536):
        into.extend(chunk)


def how(code: int | None) -> str:
    """How a command ended, in words."""
    if code is None:
        return "is still running"
    if code >= 0:
        return f"exited with {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"
