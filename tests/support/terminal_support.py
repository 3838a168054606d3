"""Run the real CLI on a pseudo-terminal and read what a terminal emulator shows after it.

A reader of a terminal sees the screen, not the bytes: an agent's ``ESC[1A ESC[2K`` erases
the line above, ``OSC 0`` sets the window title. :func:`run_in_terminal` runs ``agent-health``
in its own process with a pty of the given size as its stdin, stdout and stderr (so rich draws
its live progress, as on a person's terminal), and :func:`screen` feeds what came out to
pyte, a VT100/xterm emulator, to read the screen back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

import pyte


@dataclass
class Terminal:
    code: int
    raw: bytes  # everything the program wrote, as it wrote it
    lines: list[str]  # the screen afterwards, one string per row, right-trimmed
    title: str  # the window title, as the program left it

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_in_terminal(
    args: list[str], cwd: Path, *, columns: int = 80, rows: int = 500, timeout: float = 300
) -> Terminal:
    """``agent-health ARGS`` on a ``columns``-wide terminal; the screen when it exited."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_health.cli", *args],
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the program closed its side
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                proc.kill()
        os.close(master)
    raw = b"".join(chunks)
    lines, title = screen(raw, columns, rows)
    return Terminal(code, raw, lines, title)


def screen(raw: bytes, columns: int = 80, rows: int = 500) -> tuple[list[str], str]:
    """What an xterm shows after ``raw``: its rows (trailing blank ones dropped), its title."""
    shown = pyte.Screen(columns, rows)
    pyte.ByteStream(shown).feed(raw)
    lines = [line.rstrip() for line in shown.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines, shown.title
