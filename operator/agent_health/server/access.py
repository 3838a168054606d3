"""Who may do what: the server's guards, checked on every request before any handler.

* **Where it listens.** Bound to loopback (the default) it serves this machine's browsers
  and scripts and, like ``show-report``, answers only a ``Host`` that names it (``127.0.0.1``,
  ``localhost``, ``[::1]`` or the ``--host`` given, with its port): anything else is ``421``,
  so a page of another site that rebinds its DNS name to 127.0.0.1 cannot read or steer it.
  Anywhere else it needs a credential (:class:`Access.check` refuses to start without one).
* **Credentials.** A bearer token (``Authorization: Bearer T``; tokens are read from files,
  kept only as their SHA-256 and compared in constant time), the session cookie a page gets
  by posting a token to ``/api/session`` (the browser's ``EventSource`` sends no header), or
  an authenticating proxy's header (``--trust-header``: the proxy — an identity-aware proxy,
  oauth2-proxy — has checked who it is; the server trusts the header's value as the user).
* **Two roles.** ``read`` (every page and GET) and ``operate`` (start, cancel, suspend,
  resume, requeue, retune; a live run's results). On loopback without tokens the local user
  operates. A token is read or operate by the file it came from; a proxy's user operates
  when listed in ``--operator``.
* **Mutations are CSRF-safe.** A request that changes anything must carry the header
  ``X-Agent-Health: 1`` (a custom header: a cross-site form or image cannot send it, and
  the server never answers a CORS preflight), a JSON body, and — when the browser sends
  them — an ``Origin`` of this server and a ``Sec-Fetch-Site`` of ``same-origin`` or
  ``none``. The session cookie is ``HttpOnly`` and ``SameSite=Strict``.
* **No credential in a page.** Pages and the API never write a token, a session id or the
  history's password into what they answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from agent_health.server import errors

Role = Literal["read", "operate"]
ROLES: tuple[Role, ...] = ("read", "operate")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
CSRF_HEADER = "X-Agent-Health"
SESSION_COOKIE = "agent_health_session"
SESSION_SECONDS = 12 * 3600.0
MAX_SESSIONS = 10_000


class Refused(Exception):
    """A request the guards refuse: ``status`` (401, 403, 421) and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclasses.dataclass(frozen=True)
class Request:
    """What the guards read of a request (framework-free, so they are tested alone)."""

    method: str
    host_values: tuple[str, ...]
    port: int
    headers: Mapping[str, str]
    cookies: Mapping[str, str]
    json_body: bool


def hashed(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def read_token(path: Path, role: Role) -> str:
    """The token in ``path`` (one line; a trailing newline dropped)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise errors.SettingsError(
            f"--{role}-token-file {path}: cannot read it ({err.strerror or err})"
        ) from err
    if len(token) < 16 or any(c.isspace() for c in token):
        raise errors.SettingsError(
            f"--{role}-token-file {path}: a token is one line of at least 16 characters without "
            "spaces (make one with: openssl rand -hex 32)"
        )
    return token


@dataclasses.dataclass
class Access:
    """The guards of one server (see the module docstring)."""

    host: str = "127.0.0.1"
    tokens: dict[bytes, Role] = dataclasses.field(default_factory=dict)
    trust_header: str | None = None
    operators: frozenset[str] = frozenset()
    clock: Callable[[], float] = time.monotonic
    _sessions: dict[str, tuple[Role, float]] = dataclasses.field(default_factory=dict)
    _open: bool | None = None

    def __post_init__(self) -> None:
        own = named(self.host)
        self.names = frozenset({*LOOPBACK_NAMES, *((own,) if own else ())})

    @property
    def loopback(self) -> bool:
        """Bound to this machine only."""
        return is_loopback(self.host)

    @property
    def open_locally(self) -> bool:
        """Loopback without any credential configured: the local user operates. Decided when
        the server starts (a worker's token added later changes nothing)."""
        if self._open is None:
            self._open = self.loopback and not self.tokens and self.trust_header is None
        return self._open

    def check(self) -> None:
        """Refuse settings that would serve the history to anyone who can reach the port;
        settle whether it is open locally (before any worker's token is added)."""
        self._open = self.loopback and not self.tokens and self.trust_header is None
        if not self.loopback and not self.tokens and self.trust_header is None:
            raise errors.SettingsError(
                f"--host {self.host} is reachable from other machines: give a token "
                "(--read-token-file/--operate-token-file) or an authenticating proxy's header "
                "(--trust-header), or listen on 127.0.0.1"
            )

    def add_token(self, token: str, role: Role) -> None:
        self.tokens[hashed(token)] = role

    def forget_token(self, token: str) -> None:
        """A token that opens nothing more (a worker's, when it ended)."""
        self.tokens.pop(hashed(token), None)

    # -- per request -----------------------------------------------------------------------

    def role_of(self, request: Request) -> Role | None:
        """The role ``request`` carries (``None``: no valid credential). Raises
        :class:`Refused` for a Host that does not name this server."""
        if self.loopback and not host_allowed(list(request.host_values), self.names, request.port):
            raise Refused(
                421,
                f"agent-health serve answers only Host {' or '.join(sorted(self.names))} "
                f"with port {request.port}",
            )
        if self.open_locally:
            return "operate"
        authorization = request.headers.get("Authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return self._token_role(token.strip())
        session = request.cookies.get(SESSION_COOKIE)
        if session:
            found = self._sessions.get(session)
            if found is not None and found[1] > self._now():
                return found[0]
        if self.trust_header is not None:
            user = request.headers.get(self.trust_header, "").strip()
            if user:
                return "operate" if user in self.operators else "read"
        return None

    def _token_role(self, token: str) -> Role | None:
        given = hashed(token)
        found: Role | None = None
        for known, role in self.tokens.items():  # every one compared: no early exit to time
            if hmac.compare_digest(known, given):
                found = role
        return found

    def allow(self, request: Request, needs: Role) -> Role:
        """The role of ``request`` if it may do what needs ``needs``; else :class:`Refused`."""
        role = self.role_of(request)
        if role is None:
            raise Refused(401, "a credential is needed: Authorization: Bearer TOKEN")
        if needs == "operate" and role != "operate":
            raise Refused(403, "this needs the operate role; your credential reads only")
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            self.csrf(request)
        return role

    def csrf(self, request: Request) -> None:
        """A mutation must be a request no other site's page can make (module docstring)."""
        if request.headers.get(CSRF_HEADER) != "1":
            raise Refused(403, f"a change needs the header {CSRF_HEADER}: 1 (CSRF)")
        if not request.json_body:
            raise Refused(403, "a change needs a JSON body (Content-Type: application/json)")
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(403, f"a change from another site ({site}) is refused (CSRF)")
        origin = request.headers.get("Origin")
        if origin is not None and not self._own_origin(origin, request):
            raise Refused(403, f"a change from origin {origin} is refused (CSRF)")

    def _own_origin(self, origin: str, request: Request) -> bool:
        scheme, _, rest = origin.partition("://")
        if scheme not in ("http", "https") or not rest:
            return False
        hosts = [h.strip().lower() for h in request.host_values]
        forwarded = request.headers.get("X-Forwarded-Host", "").strip().lower()
        return rest.lower() in {*hosts, *((forwarded,) if forwarded else ())}

    # -- sessions (a page's cookie) --------------------------------------------------------

    def open_session(self, token: str) -> tuple[str, Role]:
        """A session id for a page that showed a valid ``token`` (:class:`Refused` if not)."""
        role = self._token_role(token.strip())
        if role is None:
            raise Refused(401, "that token is not one of this server's")
        now = self._now()
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions = {k: v for k, v in self._sessions.items() if v[1] > now}
        session = secrets.token_urlsafe(32)
        self._sessions[session] = (role, now + SESSION_SECONDS)
        return session, role

    def close_session(self, session: str | None) -> None:
        if session:
            self._sessions.pop(session, None)

    def _now(self) -> float:
        return float(self.clock())


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(values: list[str], names: Iterable[str], port: int) -> bool:
    """Whether a request's Host header values (exactly one is allowed) name this server."""
    if len(values) != 1:
        return False
    value = values[0].strip().lower()
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        name += bracket
    else:
        name, _, given = value.partition(":")
        rest = f":{given}" if given or value.endswith(":") else ""
    if name not in set(names):
        return False
    if not rest:
        return port == 80  # a browser leaves out only the default port
    return rest[0] == ":" and rest[1:].isdigit() and int(rest[1:]) == port


def named(host: str) -> str | None:
    """``--host`` as a Host header names it; ``None`` for an address no browser asks for
    (0.0.0.0, ::, empty: every interface)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        # A name the user chose, not one a rebinding page controls.
        return host.strip().lower() or None
    if address.is_unspecified:
        return None
    return f"[{address}]" if address.version == 6 else str(address)
