"""Where a history lives: its URL, where it comes from, and how it is shown.

One history per project, addressed by URL:

* ``sqlite:///RELATIVE/PATH.db`` or ``sqlite:////ABSOLUTE/PATH.db`` (SQLAlchemy's spelling:
  three slashes, then the path) — the default, ``.agent-health/history.db`` beside the
  suite's config file (found as the config is found: upward from the first path given, not
  from the working directory); with no config, beside the first path given;
* ``postgresql://USER@HOST:PORT/DATABASE`` (or ``postgresql+psycopg://``) — for a team, through
  psycopg 3 (the ``postgresql`` extra). The password comes from the environment or a file,
  never from what is printed: ``PGPASSWORD`` or ``PGPASSFILE`` (libpq reads them itself),
  ``AGENT_HEALTH_HISTORY_PASSWORD_FILE`` (a file holding only the password, as a mounted
  Kubernetes Secret is), or the URL itself (allowed, never shown).

Which URL a command uses, first found first: ``--no-history`` (none), ``--history URL``,
``$AGENT_HEALTH_HISTORY``, ``history=`` in ``define_config`` (a relative ``sqlite:///``
path is relative to the config file's folder; ``history=False`` turns it off), the default.

Everything here is the standard library: a command checks its URL (an unknown scheme is a
usage error, exit 2) before anything runs, and ``--help`` or ``list`` never load SQLAlchemy.
Every message names a history by :attr:`Location.shown`: no password, no query string.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from agent_health import suitehome
from agent_health.history import errors

ENV = "AGENT_HEALTH_HISTORY"
"""The environment variable naming the history's URL (below ``--history``, above the config)."""
PASSWORD_FILE_ENV = "AGENT_HEALTH_HISTORY_PASSWORD_FILE"
"""A file holding only the PostgreSQL password (a mounted Secret); trailing newlines dropped."""
DEFAULT_PATH = suitehome.HOME / "history.db"
"""The default history, relative to the folder of the suite's config file."""
Kind = Literal["sqlite", "postgresql"]
SCHEMES: dict[str, Kind] = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
    "postgresql": "postgresql",
    "postgresql+psycopg": "postgresql",
}
"""The URL schemes a history may have, and the database each names."""
EXAMPLES = "sqlite:///PATH.db or postgresql://USER@HOST:PORT/DATABASE"


@dataclasses.dataclass(frozen=True)
class Location:
    """A history's address, checked; ``url`` may hold a password: show :attr:`shown`."""

    url: str
    kind: Kind
    origin: str = "--history"
    """Where the URL came from, for messages: ``--history``, ``$AGENT_HEALTH_HISTORY``,
    ``history= in FILE``, ``the default``."""
    path: Path | None = None
    """The database file of a ``sqlite`` history (absolute)."""

    @property
    def shown(self) -> str:
        """The URL without password or query (where credentials hide); for a SQLite file, its
        path as given."""
        return redact(self.url)

    @property
    def password(self) -> str | None:
        """The password of a PostgreSQL history from ``$AGENT_HEALTH_HISTORY_PASSWORD_FILE``,
        or ``None`` (the URL's own, ``PGPASSWORD`` and ``PGPASSFILE`` are libpq's to read)."""
        if self.kind != "postgresql":
            return None
        path = os.environ.get(PASSWORD_FILE_ENV)
        if not path:
            return None
        try:
            return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as err:
            raise errors.LocationError(
                f"cannot read the history's password file ${PASSWORD_FILE_ENV} ({path}): "
                f"{err.strerror or err}"
            ) from err


def parse(url: str, *, origin: str = "--history", base: Path | None = None) -> Location:
    """Check ``url`` and make it absolute: a relative SQLite path is taken from ``base``
    (default: the working directory). Raises :class:`~.errors.LocationError` naming
    ``origin`` for a URL that cannot name a history."""
    text = url.strip()
    scheme, sep, _ = text.partition("://")
    if not sep:
        raise errors.LocationError(
            f"{origin}: {redact(text)!r} is not a history URL; give {EXAMPLES}"
        )
    kind = SCHEMES.get(scheme.lower())
    if kind is None:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise errors.LocationError(
            f"{origin}: unknown history URL scheme {scheme!r} (known: {known}); give {EXAMPLES}"
        )
    if kind == "sqlite":
        return _sqlite(text, origin, base)
    parts = urlsplit(text)
    if not parts.hostname and "host=" not in parts.query:
        raise errors.LocationError(
            f"{origin}: {redact(text)} names no host; give postgresql://USER@HOST:PORT/DATABASE"
        )
    if not parts.path.strip("/"):
        raise errors.LocationError(
            f"{origin}: {redact(text)} names no database; give postgresql://USER@HOST:PORT/DATABASE"
        )
    return Location(url=text, kind="postgresql", origin=origin)


def _sqlite(url: str, origin: str, base: Path | None) -> Location:
    rest = url.partition("://")[2]
    where, _, query = rest.partition("?")
    if not where.startswith("/") or where == "/":
        raise errors.LocationError(
            f"{origin}: {url!r} names no file; give sqlite:///RELATIVE/PATH.db or "
            "sqlite:////ABSOLUTE/PATH.db (an in-memory history would keep nothing)"
        )
    path = Path(unquote(where[1:]))
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    path = Path(os.path.abspath(path))
    absolute = f"sqlite:///{path}" + (f"?{query}" if query else "")
    return Location(url=absolute, kind="sqlite", origin=origin, path=path)


def redact(url: str) -> str:
    """``url`` without its password and query string; any other text is returned as it is."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    if SCHEMES.get(scheme.lower()) == "sqlite":
        return f"{scheme}://{rest.partition('?')[0]}"
    try:
        parts = urlsplit(url)
        user = parts.username
        host = parts.netloc.rpartition("@")[2]
    except ValueError:  # a malformed port: show no more than the scheme
        return f"{scheme}://…"
    netloc = f"{user}@{host}" if user else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def resolve(
    flag: str | None,
    *,
    disabled: bool = False,
    configured: str | bool | None = None,
    config_file: Path | None = None,
    start: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Location | None:
    """The history a command uses (``None``: none, ``--no-history`` or ``history=False``).

    ``flag`` is ``--history``; ``configured`` the config's ``history=``; ``config_file`` the
    config file found (its folder holds the default, and is where a relative ``sqlite:///``
    in the config starts); ``start`` the first path given, for a suite without a config.
    """
    env = os.environ if environ is None else environ
    if disabled:
        if flag:
            raise errors.LocationError("--history and --no-history contradict each other")
        return None
    if flag:
        return parse(flag, origin="--history")
    if env.get(ENV):
        return parse(env[ENV], origin=f"${ENV}")
    folder = suitehome.folder(config_file, start)
    if configured is False:
        return None
    if isinstance(configured, str):
        shown = f"history= in {config_file}" if config_file else "history= in the config"
        return parse(configured, origin=shown, base=folder)
    return parse(f"sqlite:///{folder / DEFAULT_PATH}", origin="the default")


def default_location(config_file: Path | None, start: Path | None = None) -> Location:
    """``.agent-health/history.db`` beside ``config_file`` (else beside ``start``)."""
    folder = suitehome.folder(config_file, start)
    return parse(f"sqlite:///{folder / DEFAULT_PATH}", origin="the default")
