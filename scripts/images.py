"""Build, check and push agent-health's images (images/Dockerfile); `make images` runs `build`.

    scripts/images.py build [TARGET ...] [--builder docker|podman|buildah]
                            [--python-image REF] [--force]
    scripts/images.py check [TARGET ...] [--builder ...]
    scripts/images.py push --registry HOST:PORT [--insecure] [--tag TAG] [--json]
                           [--builder ...] [TARGET ...]
    scripts/images.py tags [TARGET ...]

``build`` builds every target of images/Dockerfile (operator, controller, gateway,
triage-agent, log-server, mcp-time; or the ones named) and tags each twice: with the chart's
name and version (``ghcr.io/agent-health/operator:0.1.0``, from charts/agent-health; the example
agents as examples/run.yaml names them, ``ghcr.io/agent-health/examples/triage-agent:0.1.0``)
and as ``localhost/agent-health/<target>:dev`` (what the chart's kind values name). Both
names are fully qualified, so every builder stores them as written and ``kind load`` puts
exactly them on the nodes: docker would read a bare ``agent-health/operator:dev`` as
``docker.io/agent-health/operator:dev``, podman as ``localhost/agent-health/operator:dev``,
and a node's containerd as the former, whatever was loaded.
Then it checks each image (:func:`check`) and prints its size. An image whose inputs (the
Dockerfile, everything .dockerignore lets into the build, the base image) are unchanged
since it was built and checked is not built again (``--force`` does).

The builder (``--builder``, ``make images BUILDER=...``): by default the one whose store
``kind load docker-image`` reads — docker, when its daemon answers — else podman, else
buildah (for those two, ``podman save`` and ``kind load image-archive`` load an image:
docs/operator.md). ``push`` and ``check`` read the same builder's store. Each command
first checks that the programs it needs (:func:`tools`) are installed, naming any missing.

The base: ``--python-image`` (or ``$PYTHON_IMAGE``) when given; else the Dockerfile's
pinned Docker Hub default when this machine can reach Docker Hub or already has it; else
the local Debian base scripts/base-image.sh makes, saying so.

Host settings, each said where it is set: ``CONTAINERS_CONF`` points at
scripts/containers.conf unless already set (runc, and no default ulimits; the file says
why); a CA bundle named by ``$PIP_CERT``/``$SSL_CERT_FILE``/``$REQUESTS_CA_BUNDLE`` (a
TLS-intercepting proxy's) is mounted into the build's ``RUN`` steps, never into an image.

Only the standard library and PyYAML (the project's venv runs it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "images" / "Dockerfile"
CHART = ROOT / "charts" / "agent-health"
CONTAINERS_CONF = ROOT / "scripts" / "containers.conf"
LOCAL_BASE = "localhost/agent-health/python-base:bookworm"
DEV_NAME = "localhost/agent-health/{target}:dev"
"""The name every builder gives an image for kind (the chart's ``ci/kind-values.yaml``)."""
BUILDERS = ("docker", "podman", "buildah")
INPUTS_LABEL = "dev.agent-health.inputs"
UID = 65532
# What .dockerignore lets into the build context (it is an allow-list), and what it drops
# inside those paths.
CONTEXT = ("pyproject.toml", "README.md", "operator", "examples/agents", "images/locks")
DROPPED = re.compile(r"(^|/)(__pycache__|[^/]*\.egg-info)(/|$)|\.pyc$")
# Inside a checked image, as its own user, with the root read-only: who am I, and can I
# write to my home or to the root? (Both must fail: nothing in an image may need to.)
PROBE = """
import json, os
def writable(path):
    try:
        with open(os.path.join(path, ".agent-health-probe"), "w"):
            return True
    except OSError:
        return False
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "home": os.environ.get("HOME"),
                  "home_writable": writable(os.environ.get("HOME") or "/"),
                  "root_writable": writable("/")}))
"""


class Failure(Exception):
    """A step failed; the message says which and what to do."""


def targets() -> list[str]:
    """The Dockerfile's image targets: the stages with an ENTRYPOINT, in file order."""
    found: list[str] = []
    stage: str | None = None
    for line in DOCKERFILE.read_text().splitlines():
        if m := re.match(r"^FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE):
            stage = m.group(1)
        elif line.startswith("ENTRYPOINT") and stage is not None and stage not in found:
            found.append(stage)
    return found


def chart_tags(target: str) -> list[str]:
    """The chart's name and version for ``target``, then the kind/dev name; both fully
    qualified (the module docstring says why)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    repositories = {k: v["repository"] for k, v in values["image"].items()}
    # The example agents are not the chart's: they live beside it, as examples/run.yaml names
    # them (ghcr.io/agent-health/examples/triage-agent).
    prefix = repositories["operator"].rsplit("/", 1)[0]
    repository = repositories.get(target, f"{prefix}/examples/{target}")
    return [f"{repository}:{chart['appVersion']}", DEV_NAME.format(target=target)]


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def run(argv: Sequence[str], *, check: bool = True, quiet: bool = False) -> str:
    """Run a command; its stdout (stderr goes to ours unless ``quiet``)."""
    done = subprocess.run(
        list(argv),
        env=engine_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        detail = (done.stderr or "").strip().splitlines()[-3:] if quiet else []
        raise Failure(f"{' '.join(argv[:3])} ... exited {done.returncode}; " + " ".join(detail))
    return done.stdout


def builder(wanted: str | None, *, path: str | None = None) -> str:
    """``wanted``, else the default: docker when its daemon answers (``kind load
    docker-image`` reads docker's store), else podman, else buildah. ``path``: where to look
    for them (default ``$PATH``)."""
    if wanted:
        if shutil.which(wanted, path=path) is None:
            raise Failure(f"--builder {wanted}: {wanted} is not installed")
        if wanted == "docker" and not docker_answers(path):
            raise Failure(
                "--builder docker: docker's daemon does not answer (`docker info` failed): "
                "start it, or build with podman (make images BUILDER=podman)"
            )
        return wanted
    if shutil.which("docker", path=path) and docker_answers(path):
        return "docker"
    for name in ("podman", "buildah"):
        if shutil.which(name, path=path):
            return name
    raise Failure(
        "no image builder: install docker (its daemon running), podman or buildah "
        "(scripts/get-containers.sh installs podman and buildah, as root)"
    )


def docker_answers(path: str | None = None) -> bool:
    """Whether a docker daemon answers this machine's docker client."""
    client = shutil.which("docker", path=path)
    if client is None:
        return False
    try:
        done = subprocess.run(
            [client, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def runner(build_with: str) -> str:
    """What runs containers for the checks: docker for docker builds, else podman."""
    return "docker" if build_with == "docker" else "podman"


def tools(command: str, engine: str) -> list[str]:
    """The programs ``command`` (build, check, push) runs with builder ``engine``."""
    store = "docker" if engine == "docker" else "podman"  # where an image is looked up
    needed = {
        "build": [engine, runner(engine)],
        "check": [runner(engine)],
        "push": ["skopeo", store],
    }[command]
    return list(dict.fromkeys(needed))


def require(command: str, engine: str, *, path: str | None = None) -> None:
    """Raise :class:`Failure` naming every program ``command`` needs that is not installed."""
    missing = [name for name in tools(command, engine) if shutil.which(name, path=path) is None]
    if missing:
        raise Failure(
            f"{command} with {engine} needs {', '.join(missing)}, not installed here "
            "(scripts/get-containers.sh installs podman, buildah and skopeo, as root)"
        )


def image_id(engine: str, reference: str) -> str | None:
    if engine == "buildah":
        engine = "podman"
    done = subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Id}}", reference],
        env=engine_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def label(engine: str, reference: str) -> str | None:
    done = subprocess.run(
        [engine, "image", "inspect", "--format", f'{{{{index .Labels "{INPUTS_LABEL}"}}}}',
         reference],
        env=engine_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or None if done.returncode == 0 else None


def default_base() -> str:
    m = re.search(r"^ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert m, "images/Dockerfile has no ARG PYTHON_IMAGE default"
    return m.group(1)


def base_image(given: str | None, engine: str) -> str:
    """The base to build from (see the module docstring)."""
    if given:
        return given
    pinned = default_base()
    if image_id(engine, pinned) is not None or reachable(pinned):
        return pinned
    print(
        f"images: Docker Hub cannot be reached from here; building FROM the local Debian base "
        f"{LOCAL_BASE} (scripts/base-image.sh) instead of {pinned.split('@')[0]}",
        file=sys.stderr,
    )
    if image_id(engine, LOCAL_BASE) is None:
        if engine == "docker":
            raise Failure(
                "Docker Hub cannot be reached and the local base is made with podman; pass "
                "--python-image REF (a python:3.11 image your registry mirrors)"
            )
        run([str(ROOT / "scripts" / "base-image.sh"), LOCAL_BASE])
    return LOCAL_BASE


def reachable(reference: str) -> bool:
    if not shutil.which("skopeo"):
        return True  # let the builder try, and say what it says
    name, _, digest = reference.partition("@")
    if digest and name.rfind(":") > name.rfind("/"):
        name = name.rsplit(":", 1)[0]  # skopeo takes a tag or a digest, not both
    pinned = f"{name}@{digest}" if digest else reference
    done = subprocess.run(
        ["skopeo", "inspect", "--raw", "--retry-times", "0", f"docker://{pinned}"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0


def context_files() -> Iterator[Path]:
    for name in CONTEXT:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for found in sorted(path.rglob("*")):
            if found.is_file() and not DROPPED.search(found.relative_to(ROOT).as_posix()):
                yield found


def inputs(base: str, base_id: str | None) -> str:
    """A digest of everything an image is built from."""
    digest = hashlib.sha256(f"{base} {base_id}\n".encode())
    for path in [DOCKERFILE, *context_files()]:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def ca_bundle() -> Path | None:
    for variable in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    return None


def build(names: Sequence[str], *, engine: str, base: str, force: bool) -> list[str]:
    """Build (when stale) and check each target; the ones built."""
    wanted = inputs(base, image_id(engine, base))
    built: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        mounts: list[str] = []
        bundle = ca_bundle()
        if bundle is not None and engine != "docker":
            # The build's pip must trust what this host trusts (a proxy's CA); pip reads
            # /etc/pip.conf whatever its own certificate store.
            pip_conf = Path(scratch) / "pip.conf"
            pip_conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
            mounts = ["-v", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro",
                      "-v", f"{pip_conf}:/etc/pip.conf:ro"]  # fmt: skip
        check_with = runner(engine)
        for target in names:
            tags = chart_tags(target)
            if not force and all(label(check_with, t) == wanted for t in tags):
                print(f"images: {target} is up to date ({tags[0]})", file=sys.stderr)
                continue
            command = ["bud", "--layers"] if engine == "buildah" else ["build"]
            argv = [engine, *command, "-f", str(DOCKERFILE), "--target", target]
            argv += [a for t in tags for a in ("-t", t)]
            argv += ["--label", f"{INPUTS_LABEL}={wanted}", "--build-arg", f"PYTHON_IMAGE={base}"]
            print(f"images: building {target}", file=sys.stderr)
            run([*argv, *mounts, str(ROOT)])
            try:
                check(target, tags[0], check_with)
            except Failure:
                for tag in tags:  # an image that failed its checks is never taken as built
                    run([check_with, "rmi", tag], check=False, quiet=True)
                raise
            built.append(target)
    return built


def check(target: str, reference: str, engine: str) -> dict[str, object]:
    """The image runs as uid 65532 with a read-only root and no writable home; its entry
    point's ``--help`` exits 0; ``pip check`` passes in its venv. Raises :class:`Failure`."""
    locked = [engine, "run", "--rm", "--read-only", "--network", "none", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges", "-e", "PIP_NO_CACHE_DIR=1"]  # fmt: skip
    if engine == "podman":
        locked.append("--read-only-tmpfs=false")  # podman mounts /tmp, /run writable by default
    probe = json.loads(run([*locked, "--entrypoint", "python", reference, "-c", PROBE]))
    problems = []
    if (probe["uid"], probe["gid"]) != (UID, UID):
        problems.append(f"runs as {probe['uid']}:{probe['gid']}, not {UID}:{UID}")
    if probe["home_writable"] or probe["root_writable"]:
        problems.append(f"its root or home ({probe['home']}) is writable with --read-only")
    help_done = subprocess.run(
        [*locked, reference, "--help"], env=engine_env(), capture_output=True, check=False
    )
    if help_done.returncode != 0:
        tail = help_done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        problems.append(f"its entry point's --help exited {help_done.returncode}: {tail}")
    pip_done = subprocess.run(
        [*locked, "--entrypoint", "/opt/venv/bin/pip", reference, "check"],
        env=engine_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if pip_done.returncode != 0:
        problems.append(f"pip check: {pip_done.stdout.strip() or pip_done.stderr.strip()}")
    if problems:
        raise Failure(f"image {reference} ({target}) fails its checks: " + "; ".join(problems))
    size = int(run([engine, "image", "inspect", "--format", "{{.Size}}", reference]).strip())
    print(f"images: {target:<13} {size / 1e6:6.0f} MB  {reference}: uid {UID}, read-only "
          "root, no writable home, --help and pip check pass")  # fmt: skip
    return {"target": target, "reference": reference, "size": size}


def push(
    names: Sequence[str], *, registry: str, insecure: bool, tag: str, engine: str
) -> dict[str, str]:
    """Copy each image ``engine`` built to ``registry`` as ``agent-health/<target>:<tag>``
    with skopeo; each pushed reference → the digest the registry stored."""
    pushed: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for target in names:
            source = stored(chart_tags(target)[1], engine)
            destination = f"{registry}/agent-health/{target}:{tag}"
            digest_file = Path(scratch) / target
            argv = ["skopeo", "copy", "--quiet", "--digestfile", str(digest_file)]
            if insecure:
                argv.append("--dest-tls-verify=false")
            run([*argv, source, f"docker://{destination}"])
            pushed[destination] = digest_file.read_text().strip()
    return pushed


def stored(tag: str, engine: str) -> str:
    """Where ``engine`` keeps a built image, as skopeo names it: docker's store, or the one
    podman and buildah share. Only that store: an image left in another by an earlier build
    may be stale."""
    if engine == "docker":
        if image_id("docker", tag) is not None:
            return f"docker-daemon:{tag}"
    elif image_id("podman", tag) is not None:
        return f"containers-storage:{tag}"
    raise Failure(
        f"no image {tag} in {engine}'s store: run `make images BUILDER={engine}` first (or "
        "push with --builder naming the builder you built with)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/images.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build and check the images")
    build_cmd.add_argument("--python-image", default=os.environ.get("PYTHON_IMAGE") or None)
    build_cmd.add_argument("--force", action="store_true", help="build even when up to date")
    check_cmd = commands.add_parser("check", help="check built images")
    push_cmd = commands.add_parser("push", help="push built images to a registry")
    push_cmd.add_argument("--registry", required=True, help="HOST:PORT")
    push_cmd.add_argument("--insecure", action="store_true", help="plain http, no TLS")
    push_cmd.add_argument("--tag", default="dev")
    push_cmd.add_argument("--json", action="store_true", help="print reference → digest")
    tags_cmd = commands.add_parser("tags", help="the tags build gives each image")
    for sub in (build_cmd, check_cmd, push_cmd):
        sub.add_argument(
            "--builder",
            choices=BUILDERS,
            help="default: docker when its daemon answers, else podman, else buildah",
        )
    for sub in (build_cmd, check_cmd, push_cmd, tags_cmd):
        sub.add_argument("targets", nargs="*", metavar="TARGET")
    args = parser.parse_args(argv)
    known = targets()
    names = args.targets or known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"no target {', '.join(unknown)} in images/Dockerfile (it has {known})")
    if args.command == "tags":
        for name in names:
            print(" ".join(chart_tags(name)))
        return 0
    try:
        engine = builder(args.builder)
        require(args.command, engine)
        if args.command == "build":
            base = base_image(args.python_image, "podman" if engine == "buildah" else engine)
            build(names, engine=engine, base=base, force=args.force)
        elif args.command == "check":
            for name in names:
                check(name, chart_tags(name)[0], runner(engine))
        else:
            pushed = push(
                names, registry=args.registry, insecure=args.insecure, tag=args.tag, engine=engine
            )
            for reference, digest in pushed.items():
                if not args.json:
                    print(f"{reference.rsplit(':', 1)[0]}@{digest}")
            if args.json:
                print(json.dumps(pushed, indent=2))
    except Failure as err:
        print(f"images: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
