"""images/Dockerfile: what can be checked without a Docker engine.

No machine here runs a Docker daemon, so nothing is built. What is checked: hadolint passes;
there is one Dockerfile, with one target per image; every COPY source exists and survives
.dockerignore, and every ``COPY --from`` names an earlier stage; every base is pinned by
digest; the wheel is built once and each image installs it with exactly its extra; each
image's own stages install nothing, copy only a venv (and, for the example agents, their
source) and run as uid 65532; each entry point is the ``agent-health`` script with a
subcommand of the CLI, or an example script that exists.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_health import gateway
from agent_health.cluster.registry import registry
from agent_health.peers import PeerError
from packaging import markers, requirements, utils
from support import ship_support
from support.ship_support import ROOT

IMAGES = ROOT / "images"
DOCKERFILE = IMAGES / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
DIGEST_PINNED = re.compile(r"^[\w.:/-]+@sha256:[0-9a-f]{64}$")
# Each image target → (its entry point, the extra its venv installs).
EXPECTED = {
    "operator": (["agent-health", "operator"], "[operator,postgresql,s3,gcs]"),
    "controller": (["agent-health", "cell"], "[otel]"),
    "gateway": (["agent-health", "gateway"], "[gateway,otlp,s3,gcs]"),
    "triage-agent": (["python", "/app/triage_agent.py", "--host", "0.0.0.0", "--port", "8080"], ""),
    "log-server": (["python", "/app/log_server.py", "--host", "0.0.0.0", "--port", "9000"], ""),
    "mcp-time": (["agent-health", "mcp", "bridge"], ""),
}
# The stages each image is made of (FROM and COPY --from, transitively): one wheel for all.
USES = {
    "operator": {"wheel", "venv-operator", "runtime", "operator"},
    "controller": {"wheel", "venv-controller", "runtime", "controller"},
    "gateway": {"wheel", "venv-gateway", "runtime", "gateway"},
    "triage-agent": {"wheel", "venv", "runtime", "triage-agent"},
    "log-server": {"wheel", "venv", "runtime", "log-server"},
    "mcp-time": {"wheel", "venv-mcp-time", "runtime", "mcp-time"},
}
# Each venv stage's lock (images/locks/, `make lock`) and the extras it must hold.
LOCK_OF = {
    "venv": "images/locks/base.txt",
    "venv-operator": "images/locks/operator.txt",
    "venv-controller": "images/locks/controller.txt",
    "venv-gateway": "images/locks/gateway.txt",
    "venv-mcp-time": "images/locks/mcp-time.txt",
}
LOCK_EXTRAS = {"venv": (), "venv-operator": ("operator", "postgresql", "s3", "gcs"),
               "venv-controller": ("otel",),
               "venv-gateway": ("gateway", "otlp", "s3", "gcs"),
               "venv-mcp-time": ()}  # fmt: skip
# What a lock holds beyond the package's dependencies: its own input (images/locks/*.in).
LOCK_INPUTS = {"venv-mcp-time": "images/locks/mcp-time.in"}
# Where the images run: Linux, CPython 3.11 (the base), amd64 or arm64.
IMAGE_PLATFORMS = [
    {"python_version": "3.11", "python_full_version": "3.11.10", "sys_platform": "linux",
     "platform_system": "Linux", "platform_machine": machine, "os_name": "posix",
     "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    for machine in ("x86_64", "aarch64")
]  # fmt: skip
# Subcommands the CLI is being given in parallel work; until they land, the entry points
# name them from the CLI contract (docs/cli.md). Remove a name here once
# `agent-health --help` lists it.
CONTRACT_ONLY: set[str] = set()


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for k, rest in self.instructions if k == keyword]


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


ARGS, STAGES = parse(DOCKERFILE)
BY_NAME = {s.name: s for s in STAGES if s.name}


def copy_from(stage: Stage) -> list[str]:
    """The stages ``stage`` copies from."""
    return re.findall(r"--from=(\S+)", " ".join(stage.all("COPY")))


def chain(name: str) -> list[Stage]:
    """The stage ``name`` and the stages it is built FROM, base first."""
    stages = [BY_NAME[name]]
    while stages[0].base in BY_NAME:
        stages.insert(0, BY_NAME[stages[0].base])
    return stages


def uses(name: str) -> set[str]:
    """Every stage the target ``name`` needs, through FROM and COPY --from."""
    found: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        stage = BY_NAME[current]
        todo.extend(s for s in (stage.base, *copy_from(stage)) if s in BY_NAME)
    return found


def effective(name: str, keyword: str) -> list[str]:
    """Every ``keyword`` instruction of the target's FROM chain, in build order."""
    return [rest for stage in chain(name) for rest in stage.all(keyword)]


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


def test_one_dockerfile_with_a_target_per_image() -> None:
    assert not list(IMAGES.glob("*/Dockerfile")), "the per-image Dockerfiles are replaced"
    assert [p.name for p in IMAGES.iterdir() if "Dockerfile" in p.name] == ["Dockerfile"]
    images = [s.name for s in STAGES if s.base == "runtime"]
    assert sorted(images) == sorted(EXPECTED)
    assert len({s.name for s in STAGES}) == len(STAGES), "stage names are unique"


@pytest.mark.parametrize("image", sorted(EXPECTED))
def test_the_stages_each_image_uses(image: str) -> None:
    assert uses(image) == USES[image]


def test_hadolint_passes() -> None:
    done = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
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


def test_every_base_is_pinned_by_digest_or_an_earlier_stage() -> None:
    assert ARGS["PYTHON_IMAGE"].startswith("docker.io/library/python:3.11")
    earlier: set[str] = set()
    for stage in STAGES:
        if stage.base not in earlier:
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: ARGS.get(m[1], m[0]), stage.base)
            assert DIGEST_PINNED.match(base), f"FROM {stage.base} is not pinned"
            assert stage.base == "${PYTHON_IMAGE}", "every stage starts from the one base"
        earlier.add(stage.name or "")


def test_every_copy_source_exists_and_reaches_the_build() -> None:
    sources = 0
    earlier: set[str] = set()
    for stage in STAGES:
        for rest in stage.all("COPY") + stage.all("ADD"):
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            source_stage = re.search(r"--from=(\S+)", rest)
            if source_stage:
                assert source_stage[1] in earlier, f"COPY {rest}: no earlier stage of that name"
                continue
            for source in words[:-1]:
                matches = list(ROOT.glob(source.rstrip("/")))
                assert matches, f"COPY source {source} does not exist"
                for match in matches:
                    relative = match.relative_to(ROOT).as_posix()
                    assert not dockerignored(relative), f"{relative} is excluded by .dockerignore"
                sources += 1
        earlier.add(stage.name or "")
    assert sources >= 4


def test_dockerignore_keeps_the_context_small() -> None:
    for kept in (
        "pyproject.toml",
        "operator/agent_health/cli/app.py",
        "examples/agents/log_server.py",
    ):
        assert not dockerignored(kept), kept
    for dropped in (".venv", ".git", ".cache/bin/helm", "tests/ship/test_ship_images.py", "charts"):
        assert dockerignored(dropped), dropped
    assert dockerignored("operator/agent_health/cli/__pycache__/app.cpython-311.pyc")


def test_the_wheel_is_built_once() -> None:
    builds = [(s.name, r) for s in STAGES for r in s.all("RUN") if "pip wheel" in r]
    assert [name for name, _ in builds] == ["wheel"]
    venvs = [s for s in STAGES if "wheel" in copy_from(s)]
    assert sorted(s.name or "" for s in venvs) == [
        "venv",
        "venv-controller",
        "venv-gateway",
        "venv-mcp-time",
        "venv-operator",
    ]
    for stage in venvs:
        assert stage.all("COPY") == [f"{LOCK_OF[stage.name]} /locks/", "--from=wheel /dist /dist"]
        dependencies, wheel = stage.all("RUN")
        assert "python -m venv /opt/venv" in dependencies
        for install in (dependencies, wheel):
            assert "pip install" in install
            assert "pip wheel" not in install


@pytest.mark.parametrize("image", sorted(EXPECTED))
def test_each_image_installs_only_its_extra(image: str) -> None:
    (venv,) = [s for s in copy_from(BY_NAME[image]) if s.startswith("venv")]
    install = BY_NAME[venv].all("RUN")[-1]  # the wheel's, after the locked dependencies
    extra = re.search(r"agent_health-\*\.whl\)(\[[\w,]+\])?\"", install)
    assert extra, install
    assert (extra[1] or "") == EXPECTED[image][1]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name in filter(None, (extra[1] or "").strip("[]").split(",")):
        assert name in declared["optional-dependencies"]


@pytest.mark.parametrize("image", sorted(EXPECTED))
def test_the_image_installs_nothing_and_runs_as_65532(image: str) -> None:
    own = chain(image)  # from `runtime`, whose base is the pinned Python image
    assert [s.name for s in own] == ["runtime", image]
    assert not [r for s in own for r in s.all("RUN")], "no build tool reaches an image"
    copies = [r for s in own for r in s.all("COPY")]
    assert copies[0] == f"--from={copy_from(BY_NAME[image])[0]} /opt/venv /opt/venv"
    for rest in copies[1:]:
        assert rest == "examples/agents/ /app/", rest
    assert effective(image, "USER")[-1] == "65532:65532"
    assert any("PATH=/opt/venv/bin:$PATH" in rest for rest in effective(image, "ENV"))


@pytest.mark.parametrize("image", sorted(EXPECTED))
def test_the_entry_point_exists(image: str) -> None:
    (entry,) = effective(image, "ENTRYPOINT")
    argv = eval_json_array(entry)
    assert argv == EXPECTED[image][0]
    if argv[0] == "agent-health":
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert "agent-health" in scripts
        subcommands = set(_subcommands())
        assert argv[1] in subcommands | CONTRACT_ONLY, f"agent-health has no {argv[1]} command"
    else:
        assert effective(image, "WORKDIR")[-1] == "/app"
        assert (ROOT / "examples" / "agents" / Path(argv[1]).name).exists()


# -- the names the images get, and the builder that makes them -------------------------------


def test_every_image_is_named_in_full_and_the_kind_values_ask_for_the_operators_name() -> None:
    # Both names `make images` gives are fully qualified, so docker, podman and buildah store
    # them as written (a bare agent-health/operator is docker.io's to docker and to a node's
    # containerd, localhost's to podman) and `kind load` puts exactly them on the nodes.
    script = ship_support.images_script()
    for target in script.targets():
        for name in script.chart_tags(target):
            ref = registry.parse(name)
            assert name == f"{ref.name}:{ref.tag}", f"{name} is not a fully qualified name"
    documents = ship_support.render(ship_support.helm(), "kind")
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    never = [
        c["image"]
        for c in deployment["spec"]["template"]["spec"]["containers"]
        if c.get("imagePullPolicy") == "Never"
    ]
    assert never == [script.chart_tags("operator")[1]]


def _program(directory: Path, name: str, exit_code: int) -> None:
    """A stand-in for a container tool that answers every command with ``exit_code`` (for
    docker: whether its daemon answers ``docker info``)."""
    path = directory / name
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)


def test_the_default_builder_is_the_one_kind_loads_from_else_podman_else_buildah(
    tmp_path: Path,
) -> None:
    script = ship_support.images_script()
    path = str(tmp_path)
    for name in ("podman", "buildah"):
        _program(tmp_path, name, 0)
    _program(tmp_path, "docker", 0)
    assert script.builder(None, path=path) == "docker"  # `kind load docker-image` reads it
    _program(tmp_path, "docker", 1)  # a docker client whose daemon does not answer
    assert script.builder(None, path=path) == "podman"
    with pytest.raises(script.Failure, match="docker's daemon does not answer"):
        script.builder("docker", path=path)
    assert script.builder("buildah", path=path) == "buildah"
    (tmp_path / "podman").unlink()
    assert script.builder(None, path=path) == "buildah"
    (tmp_path / "buildah").unlink()
    with pytest.raises(script.Failure, match="no image builder"):
        script.builder(None, path=path)


def test_make_images_takes_the_builder() -> None:
    chosen = ship_support.run(["make", "-n", "images", "BUILDER=podman"])
    assert "scripts/images.py build --builder podman" in chosen.stdout, chosen.stdout
    default = ship_support.run(["make", "-n", "images"])
    assert "--builder" not in default.stdout.splitlines()[-1], default.stdout


def test_push_needs_skopeo_and_reads_the_builders_own_store(tmp_path: Path) -> None:
    script = ship_support.images_script()
    assert script.tools("push", "docker") == ["skopeo", "docker"]
    assert script.tools("push", "buildah") == ["skopeo", "podman"]
    _program(tmp_path, "podman", 0)
    with pytest.raises(script.Failure, match="push with podman needs skopeo"):
        script.require("push", "podman", path=str(tmp_path))


def test_the_contract_only_subcommands_are_not_yet_in_the_cli() -> None:
    # When a command lands, drop it from CONTRACT_ONLY so the entry point test checks it
    # against the real CLI.
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


async def test_in_a_cell_the_example_peer_serves_only_the_gateways_calls(tmp_path: Path) -> None:
    """The peer process as a cell runs it: its own token in $AGENT_HEALTH_TOKEN_FILE. A call
    without the gateway's header (the target, straight over loopback) is refused."""
    import log_server

    assert log_server.VIA_HEADER == gateway.VIA_HEADER  # the example speaks the gateway's header
    token = "peer-logs-token-c41d"
    (tmp_path / "token").write_text(token + "\n")
    script = ROOT / "examples" / "agents" / "log_server.py"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), "--port", "0",
        env={**os.environ, "AGENT_HEALTH_TOKEN_FILE": str(tmp_path / "token")},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = (await process.stdout.readline()).decode().rsplit(" ", 1)[-1].strip()
        async with httpx.AsyncClient(base_url=url) as client:
            direct = await client.get("/service_status", params={"name": "db-primary"})
            guessed = await client.get(
                "/service_status", params={"name": "db-primary"}, headers={gateway.VIA_HEADER: "x"}
            )
            forwarded = await client.get(
                "/service_status",
                params={"name": "db-primary"},
                headers={gateway.VIA_HEADER: token},
            )
            health = await client.get("/healthz")  # the kubelet's probe carries no header
    finally:
        process.terminate()
        await process.wait()
    assert (direct.status_code, guessed.status_code) == (403, 403)
    assert forwarded.json() == {"name": "db-primary", "status": "down"}
    assert health.json() == {"ok": True}


async def test_the_example_peer_refuses_to_start_on_an_empty_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    script = ROOT / "examples" / "agents" / "log_server.py"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), "--port", "0",
        env={**os.environ, "AGENT_HEALTH_TOKEN_FILE": str(tmp_path / "token")},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    assert process.returncode != 0
    assert b"is empty" in err


def read_lock(text: str) -> dict[str, tuple[str, str | None, list[str]]]:
    """A pip hash-checking requirements file: name → (version, marker, sha256 hashes)."""
    found: dict[str, tuple[str, str | None, list[str]]] = {}
    for entry in re.sub(r"\\\n\s*", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
        spec = re.sub(r"--hash=\S+", "", entry).strip()
        req = requirements.Requirement(spec)
        (pin,) = req.specifier  # exactly one `==`
        assert pin.operator == "==", f"{spec}: not pinned with =="
        found[utils.canonicalize_name(req.name)] = (
            pin.version,
            str(req.marker or "") or None,
            hashes,
        )
    return found


def test_lock_reader_refuses_what_pip_would_not_take_as_locked() -> None:
    with pytest.raises(AssertionError, match="not pinned"):
        read_lock("aiohttp>=3.14 --hash=sha256:" + "0" * 64)
    assert read_lock("a==1 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via b\n") == {
        "a": ("1", None, ["a" * 64])
    }


@pytest.mark.parametrize("stage", sorted(LOCK_OF))
def test_every_venv_installs_its_hash_locked_dependencies_then_the_wheel_alone(
    stage: str,
) -> None:
    """The images' dependencies are the locked bytes: pip's hash-checking mode refuses any
    artifact whose sha256 is not in the lock, and the wheel brings no dependency of its own."""
    dependencies, wheel = BY_NAME[stage].all("RUN")
    steps = [step.strip() for step in dependencies.split("&&")]
    lock = "/locks/" + Path(LOCK_OF[stage]).name
    assert steps == [
        "python -m venv /opt/venv",
        f"/opt/venv/bin/pip install --require-hashes --no-deps -r {lock}",
    ]
    steps = [step.strip() for step in wheel.split("&&")]
    assert steps[0].startswith("/opt/venv/bin/pip install --no-deps ")
    assert "agent_health-*.whl" in steps[0]
    assert steps[1] == "/opt/venv/bin/pip check"
    # The dependencies' layer comes before the wheel's: a code change keeps the downloads.
    instructions = BY_NAME[stage].instructions
    assert (
        instructions.index(("RUN", dependencies))
        < instructions.index(("COPY", "--from=wheel /dist /dist"))
        < instructions.index(("RUN", wheel))
    )
    for name, (version, _, hashes) in read_lock((ROOT / LOCK_OF[stage]).read_text()).items():
        assert hashes, f"{LOCK_OF[stage]}: {name}=={version} has no --hash"


@pytest.mark.parametrize("stage", sorted(LOCK_OF))
def test_each_lock_satisfies_pyproject_for_its_image(stage: str) -> None:
    """A dependency added or raised in pyproject.toml fails here until `make lock` is run."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in LOCK_EXTRAS[stage]:
        wanted += project["optional-dependencies"][extra]
    if stage in LOCK_INPUTS:
        lines = (ROOT / LOCK_INPUTS[stage]).read_text().splitlines()
        wanted += [line for line in lines if line.strip() and not line.startswith("#")]
    locked = read_lock((ROOT / LOCK_OF[stage]).read_text())
    for platform in IMAGE_PLATFORMS:
        env: dict[str, Any] = dict(platform)
        installed = {
            name: version
            for name, (version, marker, _) in locked.items()
            if marker is None or markers.Marker(marker).evaluate(env)
        }
        for line in wanted:
            req = requirements.Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env | {"extra": ""}):
                continue
            name = utils.canonicalize_name(req.name)
            assert name in installed, f"{LOCK_OF[stage]} lacks {line}: run `make lock`"
            assert req.specifier.contains(installed[name], prereleases=True), (
                f"{LOCK_OF[stage]} pins {name}=={installed[name]}, outside {line}: run `make lock`"
            )


def test_the_object_store_extras_are_in_the_images_that_touch_ledgers() -> None:
    """The documented gs:// and s3:// ledgers work as shipped: the operator grades from them
    and the gateway writes them."""
    for stage in ("venv-operator", "venv-gateway"):
        locked = read_lock((ROOT / LOCK_OF[stage]).read_text())
        assert {"fsspec", "s3fs", "gcsfs"} <= set(locked), stage
    assert "gcsfs" not in read_lock((ROOT / LOCK_OF["venv"]).read_text())


async def test_the_example_mcp_peer_is_mcp_server_time_behind_the_bridge() -> None:
    """The mcp-time image's CMD: the bridge on :9100 in front of the real mcp-server-time (its
    arguments are its CMD, so the image check's ``--help`` reaches the bridge). Run as the
    image would, on loopback, it serves that server's tools."""
    from agent_health.peers import catalog

    (cmd,) = effective("mcp-time", "CMD")
    argv = eval_json_array(cmd)
    assert argv[:3] == ["--listen", "0.0.0.0:9100", "--"]
    assert effective("mcp-time", "EXPOSE") == ["9100"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "agent-health"), "mcp", "bridge",
               "--listen", f"127.0.0.1:{port}", *argv[2:]]  # fmt: skip
    venv = str(Path(sys.executable).parent)  # first on PATH, as /opt/venv/bin in the image
    env = {**os.environ, "PATH": f"{venv}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, stderr=asyncio.subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(300):
            try:
                tools = await catalog.tools_of(url, timeout=30)
                break
            except PeerError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the bridge never listed tools at {url}")
    finally:
        proc.terminate()
        await proc.wait()
    assert tools == ["get_current_time", "convert_time"]
