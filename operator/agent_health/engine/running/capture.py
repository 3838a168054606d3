"""What a test body prints, kept with that test (as pytest does), not interleaved on the terminal.

Tests run concurrently in one event loop, so ``sys.stdout`` cannot simply be swapped per
test. While a run is on, :func:`installed` puts a router in front of ``sys.stdout`` and
``sys.stderr``: a write made inside a test (its task, the tasks it starts, the threads it
starts with ``asyncio.to_thread``: all of them inherit the test's context) goes to that
test's :class:`Captured`; any other write goes to the stream it would have gone to.

A capture keeps at most :data:`LIMIT` characters per stream and says how much it cut.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import sys
from collections.abc import Iterator
from typing import Any, TextIO

LIMIT = 100_000  # characters kept per stream and test

_current: contextvars.ContextVar[Captured | None] = contextvars.ContextVar(
    "agent_health_capture", default=None
)


class _Stream:
    """One captured stream: the first :data:`LIMIT` characters, and how many more came."""

    def __init__(self) -> None:
        self._buffer: io.StringIO | None = None  # made on first write: most tests print nothing
        self._kept = 0
        self._cut = 0

    def write(self, text: str) -> None:
        room = LIMIT - self._kept
        if room <= 0:
            self._cut += len(text)
            return
        if self._buffer is None:
            self._buffer = io.StringIO()
        self._buffer.write(text[:room])
        self._kept += min(room, len(text))
        self._cut += max(0, len(text) - room)

    def value(self) -> str | None:
        if self._buffer is None:
            return None
        text = self._buffer.getvalue()
        if self._cut:
            text += f"\n[... {self._cut} more characters not kept]\n"
        return text


class Captured:
    """The output of one test: each stream made by its first write (most tests print
    nothing, and every test has a capture)."""

    __slots__ = ("err", "out")

    def __init__(self) -> None:
        self.out: _Stream | None = None
        self.err: _Stream | None = None

    def stream(self, which: str) -> _Stream:
        """The stream ``which`` (``out`` or ``err``), made now if nothing was written to it."""
        if which == "out":
            if self.out is None:
                self.out = _Stream()
            return self.out
        if self.err is None:
            self.err = _Stream()
        return self.err

    @property
    def stdout(self) -> str | None:
        return self.out.value() if self.out is not None else None

    @property
    def stderr(self) -> str | None:
        return self.err.value() if self.err is not None else None


class _Router(io.TextIOBase):
    """Stands in for ``sys.stdout`` / ``sys.stderr`` while a run is on."""

    def __init__(self, original: TextIO, which: str) -> None:
        self._original = original
        self._which = which

    def _target(self) -> _Stream | None:
        captured = _current.get()
        if captured is None:
            return None
        return captured.stream(self._which)

    def write(self, text: str) -> int:
        target = self._target()
        if target is None:
            return self._original.write(text)
        target.write(text)
        return len(text)

    def flush(self) -> None:
        if _current.get() is None:  # a test's flush writes nothing: no stream made for it
            self._original.flush()

    def isatty(self) -> bool:
        return self._original.isatty()

    def fileno(self) -> int:
        return self._original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", "utf-8")

    @property
    def rich_proxied_file(self) -> Any:
        # rich's consoles write to the stream behind a proxy: the run's own terminal output
        # (progress, summary) goes straight out and never through a test's capture.
        return getattr(self._original, "rich_proxied_file", self._original)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Route ``sys.stdout``/``sys.stderr`` by test while the block runs; restore them after."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = _Router(out, "out")
    sys.stderr = _Router(err, "err")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


class _Capturing:
    """:func:`capturing`'s block: a class, not a ``contextlib`` generator, which cost a
    generator and three frames more at every test."""

    __slots__ = ("_token",)

    def __enter__(self) -> Captured:
        captured = Captured()
        self._token = _current.set(captured)
        return captured

    def __exit__(self, *_: object) -> None:
        _current.reset(self._token)


capturing = _Capturing
"""``with capturing() as captured``: capture what this context (one test) writes, while
:func:`installed` is on (the block's class itself: no function around it, every test)."""
