"""The container runtime's last step, run as a program (as root): ``launcher.py SPEC.json``.

It puts itself where the container belongs, then ``exec``s the container's command, so the
process the kubelet started *is* the container:

1. joins the pod's network namespace (``setns``) and takes a mount and UTS namespace of its
   own (the pod's name as hostname);
2. builds the root filesystem: an overlay whose lower layer is this host's ``/`` and whose
   upper layer is a tmpfs (writes never reach the host), with ``/proc``, ``/sys``, a small
   ``/dev`` (null, zero, random, urandom, tty, pts, shm and the termination-log file) and
   every bind the spec lists — the image's (its venv, its copied folders), the pod's
   volumes at their ``mountPath`` (read-only where asked) and ``/etc/hosts``;
3. makes the spec's ``traverse`` paths reachable for the container's user (the host's
   interpreter may live under a private home; only the overlay's copy changes), then
   remounts the root read-only when the container asks for ``readOnlyRootFilesystem``;
4. ``chroot``s, changes to the working directory, drops to the container's uid, gid and
   groups (``fsGroup`` among them) with ``no_new_privs``, and ``exec``s the command with
   exactly the environment the kubelet composed.

Only the standard library: it runs before anything of the container exists. Exit code 127
with a message on stderr means the command could not be started (the kubelet reports it
as the container's ``StartError``).
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_NO_NEW_PRIVS = 38
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def bind(source: str, target: str, *, readonly: bool = False) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def inside(root: Path, target: str) -> Path:
    """``target`` resolved as the container will see it: symlinks (``/var/run`` → ``/run``)
    are followed inside ``root``, never on the host."""
    parts = [p for p in target.split("/") if p and p != "."]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise OSError(40, f"too many symlinks in {target}")
            link = os.readlink(candidate)
            if link.startswith("/"):
                resolved = []
            parts = [p for p in link.split("/") if p and p != "."] + parts
            continue
        resolved.append(part)
    return root.joinpath(*resolved)


def _make_target(root: Path, target: str, *, is_dir: bool) -> str:
    path = inside(root, target)
    if is_dir:
        path.mkdir(parents=True, exist_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    return str(path)


def _dev(root: Path, termination_log: dict[str, str] | None) -> None:
    dev = inside(root, "/dev")
    mount("tmpfs", str(dev), "tmpfs", MS_NOSUID, "mode=755,size=1m")
    for name in DEVICES:
        bind(f"/dev/{name}", _make_target(root, f"/dev/{name}", is_dir=False))
    bind("/dev/pts", _make_target(root, "/dev/pts", is_dir=True))
    (dev / "shm").mkdir()
    mount("tmpfs", str(dev / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for name, target in (("fd", "/proc/self/fd"), ("ptmx", "pts/ptmx")):
        (dev / name).symlink_to(target)
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        (dev / name).symlink_to(f"/proc/self/fd/{number}")
    if termination_log is not None:
        target = _make_target(root, termination_log["target"], is_dir=False)
        bind(termination_log["source"], target)


def _traversable(root: Path, paths: list[str]) -> None:
    for given in paths:
        for parent in [Path(given), *Path(given).parents]:
            found = inside(root, str(parent))
            try:
                mode = found.stat().st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                found.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def prepare(spec: dict[str, Any]) -> None:
    """Everything but the exec (see the module docstring)."""
    if spec.get("netns"):
        with open(spec["netns"]) as netns:
            _check(_libc.setns(netns.fileno(), CLONE_NEWNET), "setns")
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    hostname = spec["hostname"].encode()
    _check(_libc.sethostname(hostname, len(hostname)), "sethostname")

    state = Path(spec["state"])
    layers = state / "layers"
    layers.mkdir(exist_ok=True)
    mount("tmpfs", str(layers), "tmpfs", MS_NOSUID, "mode=700,size=256m")
    (layers / "upper").mkdir()
    (layers / "work").mkdir()
    root = state / "root"
    root.mkdir(exist_ok=True)
    mount(
        "overlay",
        str(root),
        "overlay",
        0,
        f"lowerdir=/,upperdir={layers / 'upper'},workdir={layers / 'work'}",
    )
    # Nothing may be created on the host by mistake: every path below is inside the root.
    bind("/proc", str(inside(root, "/proc")))
    bind("/sys", str(inside(root, "/sys")), readonly=True)
    _dev(root, spec.get("termination_log"))
    for entry in sorted(spec["binds"], key=lambda b: b["target"].count("/")):
        is_dir = Path(entry["source"]).is_dir()
        target = _make_target(root, entry["target"], is_dir=is_dir)
        bind(entry["source"], target, readonly=entry.get("readonly", False))
    _make_target(root, spec["workdir"], is_dir=True)
    _traversable(root, spec.get("traverse", []))
    if spec.get("read_only_root"):
        mount(None, str(root), None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.chroot(root)
    os.chdir(spec["workdir"])
    os.setgroups(spec["groups"])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    if spec.get("no_new_privs"):
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        prepare(spec)
    except OSError as err:
        print(f"container runtime: {err}", file=sys.stderr, flush=True)
        os._exit(128)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        print(
            f'exec: "{argv[0]}": {err.strerror or err} (PATH={env.get("PATH", "")})',
            file=sys.stderr,
            flush=True,
        )
        os._exit(127)


if __name__ == "__main__":
    main()
