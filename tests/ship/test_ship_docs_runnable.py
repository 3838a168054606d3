"""Every code block of README.md and docs/ marked ``runnable`` runs, as the reader would run it.

The marking (documented in docs/architecture.md, "Runnable examples in these pages") is the
fence's info string: ```` ```python runnable ```` is a test file run against the bundled
example agent, ```` ```python runnable agent ```` a REST agent and ```` ```python runnable
cmd ```` a subprocess agent, each driven by a probe test,
```` ```sh runnable ```` a shell script run beside a copy of ``examples/``; ``exit=N``
expects exit code N instead of 0. A block marked ``file=PATH`` is a file a page builds step
by step: each ``sh`` block of the page runs with every such block above it written to its
path first, so a page's steps run in order, as its reader runs them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.ship_support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
TIMEOUT = 300
_FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>.*)$")

PROBE = """from agent_health import test


@test("the documented agent answers")
async def probe(agent, expect):
    result = await agent.run("Why is the payment service failing?")
    expect(result.output).to_be_truthy()
    expect(len(result.trajectory)).to_be_greater_than(0)
"""
AGENT_CONFIG = """from agent_health import define_config

config = define_config(
    agents={
        "doc": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": ["python", "agent.py", "{port}"],
        }
    }
)
"""
COMMAND_CONFIG = """from agent_health import define_config

config = define_config(
    agents={"doc": {"connector": "subprocess", "command": ["python", "agent.py"]}}
)
"""


@dataclass(frozen=True)
class Block:
    """One fenced code block marked runnable."""

    page: Path
    line: int
    language: str
    flags: tuple[str, ...]
    exit: int
    code: str
    file: str | None = None  # ``file=PATH``: written there for the page's later sh blocks

    @property
    def name(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def parse(page: Path) -> list[Block]:
    """The runnable blocks of one page, with the line their fence opens on."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index].strip())
        if not match:
            index += 1
            continue
        fence, words = match["fence"], match["info"].split()
        start = index
        index += 1
        body = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1
        if "runnable" not in words:
            continue
        language = words[0]
        rest = words[words.index("runnable") + 1 :]
        options = dict(w.split("=", 1) for w in rest if "=" in w)
        flags = tuple(w for w in rest if "=" not in w)
        unknown = set(options) - {"exit", "file"}
        assert not unknown, f"{page.name}:{start + 1}: unknown runnable option {sorted(unknown)}"
        exit_code, code = int(options.get("exit", 0)), "\n".join(body)
        blocks.append(Block(page, start + 1, language, flags, exit_code, code, options.get("file")))
    return blocks


BLOCKS = [block for page in PAGES for block in parse(page)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_HEALTH_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _examples(into: Path) -> Path:
    """A fresh copy of ``examples/`` (ledgers and reports land in the copy, not the repo)."""
    target = into / "examples"
    shutil.copytree(
        ROOT / "examples",
        target,
        ignore=shutil.ignore_patterns("__pycache__", ".agent-health", "*.json.tmp"),
    )
    return target


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def written_before(block: Block, blocks: list[Block]) -> list[Block]:
    """The ``file=`` blocks of ``block``'s page above it: what its reader has written by
    then."""
    return [b for b in blocks if b.page == block.page and b.line < block.line and b.file]


def run_block(
    block: Block, tmp: Path, files: Sequence[Block] = ()
) -> subprocess.CompletedProcess[str]:
    """Run one block the way its marking says, after writing ``files`` (``file=`` blocks)
    to their paths; return the finished process."""
    for written in files:
        assert written.file is not None
        target = tmp / written.file
        assert target.resolve().is_relative_to(tmp.resolve()), f"{written.name}: {written.file}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(written.code + "\n")
    agent_health = str(BIN / "agent-health")
    if block.language == "python" and block.flags in (("agent",), ("cmd",)):
        (tmp / "agent.py").write_text(block.code + "\n")
        config = AGENT_CONFIG if block.flags == ("agent",) else COMMAND_CONFIG
        (tmp / "agent-health.config.py").write_text(config)
        (tmp / "test_probe.py").write_text(PROBE)
        return _run([agent_health, "run", "--no-ledger", "test_probe.py"], tmp)
    if block.language == "python" and not block.flags:
        quickstart = _examples(tmp) / "01-quickstart"
        (quickstart / "test_doc.py").write_text(block.code + "\n")
        return _run([agent_health, "run", "test_doc.py"], quickstart)
    if block.language in ("sh", "bash") and not block.flags:
        _examples(tmp)
        return _run(["bash", "-euo", "pipefail", "-c", block.code], tmp)
    raise AssertionError(
        f"{block.name}: cannot run a {block.language!r} block {block.flags}; the markings are "
        "`python runnable`, `python runnable agent`, `python runnable cmd` and `sh runnable` "
        "(docs/architecture.md)"
    )


def test_the_pages_have_runnable_blocks_of_every_kind() -> None:
    kinds = {(b.language, b.flags) for b in BLOCKS}
    assert {("python", ()), ("python", ("agent",)), ("python", ("cmd",)), ("sh", ())} <= kinds
    assert any(b.page.name == "README.md" for b in BLOCKS)
    assert any(b.exit != 0 for b in BLOCKS), "no block shows a failing run"


def test_a_fence_is_parsed_with_its_line_language_and_options(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nnot marked\n```\n\n````sh runnable exit=3\necho ```\nexit 3\n````\n"
    )
    (block,) = parse(page)
    assert (block.line, block.language, block.flags, block.exit) == (6, "sh", (), 3)
    assert block.code == "echo ```\nexit 3"


def test_a_block_that_does_not_do_what_it_says_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python runnable\nthis is not python\n```\n")
    (block,) = parse(page)
    done = run_block(block, tmp_path)
    assert done.returncode != block.exit


def check_file_block(block: Block, blocks: list[Block]) -> None:
    """A ``file=`` block is run by the page's sh blocks below it: there must be one; and a
    Python file must at least compile."""
    below = [b for b in blocks if b.page == block.page and b.line > block.line and not b.file]
    assert any(b.language in ("sh", "bash") for b in below), (
        f"{block.name}: file={block.file} has no sh runnable block below it to run it"
    )
    if block.language == "python":
        compile(block.code, block.file or block.name, "exec")


def test_a_page_builds_its_files_in_order_for_its_commands(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python runnable file=app/agent.py\nprint('hello')\n```\n\n"
        "```sh runnable\ncd app && python agent.py | grep -x hello\n```\n\n"
        "```text runnable file=app/late.txt\nwritten after the command\n```\n"
    )
    blocks = parse(page)
    first, command, late = blocks
    assert (first.file, first.language, command.file) == ("app/agent.py", "python", None)
    assert written_before(command, blocks) == [first]
    done = run_block(command, tmp_path / "run", written_before(command, blocks))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "run" / "app" / "late.txt").exists()
    check_file_block(first, blocks)
    # a file block no command of its page runs checks nothing: it is refused
    with pytest.raises(AssertionError, match="no sh runnable block below it"):
        check_file_block(late, blocks)


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_runnable_block(block: Block, tmp_path: Path) -> None:
    if block.file is not None:
        check_file_block(block, BLOCKS)
        return
    done = run_block(block, tmp_path, written_before(block, BLOCKS))
    assert done.returncode == block.exit, (
        f"{block.name} exited {done.returncode}, the page says {block.exit}:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
