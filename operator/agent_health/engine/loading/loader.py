"""One loader for every test file and the config file.

Importing a file only declares tests. Every file is imported with the same interpreter-wide
``agent_health`` module, so every file binds the same SDK instance. A file that fails to
import is reported with its file and line, and the other files still load. Case files
(JSON, JSONL) are read by :mod:`.datasuite`; which files of a folder are test files is
:mod:`.discovery`'s to say.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from agent_health.engine.loading import discovery
from agent_health.sdk import config, declare, errors

CONFIG_NAME = "agent-health.config.py"
SKIP_DIRS = frozenset({"__pycache__", "node_modules", ".venv", "venv", ".git", ".agent-health"})
PATTERNS = ("test_*.py", "*_test.py", "*.test.py", "test_*.json", "*.cases.json")
"""The file names :func:`is_test_file` takes, as a message names them."""


class LoadError(NamedTuple):
    """A file that could not be loaded, and where."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass(eq=False, repr=False)
class Suite:
    """Everything discovered under a root."""

    root: Path
    cases: list[declare.TestCase] = field(default_factory=list)
    hooks: dict[str, list[declare.Hook]] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    warnings: list[LoadError] = field(default_factory=list)
    """Problems that do not keep a file from loading (an unknown field, --lenient's)."""
    skipped: list[str] = field(default_factory=list)
    """JSON files a folder search passed over: their names match no test_match pattern."""


def find_files(
    paths: Sequence[Path], found_by: discovery.Discovery | None = None
) -> tuple[list[Path], list[Path]]:
    """Test files named by ``paths`` (files as given, directories searched recursively),
    and the JSON files the search passed over (not test files by name, not ignored, not an
    agent-health report: :func:`is_report`)."""
    found_by = found_by or discovery.Discovery()
    found: list[Path] = []
    passed_over: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path.resolve())
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
            )
            below = Path(dirpath).relative_to(path).as_posix()
            for name in sorted(filenames):
                relative = name if below == "." else f"{below}/{name}"
                json_file = Path(name).suffix.lower() in discovery.CASE_SUFFIXES
                if json_file and is_report(Path(dirpath, name)):
                    continue  # a run's own report, written into the suite: never a test
                if found_by.is_test_file(relative):
                    found.append(Path(dirpath, name).resolve())
                elif json_file and not found_by.is_ignored(relative):
                    passed_over.append(Path(dirpath, name).resolve())
    seen: set[Path] = set()
    unique = [p for p in found if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]
    return unique, [p for p in passed_over if p not in seen]


REPORT_HEAD = rb'\A\s*\{\s*"version"\s*:\s*\d+\s*,\s*"summary"\s*:'
"""How an agent-health JSON report begins (``--reporter json`` writes its version, then its
summary); no case file format begins so. A pattern re compiles (and caches) when a folder
search first meets a JSON file: a suite of Python tests never pays for it."""


def is_report(path: Path) -> bool:
    """Whether ``path`` is an agent-health JSON report, from its first bytes: the reports a
    run writes into its suite's folder (``--reporter json:run.json``, as the README does)
    are its output, not tests, and a folder search passes them over without a word."""
    try:
        with path.open("rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return re.match(REPORT_HEAD, head) is not None


def _beside(found_by: discovery.Discovery, benchmark: Path) -> list[Path]:
    """The case files in a benchmark file's folder (what its ``testCaseIds`` name)."""
    return [
        p
        for p in sorted(benchmark.parent.iterdir())
        if p.suffix.lower() in discovery.CASE_SUFFIXES
        and p.is_file()
        and found_by.is_test_file(p.name)
    ]


def suite_root(paths: Sequence[Path]) -> Path:
    """The directory test ids are relative to: the common parent of the paths."""
    dirs = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths]
    return Path(os.path.commonpath(dirs)) if dirs else Path.cwd()


def import_file(path: Path) -> ModuleType:
    """Import ``path`` as a uniquely named module (raises what the file raises)."""
    name = "agent_health_suite_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    _hash_checked_cache(path)
    module = importlib.util.module_from_spec(spec)
    parent = str(path.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)  # sibling helpers import as in pytest's rootdir mode
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


CHECKED_HASH = 0b11
"""A bytecode cache's flags (PEP 552) when Python checks it against its source's hash."""


def _hash_checked_cache(path: Path) -> None:
    """Make the bytecode Python caches for ``path`` one it checks against the source's hash.

    Python's default cache is checked against the source's modification time, in whole
    seconds, and its size: a test edited within the second it was last loaded, to the same
    length (a digit for a digit, a tool rewriting it, a re-run on save), ran as it was before
    the edit. A cache written here with its source's hash (PEP 552) stays so — the import
    system rewrites it as it found it — so this compiles a file once, the first time it is
    loaded without one; after that a load reads eight bytes more. With
    ``PYTHONDONTWRITEBYTECODE`` it does nothing: no cache is written (one written before is
    still checked as its flags say).
    """
    if sys.dont_write_bytecode:
        return
    try:
        cached = importlib.util.cache_from_source(str(path))
    except NotImplementedError:  # an interpreter without bytecode caching
        return
    try:
        with open(cached, "rb") as f:
            head = f.read(8)
    except OSError:
        head = b""
    if head[:4] == importlib.util.MAGIC_NUMBER and head[4:8] == CHECKED_HASH.to_bytes(4, "little"):
        return
    import py_compile  # once a file, its first load

    # A file that does not compile is left to the import, which reports it as always.
    with contextlib.suppress(py_compile.PyCompileError, OSError):
        py_compile.compile(
            str(path),
            cfile=cached,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )


def _error_for(path: Path, err: BaseException, shown: str) -> LoadError:
    if isinstance(err, SyntaxError) and err.filename and Path(err.filename).resolve() == path:
        return LoadError(shown, err.lineno, f"SyntaxError: {err.msg}")
    line = None
    for frame in traceback.extract_tb(err.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    if isinstance(err, errors.AgentHealthError):
        message = str(err)
    else:
        message = f"{type(err).__name__}: {err}"
    return LoadError(shown, line, message)


def load(paths: Sequence[Path], found_by: discovery.Discovery | None = None) -> Suite:
    """Discover and declare every test under ``paths`` without running any."""
    found_by = found_by or discovery.Discovery()
    missing = [p for p in paths if not p.exists()]
    root = suite_root([p for p in paths if p.exists()] or [Path.cwd()])
    suite = Suite(root=root)
    for path in missing:
        suite.errors.append(LoadError(str(path), None, "no such file or directory"))
    files, passed_over = find_files([p for p in paths if p.exists()], found_by)
    suite.skipped = [_relative(p, root) for p in passed_over]
    from_cases: dict[str, declare.TestCase] = {}
    for path in files:
        shown = _relative(path, root)
        suite.files.append(shown)
        if path.suffix.lower() != ".py":
            _load_cases(suite, path, shown, found_by, from_cases)
            continue
        with declare.collecting(str(path)) as collector:
            try:
                import_file(path)
            except (Exception, SystemExit) as err:
                suite.errors.append(_error_for(path, err, shown))
                continue
        hooks = collector.hooks
        suite.hooks[shown] = hooks
        for case in collector.cases:
            # Completed in place: the collector that made it is dropped here, and a copy
            # (dataclasses.replace) cost a test about as much as declaring it.
            case.id = f"{shown}::{case.title}"
            case.file = shown
            case.hooks = tuple(h for h in hooks if h.applies_to(case))
            suite.cases.append(case)
    return suite


def _load_cases(
    suite: Suite,
    path: Path,
    shown: str,
    found_by: discovery.Discovery,
    from_cases: dict[str, declare.TestCase],
) -> None:
    """The tests of one case file (a benchmark's are those of the case files it names)."""
    # Loaded with the first case file: a suite of Python tests never imports case files'
    # models or the tests they declare.
    from agent_health.engine.loading import datasuite

    loaded = datasuite.load(path, found_by.cases, lambda p: _beside(found_by, p))
    for problem in loaded.problems:
        item = LoadError(_relative(Path(problem.file), suite.root), problem.line, problem.message)
        kept = suite.errors if problem.error else suite.warnings
        if item not in kept:  # a case file a benchmark names may be loaded on its own too
            kept.append(item)
    suite.hooks[shown] = []
    shown_as = {str(path): shown}  # a benchmark's cases are of the files beside it
    for case in loaded.cases:
        if case.file not in shown_as:
            shown_as[case.file] = _relative(Path(case.file), suite.root)
        placed = datasuite.relocated(case, shown_as[case.file])
        earlier = from_cases.get(placed.id)
        if earlier is None:
            from_cases[placed.id] = placed
            suite.cases.append(placed)
            continue
        # The same case from its own file and from a benchmark naming it: one test, in
        # each benchmark.
        names = [*(earlier.metadata or {}).get("benchmarks", [])]
        names += [n for n in (placed.metadata or {}).get("benchmarks", []) if n not in names]
        if names:
            earlier.metadata = {**(earlier.metadata or {}), "benchmarks": names}


def notes(suite: Suite) -> list[str]:
    """What loading has to say beside its errors, a line each: every warning, and the JSON
    files a folder search passed over (so a case file named unlike one is never silently
    not run)."""
    said = [f"warning {_printable(str(w))}" for w in suite.warnings]
    if suite.skipped:
        names = ", ".join(_printable(n) for n in suite.skipped[:5])
        more = f" and {len(suite.skipped) - 5} more" if len(suite.skipped) > 5 else ""
        many = len(suite.skipped) != 1
        said.append(
            f"skipped {len(suite.skipped)} JSON file{'s' if many else ''} whose "
            f"name{'s match' if many else ' matches'} no test_match pattern: {names}{more}; "
            "pass a file by path to run it, or add a pattern to test_match in "
            "agent-health.config.py"
        )
    return said


def _printable(text: str) -> str:
    """``text`` with each control character written as its escape (file text is not ours)."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def find_config(start: Path) -> Path | None:
    """``agent-health.config.py`` in ``start`` or the nearest parent that has one."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None) -> config.Config:
    """Import a config file and return its ``config`` (a clear error naming the file)."""
    if path is None:
        return config.Config()
    if not path.is_file():
        raise errors.ConfigError(f"{path}: config file not found")
    try:
        module = import_file(path.resolve())
    except (Exception, SystemExit) as err:
        raise errors.ConfigError(str(_error_for(path.resolve(), err, str(path)))) from err
    value = getattr(module, "config", None)
    if not isinstance(value, config.Config):
        raise errors.ConfigError(
            f"{path}: must define `config = define_config(...)`"
            + (f", found {type(value).__name__}" if value is not None else "")
        )
    # An agent's command runs from the config's folder unless it says otherwise.
    agents = {
        name: spec.model_copy(update={"cwd": str(path.resolve().parent)})
        if spec.command and spec.cwd is None
        else spec
        for name, spec in value.agents.items()
    }
    # So does a peer's (a stdio MCP server's).
    peers = {
        name: spec.model_copy(update={"cwd": str(path.resolve().parent)})
        if spec.command and spec.cwd is None
        else spec
        for name, spec in value.peers.items()
    }
    return value.model_copy(update={"source": str(path), "agents": agents, "peers": peers})
