"""A test's content hash reads its body's source from its file's lines (a scan of them, or one
parse of the file): the same text ``inspect.getsource`` gives (so hashes match earlier runs'
reports), at a fraction of the cost;
its parameters (the fixtures it asks for) are read from its code as ``inspect.signature`` reads
them."""

from __future__ import annotations

import inspect
import linecache
from pathlib import Path

import pytest
from agent_health.engine.loading import loader
from agent_health.sdk import sources

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


EDGES = r'''
from agent_health import test


@test("a comment's quote and a string's hash")
async def quotes(agent, expect):
    # it's Bob's: an apostrophe in a comment
    text = "a # is text here, and so is ( and ["
    expect(text).to_contain("#")  # isn't a string


@test("both kinds of quote, escaped ones")
async def escapes(agent, expect):
    said = 'he said "(" and \'[\''
    path = "C:\\dir\\"
    expect(said + path).to_contain("(")


@test("a bracket closed at the left margin")
async def margin(agent, expect):
    result = await agent.run(
"ping"
)
    expect(result.output).to_equal("pong")


@test("a continued line")
async def continued(agent, expect):
    total = 1 + \
        2
    expect(total).to_equal(3)


@test("a triple-quoted string on one line")
async def triple(agent, expect):
    expect("""x""").to_equal("x")
        # deeper than the body: part of it


@test("the last test")
async def last(agent, expect):
    expect([1, (2, {3: "}"})]).to_equal([1, (2, {3: "}"})])
'''


def test_the_source_of_lines_a_scan_must_read_past_is_what_inspect_reads(tmp_path: Path) -> None:
    (tmp_path / "test_edges.py").write_text(EDGES)
    found = cases(tmp_path)
    assert len(found) == 6
    for case in found:
        assert case.source == inspect.getsource(case.fn), case.title  # type: ignore[attr-defined]


def test_the_hashes_of_a_fixed_file_are_what_they_were(tmp_path: Path) -> None:
    """The history keys a test on its content hash: the same source hashes as it did when
    the hash was cut from the file's syntax tree alone (these are that code's)."""
    (tmp_path / "test_shapes.py").write_text(SHAPES)
    assert {c.title: c.content_hash for c in cases(tmp_path)} == {  # type: ignore[attr-defined]
        "plain": "9b66f458ac8a1a7a",
        "decorated over lines": "9a096a7531de0219",
        "one line": "f374e2687d6d433b",
        "group > inside a group": "8652af80f24330ca",
        "group > skipped": "d55e0d8730099b8d",
    }


def test_a_file_of_plain_tests_is_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no string runs over lines and no line is continued, a body's lines are found by
    a scan of its own lines; the file's syntax tree (about a tenth of a millisecond a test)
    is built only for a body the scan cannot be sure of, such as one with a docstring."""
    parsed: list[str] = []
    whole = sources.blocks

    def counted(path: str) -> dict[int, tuple[int, int]]:
        parsed.append(Path(path).name)
        return whole(path)

    monkeypatch.setattr(sources, "blocks", counted)
    (tmp_path / "test_plain.py").write_text(SHAPES.split("# a comment at the left margin")[0])
    (tmp_path / "test_shapes.py").write_text(SHAPES)
    found = cases(tmp_path)
    assert len(found) == 7
    for case in found:
        assert case.source == inspect.getsource(case.fn), case.title  # type: ignore[attr-defined]
    assert parsed == ["test_shapes.py"]


def test_the_scan_of_a_functions_lines_is_the_parsers_answer() -> None:
    """Over every function in this repository's Python: the scan gives the lines the syntax
    tree gives, or leaves the function to it."""
    scanned = 0
    for path in sorted(
        p for top in ("operator", "tests", "examples", "bench") for p in (ROOT / top).rglob("*.py")
    ):
        lines = linecache.getlines(str(path))
        for first, block in sources.blocks(str(path)).items():
            found = sources.plain_block(lines, first)
            assert found in (None, block), f"{path}:{first}"
            scanned += found is not None
    assert scanned > 1000


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
