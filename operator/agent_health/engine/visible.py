"""Text from outside agent-health, made safe to show: every character that would act on a
reader instead of being read is written out as its escape.

An agent's answer or error body, a tool's name, arguments and result, what a test printed,
a title or label from a case file: any of them may hold an ANSI or OSC sequence (move the
cursor up and erase the line above, set the window title, write the clipboard), a carriage
return that overwrites the start of a line, a bidirectional override that shows text in
another order than it is stored, or a character XML 1.0 forbids. Shown raw, an agent could
turn its own ``✗ failed`` into ``✓ passed`` on the terminal, or make a JUnit file that no CI
system can parse.

:func:`line` and :func:`block` write each such character as Python spells it in a string
literal (``\\x1b``, ``\\u202e``), so a reader sees that it was there and what it was. The JSON
report and the ledger keep the text unchanged: this is only for what is shown.

Made visible: the C0 controls but tab (and newline, in a block), DEL and the C1 controls;
the bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
U+202A-U+202E, U+2066-U+2069); the characters that hide text or break lines where a
terminal does not (U+200B, U+2028, U+2029, U+2060, U+FEFF, U+FFF9-U+FFFB); lone surrogates
(no encoder writes them); U+FFFE and U+FFFF (not characters, and forbidden in XML).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

_HIDDEN = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u202a-\u202e\u2028\u2029\u2060\u2066-\u2069\ufeff"
    "\ud800-\udfff\ufff9-\ufffb\ufffe\uffff"
)
_NEWLINE = "\n"


_NAMED = {"\n": "\\n", "\r": "\\r"}


# Every character made visible is one str.isprintable() refuses (a control, a format mark,
# a line or paragraph separator, a surrogate, a non-character), so text it accepts is shown
# as it is without the pattern, which is compiled the first time some text is refused (and
# kept by re's own cache): a class spanning the Basic Multilingual Plane takes about 4.7 M
# instructions to compile (issue #40), which a run whose text is all printable never pays.
_IN_LINE = f"[\n{_HIDDEN}]"
_IN_BLOCK = f"[{_HIDDEN}]"


def _in_line() -> re.Pattern[str]:
    return re.compile(_IN_LINE)


def _in_block() -> re.Pattern[str]:
    return re.compile(_IN_BLOCK)


def _shown_as_is(text: str) -> bool:
    """Whether ``text`` (in a block: its newlines and tabs aside) has nothing to make
    visible, by :meth:`str.isprintable` alone."""
    return text.isprintable() or text.replace(_NEWLINE, "").replace("\t", "").isprintable()


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text: str) -> str:
    """``text`` for one line: a newline is shown as ``\\n`` too (a title, a name, a label)."""
    if text.isprintable() or _in_line().search(text) is None:  # the common case: one scan
        return text
    return _in_line().sub(_escape, text.replace("\r\n", "\n"))


def block(text: str) -> str:
    """``text`` that may span lines (an error, an answer, captured output): newlines stay,
    ``\\r\\n`` becomes a newline, and a lone ``\\r`` is shown as ``\\r``."""
    if _shown_as_is(text) or _in_block().search(text) is None:
        return text
    return _in_block().sub(_escape, text.replace("\r\n", _NEWLINE))


def indented(text: str, margin: str) -> str:
    """:func:`block`, each line after the first at ``margin``: text that spans lines stays
    under the heading it belongs to, and cannot make a line of its own look like ours."""
    return block(text).replace("\n", "\n" + margin)


def guard(console: Console) -> None:
    """Make visible whatever :func:`line` would in each piece of text ``console`` prints
    from now on, leaving rich's own control codes (the live display's cursor moves) alone.

    The net under the reporters' own calls: those escape what they put in a table before
    its columns are measured; this catches what any other message would let through.
    """
    from rich.console import RenderHook

    class _Guard(RenderHook):
        def process_renderables(self, renderables: list[Any]) -> list[Any]:
            return [_Visible(r) for r in renderables]

    console.push_render_hook(_Guard())


class _Visible:
    """A renderable whose text segments come out through :func:`block`."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __rich_console__(self, console: Console, options: Any) -> Any:
        from rich.segment import Segment

        for segment in console.render(self._inner, options):
            text = segment.text
            if segment.control is None and not _shown_as_is(text) and _in_block().search(text):
                yield Segment(block(text), segment.style)
            else:
                yield segment
