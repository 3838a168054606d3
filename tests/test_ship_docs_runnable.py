"""Every code block of README.md and docs/ marked ``runnable`` runs, as the reader would run it.

The marking (documented in docs/architecture.md, "Runnable examples in these pages") is the
fence's info string: ```` ```python runnable ```` is a test file run against the bundled
example agent, ```` ```python runnable agent ```` a REST agent and ```` ```python runnable
cmd ```` a subprocess agent, each driven by a probe test,
```` ```sh runnable ```` a shell script run beside a copy of ``examples/``; ``exit=N``
expects exit code N instead of 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from ship_support import ROOT

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

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


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
        unknown = set(options) - {"exit"}
        assert not unknown, f"{page.name}:{start + 1}: unknown runnable option {sorted(unknown)}"
        blocks.append(
            Block(page, start + 1, language, flags, int(options.get("exit", 0)), "\n".join(body))
        )
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


def run_block(block: Block, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run one block the way its marking says; return the finished process."""
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


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_runnable_block(block: Block, tmp_path: Path) -> None:
    done = run_block(block, tmp_path)
    assert done.returncode == block.exit, (
        f"{block.name} exited {done.returncode}, the page says {block.exit}:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
