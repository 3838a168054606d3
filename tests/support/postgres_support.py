"""A real PostgreSQL server for the history's tests: Debian's ``initdb`` and ``pg_ctl`` (made
sure of by ``scripts/get-postgresql.sh``, which ``make tools`` runs) as the ``postgres``
user, in a temporary directory, on a free 127.0.0.1 port, with a password (so the password
paths are tested), stopped and removed after.

The server needs root (to run as ``postgres``); without it, or without the binaries, the
tests that need it are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

USER = "agenthealth"
PASSWORD = "s3cret-Hist0ry-pw"
"""The server's password: tests check it never shows in any output."""


@dataclasses.dataclass
class Server:
    port: int
    base: Path
    counter: itertools.count[int] = dataclasses.field(default_factory=itertools.count)

    def url(self, database: str = "postgres", *, password: bool = False) -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; its name."""
        import psycopg

        name = f"history_{os.getpid()}_{next(self.counter)}"
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why a server cannot be started here (None: it can)."""
    if binaries() is None:
        return "PostgreSQL is not installed (scripts/get-postgresql.sh installs it)"
    if os.geteuid() != 0:
        return "starting PostgreSQL as the postgres user needs root"
    try:
        import psycopg  # noqa: F401
    except ModuleNotFoundError:
        return "psycopg (the postgresql extra) is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*argv: str) -> None:
    done = subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {done.stdout}{done.stderr}")


@contextlib.contextmanager
def running() -> Iterator[Server]:
    """Start a server; stop it and remove its files after."""
    bin_dir = binaries()
    assert bin_dir is not None
    base = Path(tempfile.mkdtemp(prefix="agent-health-pg-"))
    try:
        shutil.chown(base, "postgres", "postgres")
        base.chmod(0o700)
        pwfile = base / "pw"
        pwfile.write_text(PASSWORD + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        data = base / "data"
        _as_postgres(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        port = _free_port()
        options = f"-h 127.0.0.1 -p {port} -k {base} -c fsync=off"
        _as_postgres(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            options,
            "-l",
            str(base / "log"),
            "-w",
            "-t",
            "120",
            "start",
        )
        try:
            yield Server(port=port, base=base)
        finally:
            with contextlib.suppress(RuntimeError):
                _as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)
