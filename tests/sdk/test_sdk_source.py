"""A test's content hash reads its body's source from one parse of its file: the same text
``inspect.getsource`` gives (so hashes match earlier runs' reports), at a fraction of the cost;
its parameters (the fixtures it asks for) are read from its code as ``inspect.signature`` reads
them."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from agent_health.engine.loading import loader

ROOT = Path(__file__).resolve().parents[2]

SHAPES = '''
from agent_health import test


@test("plain")
async def plain(agent):
    await agent.run("x")


@test(
    "decorated over lines",
    labels=["a"],
)
async def over_lines(agent):
    result = await agent.run(
        "x",
    )
    # a comment indented with the body belongs to it
        # and a deeper one too

    # even after a blank line


# a comment at the left margin ends nothing, but is not part of the body
@test("one line")
async def one_line(agent): await agent.run("x")


with test.describe("group"):

    @test("inside a group")
    async def grouped(agent, expect):
        """A docstring."""
        text = """
a string that looks like code:
def not_a_function(): pass
"""
        expect(text).to_contain("code")
    # indented at the group's level, not the body's: not part of it

    @test.skip("skipped")
    async def skipped(agent):
        pass  # trailing comment on the last line
'''


def cases(root: Path) -> list[object]:
    suite = loader.load([root])
    assert not suite.errors, suite.errors
    return [c for c in suite.cases if not c.from_case_file]  # a case file has no Python source


def test_the_source_of_every_shape_of_body_is_what_inspect_reads(tmp_path: Path) -> None:
    (tmp_path / "test_shapes.py").write_text(SHAPES)
    found = cases(tmp_path)
    assert len(found) == 5
    for case in found:
        assert case.source == inspect.getsource(case.fn), case.title  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "example",
    sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir() and p.name[0].isdigit()),
)
def test_the_examples_hash_as_inspect_reads_them(example: Path) -> None:
    for case in cases(example):
        assert case.source == inspect.getsource(case.fn), case.title  # type: ignore[attr-defined]


PARAMETERS = """
import functools

from agent_health import test


def logged(fn):
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        return await fn(*args, **kwargs)

    return wrapper


@test("positional")
async def positional(agent, expect):
    local = 1


@test("keyword only")
async def keyword_only(agent, *, expect, test_info=None):
    pass


@test("positional only")
async def positional_only(agent, /, expect):
    pass


@test("wrapped by a decorator of the user's")
@logged
async def wrapped(agent, judge):
    pass
"""


def test_the_fixtures_a_test_asks_for_are_its_parameters_as_inspect_reads_them(
    tmp_path: Path,
) -> None:
    # Read from the function's code for a plain function; a decorator's wraps() is followed
    # to the function it wraps, as inspect follows it.
    (tmp_path / "test_parameters.py").write_text(PARAMETERS)
    found = {c.title: c for c in cases(tmp_path)}  # type: ignore[attr-defined]
    assert {title: case.params for title, case in found.items()} == {  # type: ignore[attr-defined]
        "positional": ("agent", "expect"),
        "keyword only": ("agent", "expect", "test_info"),
        "positional only": ("agent", "expect"),
        "wrapped by a decorator of the user's": ("agent", "judge"),
    }
    for case in found.values():
        assert case.params == tuple(inspect.signature(case.fn).parameters)  # type: ignore[attr-defined]
