"""The Dockerfiles under images/: what can be checked without a Docker engine.

No machine here runs a Docker daemon, so nothing is built. What is checked: hadolint passes;
every COPY source exists and survives .dockerignore; the base is pinned by digest; the final
stage copies only the builder's venv (and, for the example agents, their source), installs
nothing and runs as uid 65532; each entry point is the ``agent-health`` script with a
subcommand of the CLI; each image installs exactly the extra it needs.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from ship_support import ROOT

IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
HADOLINT = Path(sys.executable).parent / "hadolint"
DIGEST_PINNED = re.compile(r"^[\w.:/-]+@sha256:[0-9a-f]{64}$")
# Each image → (its entry point, the extra its venv installs).
EXPECTED = {
    "operator": (["agent-health", "operator"], "[operator]"),
    "controller": (["agent-health", "cell"], ""),
    "gateway": (["agent-health", "gateway"], "[gateway]"),
    "triage-agent": (["python", "/app/triage_agent.py", "--host", "0.0.0.0", "--port", "8080"], ""),
    "log-server": (["python", "/app/log_server.py", "--host", "0.0.0.0", "--port", "9000"], ""),
}
# Subcommands the CLI is being given in parallel work (the operator's reconciler and the
# cell runner); until they land, the entry points name them from the CLI contract
# (DESIGN.md §9). Remove a name here once `agent-health --help` lists it.
CONTRACT_ONLY: set[str] = set()


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(ARG defaults before the first FROM, the stages) of a Dockerfile."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            stages.append(Stage(words[0], words[2] if len(words) > 2 else None))
        elif not stages and keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def dockerignored(relative: str) -> bool:
    """Whether .dockerignore (last matching pattern wins, ``!`` re-includes) drops a path."""
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        bare = pattern.removeprefix("**/")
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(p, bare) for p in parts)
        ):
            ignored = not negate
    return ignored


def _id(path: Path) -> str:
    return path.parent.name


def test_every_image_is_there() -> None:
    assert sorted(_id(p) for p in DOCKERFILES) == sorted(EXPECTED)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_hadolint_passes(dockerfile: Path) -> None:
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_does_reject_a_careless_dockerfile(tmp_path: Path) -> None:
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python:3.11-slim\nRUN pip install flask\n")
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(careless)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "DL3013" in done.stdout  # unpinned pip install


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_the_base_is_pinned_by_digest(dockerfile: Path) -> None:
    args, stages = parse(dockerfile)
    assert len(stages) == 2, "a builder stage and a final stage"
    for stage in stages:
        base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), stage.base)
        assert DIGEST_PINNED.match(base), f"{dockerfile}: FROM {stage.base} is not pinned"
    assert stages[0].name == "builder"


def test_every_image_starts_from_the_same_base() -> None:
    bases = {parse(p)[0]["PYTHON_IMAGE"] for p in DOCKERFILES}
    assert len(bases) == 1, f"the images disagree on the base: {bases}"
    assert next(iter(bases)).startswith("docker.io/library/python:3.11")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_every_copy_source_exists_and_reaches_the_build(dockerfile: Path) -> None:
    _, stages = parse(dockerfile)
    for stage in stages:
        for keyword, rest in stage.instructions:
            if keyword not in ("COPY", "ADD"):
                continue
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            if "--from=" in rest:
                continue
            for source in words[:-1]:
                matches = list(ROOT.glob(source.rstrip("/")))
                assert matches, f"{dockerfile}: COPY source {source} does not exist"
                for match in matches:
                    relative = match.relative_to(ROOT).as_posix()
                    assert not dockerignored(relative), f"{relative} is excluded by .dockerignore"


def test_dockerignore_keeps_the_context_small() -> None:
    for kept in (
        "pyproject.toml",
        "operator/agent_health/cli/app.py",
        "examples/agents/log_server.py",
    ):
        assert not dockerignored(kept), kept
    for dropped in (".venv", ".git", ".cache/bin/helm", "tests/test_ship_images.py", "charts"):
        assert dockerignored(dropped), dropped
    assert dockerignored("operator/agent_health/cli/__pycache__/app.cpython-311.pyc")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_the_final_stage_is_small_and_runs_as_65532(dockerfile: Path) -> None:
    _, (builder, final) = parse(dockerfile)
    keywords = [k for k, _ in final.instructions]
    assert "RUN" not in keywords, "the final stage installs nothing: no build tools reach it"
    copies = [rest for k, rest in final.instructions if k == "COPY"]
    assert copies[0] == "--from=builder /opt/venv /opt/venv"
    for rest in copies[1:]:
        assert rest == "examples/agents/ /app/", rest
    users = [rest for k, rest in final.instructions if k == "USER"]
    assert users == ["65532:65532"]
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "COPY")
    assert any(k == "ENV" and "PATH=/opt/venv/bin:$PATH" in rest for k, rest in final.instructions)
    builder_runs = " ".join(rest for k, rest in builder.instructions if k == "RUN")
    assert "pip wheel" in builder_runs
    assert "python -m venv /opt/venv" in builder_runs


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_each_image_installs_only_its_extra(dockerfile: Path) -> None:
    _, (builder, _) = parse(dockerfile)
    install = next(rest for k, rest in builder.instructions if k == "RUN")
    extra = re.search(r"agent_health-\*\.whl\)(\[\w+\])?\"", install)
    assert extra, install
    assert (extra.group(1) or "") == EXPECTED[_id(dockerfile)][1]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if extra.group(1):
        assert extra.group(1).strip("[]") in declared["optional-dependencies"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_id)
def test_the_entry_point_exists(dockerfile: Path) -> None:
    _, (_, final) = parse(dockerfile)
    (entry,) = [rest for k, rest in final.instructions if k == "ENTRYPOINT"]
    argv = eval_json_array(entry)
    assert argv == EXPECTED[_id(dockerfile)][0]
    if argv[0] == "agent-health":
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert "agent-health" in scripts
        subcommands = set(_subcommands())
        assert argv[1] in subcommands | CONTRACT_ONLY, f"agent-health has no {argv[1]} command"
    else:
        workdir = [rest for k, rest in final.instructions if k == "WORKDIR"]
        assert workdir == ["/app"]
        assert (ROOT / "examples" / "agents" / Path(argv[1]).name).exists()


def test_the_contract_only_subcommands_are_not_yet_in_the_cli() -> None:
    # When the operator or cell command lands, drop it from CONTRACT_ONLY so the entry point
    # test checks it against the real CLI.
    assert not CONTRACT_ONLY & set(_subcommands())


def _subcommands() -> list[str]:
    """The subcommands ``agent-health --help`` lists (the installed console script)."""
    script = Path(sys.executable).parent / "agent-health"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    listed = re.search(r"\{([\w,-]+)\}", done.stdout)
    assert listed, done.stdout
    return listed.group(1).split(",")


def eval_json_array(text: str) -> list[str]:
    value = json.loads(text)
    assert isinstance(value, list), "ENTRYPOINT must be the exec (JSON array) form"
    return [str(v) for v in value]


async def test_the_example_peer_serves_the_log_tools_on_its_own() -> None:
    sys.path.insert(0, str(ROOT / "examples" / "agents"))
    import log_server

    runner, url = await log_server.start()
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            logs = await client.get("/search_logs", params={"service": "payment", "level": "error"})
            status = await client.get("/service_status", params={"name": "db-primary"})
            missing = await client.get("/search_logs", params={"service": "nope"})
            health = await client.get("/healthz")
    finally:
        await runner.cleanup()
    assert logs.status_code == 200
    assert "Connection refused to db-primary:5432" in logs.text
    assert status.json() == {"name": "db-primary", "status": "down"}
    assert missing.status_code == 404
    assert health.json() == {"ok": True}


async def test_the_example_peer_runs_as_a_process() -> None:
    script = ROOT / "examples" / "agents" / "log_server.py"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await process.stdout.readline()).decode()
        url = line.rsplit(" ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:"), line
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.get("/service_status", params={"name": "payment-service"})
        assert answer.json()["status"] == "degraded"
    finally:
        process.terminate()
        await process.wait()
