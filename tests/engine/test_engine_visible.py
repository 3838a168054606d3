"""Outside text made visible: what acts on a reader is written out as its escape."""

from __future__ import annotations

import io
import re
import subprocess
import sys

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


def test_every_character_made_visible_is_one_isprintable_refuses() -> None:
    # What lets printable text skip the pattern: nothing it would escape is printable.
    hidden = re.compile(f"[\n{visible._HIDDEN}]")
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    found = hidden.findall(everything)
    assert len(found) > 2048  # the surrogates alone are 2,048
    assert [c for c in found if c.isprintable()] == []


PRINTABLE = r"""
import io, re, sys
compiled = []
compile = re.compile
re.compile = lambda pattern, flags=0: compiled.append(pattern) or compile(pattern, flags)
from rich.console import Console
from agent_health.engine import visible
out = io.StringIO()
console = Console(file=out, force_terminal=True, width=60)
visible.guard(console)
console.print("✓ passed — pass rate 100% [21%, 100%]\n\tscore 1.00")
assert visible.line("a title ▸ ünïcode 👍") == "a title ▸ ünïcode 👍"
assert visible.block("an answer\n\twith tabs") == "an answer\n\twith tabs"
print(sum("\u202e" in p for p in compiled if isinstance(p, str)))
"""


def test_printable_text_is_shown_without_compiling_the_pattern() -> None:
    # The pattern spans the Basic Multilingual Plane: about 4.7 M instructions to compile,
    # which a run whose titles and summary are all printable never pays (issue #40).
    done = subprocess.run(
        [sys.executable, "-c", PRINTABLE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
