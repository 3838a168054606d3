"""Outside text made visible: what acts on a reader is written out as its escape."""

from __future__ import annotations

import io

import pytest
from agent_health.engine import visible
from rich.console import Console


@pytest.mark.parametrize(
    ("text", "line", "block"),
    [
        ("plain text, tabs\tand ünïcode ✓ 👍", None, None),  # unchanged, the same object
        ("\x1b[1A\x1b[2K", "\\x1b[1A\\x1b[2K", "\\x1b[1A\\x1b[2K"),
        ("a\nb", "a\\nb", "a\nb"),
        ("a\r\nb", "a\\nb", "a\nb"),
        ("a\rb", "a\\rb", "a\\rb"),
        ("\x00\x01\x7f\x9b", "\\x00\\x01\\x7f\\x9b", "\\x00\\x01\\x7f\\x9b"),
        ("\u202edessap\u202c", "\\u202edessap\\u202c", "\\u202edessap\\u202c"),
        ("\u2066x\u2069\u200e\u061c", "\\u2066x\\u2069\\u200e\\u061c", None),
        ("pa\u200bss\u2028\ufeff", "pa\\u200bss\\u2028\\ufeff", None),
        ("lone \ud800 \udfff", "lone \\ud800 \\udfff", None),
        ("\ufffe\uffff", "\\ufffe\\uffff", None),
    ],
)
def test_line_and_block(text: str, line: str | None, block: str | None) -> None:
    assert visible.line(text) == (text if line is None else line)
    expected_block = block if block is not None else (line or text).replace("\\n", "\n")
    assert visible.block(text) == expected_block
    if line is None:
        assert visible.line(text) is text  # the common case costs a scan, not a copy


def test_indented_keeps_every_line_under_its_heading() -> None:
    assert visible.indented("first\nsecond\r\nthird", "    ") == "first\n    second\n    third"


def test_guard_makes_text_visible_and_leaves_rich_alone() -> None:
    out = io.StringIO()
    console = Console(
        file=out, force_terminal=True, width=80, color_system="standard", highlight=False
    )
    visible.guard(console)
    console.print("[red]agent says:[/] \x1b]0;title\x1b\\ \u202edone", end="")
    written = out.getvalue()
    assert "\\x1b]0;title\\x1b\\ \\u202edone" in written
    assert "\x1b]" not in written  # the agent's OSC is shown, not sent
    assert "\x1b[31m" in written  # rich's own colour is still sent
