"""What ran: the ``provenance`` of a JSON report (v2), so a result can be traced to its cause.

A pass rate means little without knowing which agent, which judge model, which version of
the suite and of agent-health produced it. :func:`collect` gathers that once per run, from
the command line, the config and the suite's git checkout. Nothing here is secret: URLs lose
their user info and query (where tokens hide), headers and environment are never read.

An empty list's default is a lambda's, not ``list`` (why: :mod:`.report`'s docstring).
"""

import hashlib
import platform
import re
import secrets
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

import agent_health

GIT_TIMEOUT = 5.0  # seconds; a hung git (a network filesystem) must not hold up the run
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


class AgentInfo(BaseModel):
    """The agent under test, as the run reached it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str | None = Field(default=None, description="the config key or --agent value")
    connector: str | None = Field(default=None, description="rest, agui, openai, subprocess…")
    url: str | None = Field(default=None, description="without user info or query string")
    command: list[str] | None = Field(default=None, description="a started or cmd: agent")
    image: str | None = Field(default=None, description="the pinned image (cluster runs)")


class JudgeInfo(BaseModel):
    """The judge model, or why there was none."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    provider: str | None = None
    model: str | None = None
    skipped: bool = Field(default=False, description="--no-judge or AGENT_HEALTH_SKIP_JUDGE")


class SuiteInfo(BaseModel):
    """Where the tests came from: the paths given and the git commit they are at."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    paths: list[str] = Field(default_factory=lambda: [])
    git_commit: str | None = Field(default=None, description="None outside a git checkout")
    git_dirty: bool | None = Field(
        default=None, description="uncommitted or untracked changes under the suite's paths"
    )
    git_branch: str | None = Field(
        default=None, description="the branch checked out; None when detached or outside git"
    )
    name: str | None = Field(
        default=None,
        description="which suite this is, the same on every machine: the config file's folder "
        "relative to the top of its git checkout (else its absolute path); the history's "
        "baselines and trends are of one suite",
    )


class Selection(BaseModel):
    """Which of the suite's tests the run chose (``--grep``, ``--label``, ``--shard``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    grep: list[str] = Field(
        default_factory=lambda: [], description="every --grep as given (any may match)"
    )
    labels: list[str] = Field(default_factory=lambda: [])
    shard: str | None = None

    @field_validator("grep", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        """A report written when one ``--grep`` was kept (a string, or null) reads as a list."""
        if value is None:
            return []
        return [value] if isinstance(value, str) else value


class GitState(NamedTuple):
    """The git checkout holding a suite: all None outside one."""

    commit: str | None
    dirty: bool | None
    branch: str | None = None


def suite_name(folder: Path) -> str:
    """Which suite a run is (:attr:`SuiteInfo.name`): ``folder`` relative to the top of its
    git checkout (the same on a laptop and in CI), else its absolute path. Blocking (git)."""
    here = Path(folder).resolve()
    top = _git(here if here.is_dir() else here.parent, "rev-parse", "--show-toplevel")
    if not top:
        return str(here)
    try:
        return here.relative_to(Path(top).resolve()).as_posix() or "."
    except ValueError:
        return str(here)


class Provenance(BaseModel):
    """What ran. Every field is optional: a report rendered from a ledger knows less."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    run_id: str | None = Field(
        default=None,
        description="this run's id (UTC time and a random part): the history records a run "
        "once by it",
    )
    agent: AgentInfo | None = None
    agents: list[AgentInfo] = Field(
        default_factory=lambda: [], description="every agent of an agent matrix (agent: the first)"
    )
    judge: JudgeInfo | None = None
    agent_health_version: str | None = None
    python_version: str | None = None
    suite: SuiteInfo | None = None
    config_file: str | None = None
    config_hash: str | None = Field(default=None, description="sha256 of the config file")
    ledger: str | None = Field(default=None, description="the ledger URL the run recorded to")
    replay: str | None = Field(
        default=None,
        description="--replay: the recording (a ledger URL) agent.run() was answered from; "
        "the agent was not called",
    )
    replay_verified: bool | None = Field(
        default=None,
        description="--replay: true when every cell's HMAC chain (and a local run file's "
        "seal) verified with the ledger's key; false when no key was at hand, so the records "
        "could have been edited; None when the run was not a replay",
    )
    started_at: datetime | None = None
    ended_at: datetime | None = None
    command_line: list[str] = Field(default_factory=lambda: [])
    selection: Selection | None = Field(
        default=None, description="--grep, --label and --shard as given; None when not said"
    )


def version() -> str:
    """The version of the agent-health that is running: its package's ``__version__``, which
    pyproject.toml builds the distribution's from. Not ``importlib.metadata``: that reads an
    installed distribution's metadata (17 M instructions a run) and names that one, not a
    tree run from ``PYTHONPATH``."""
    return agent_health.__version__


def redact_url(url: str | None) -> str | None:
    """``url`` without user info, query or fragment (they are where credentials hide)."""
    if not url:
        return url
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with every URL in it redacted (:func:`redact_url`)."""
    return [_URL.sub(lambda m: redact_url(m.group(0)) or "", arg) for arg in argv]


def file_hash(path: Path | None) -> str | None:
    """``sha256:<hex>`` of a file's bytes, or None when there is no file."""
    if path is None or not path.is_file():
        return None
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def run_id(now: datetime | None = None) -> str:
    """A new run's id: its UTC start to the second and a random part
    (``20250101T120000Z-3f9a1c2e``), so ids sort by time and never collide."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(4)}"


def git_state(paths: Sequence[Path]) -> GitState:
    """(commit, dirty, branch) of the git checkout holding ``paths``; all None outside one.

    One ``git status`` says all three (its branch header and its entries): a run starts one
    process for them where it started three. When it fails for several paths, a second
    (``rev-parse``) tells no checkout from paths in two, which status refuses.

    Blocking (runs ``git``): call it before the event loop starts or in a thread.
    """
    if not paths:
        return GitState(None, None)
    first = paths[0].resolve()
    where = first if first.is_dir() else first.parent
    # What running the suite writes never makes it dirty: agent-health's own files
    # (.agent-health/: the history, ledgers) and Python's bytecode of the suite's files, which
    # loading them writes (a checkout without a .gitignore for it was dirty from its first run).
    own = (":(exclude,glob)**/.agent-health/**", ":(exclude,glob)**/__pycache__/**")
    status = _git(
        where,
        "status",
        "--porcelain=v2",
        "--branch",
        "--no-ahead-behind",
        "--",
        *(str(p.resolve()) for p in paths),
        *own,
    )
    if status is None:
        if len(paths) == 1:
            return GitState(None, None)  # not a checkout
        # Not a checkout; or paths in more than one, which status refuses: the first's
        # commit and branch, its state unsaid.
        commit = _git(where, "rev-parse", "HEAD")
        if commit is None:
            return GitState(None, None)
        return GitState(commit, None, _git(where, "symbolic-ref", "--quiet", "--short", "HEAD"))
    lines = status.splitlines()
    headers = {}
    for line in lines:
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            headers[key] = value
    commit = headers.get("branch.oid")
    if commit is None or commit == "(initial)":
        return GitState(None, None)  # a checkout without a commit yet
    branch = headers.get("branch.head")
    dirty = any(not line.startswith("# ") for line in lines)
    return GitState(commit, dirty, None if branch in (None, "(detached)") else branch)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def collect(
    *,
    paths: Sequence[Path],
    argv: Sequence[str],
    agent: AgentInfo | None,
    judge: JudgeInfo | None,
    config_file: Path | None,
    agents: Sequence[AgentInfo] = (),
    ledger: str | None,
    started_at: datetime,
    ended_at: datetime,
    git: GitState | None = None,
    selection: Selection | None = None,
    run: str | None = None,
    suite: str | None = None,
) -> Provenance:
    """The provenance of a local run (blocking: reads files, and runs git unless ``git``
    already holds what :func:`git_state` said). ``run``: its id (default: a new one);
    ``suite``: :func:`suite_name`."""
    commit, dirty, branch = git if git is not None else git_state(paths)
    return Provenance.model_construct(
        run_id=run or run_id(started_at),
        agent=agent,
        agents=list(agents),
        judge=judge,
        agent_health_version=version(),
        python_version=platform.python_version(),
        suite=SuiteInfo.model_construct(
            paths=[str(p) for p in paths],
            git_commit=commit,
            git_dirty=dirty,
            git_branch=branch,
            name=suite,
        ),
        config_file=str(config_file) if config_file is not None else None,
        config_hash=file_hash(config_file),
        ledger=ledger,
        started_at=started_at,
        ended_at=ended_at,
        command_line=redact_argv(argv),
        selection=selection,
    )
