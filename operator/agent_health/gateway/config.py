"""What the gateway listens on, where it forwards, and who may claim which principal.

A route is one listener: calls arriving on ``listen`` come *from* ``principal`` (as claimed
by the port; a token proves it) and go *to* ``to`` at ``upstream``. A cell has one route per
edge (docs/operator.md, "Cell anatomy"): ``controller → target``, ``target → peer:NAME`` for
each peer, and ``controller → judge``. Routes are given as repeated flags::

    --route principal=controller,listen=127.0.0.1:15001,upstream=http://127.0.0.1:8080
    --route principal=target,to=peer:tools,listen=127.0.0.1:15002,upstream=http://127.0.0.1:9000
    --route from=target,to=peer:time,listen=127.0.0.1:15003,upstream=http://127.0.0.1:9001/mcp,protocol=mcp

or as JSON (``--config FILE`` or ``$AGENT_HEALTH_GATEWAY_CONFIG``) with the fields of
:class:`Settings`. A route to a peer with ``protocol=mcp`` is read as MCP's Streamable HTTP
transport besides being recorded as exchanges (:mod:`~agent_health.gateway.mcpwire`): each
``tools/call``, ``tools/list``, ``resources/read`` and ``prompts/get`` becomes an ``mcp``
record.

>>> parse_route("principal=controller,listen=127.0.0.1:15001,upstream=http://127.0.0.1:8080").to
'target'
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agent_health.gateway import errors

TOKEN_HEADER = "X-Agent-Health-Token"
RUN_ID_HEADER = "X-Agent-Health-Run-Id"
VIA_HEADER = "X-Agent-Health-Via-Gateway"
"""On every call the gateway forwards to a peer: that peer's own token, which only the gateway
and the peer hold. A peer that answers only calls carrying it is reachable by the target
through the gateway alone (the target shares the pod's loopback, but holds no token)."""
CONFIG_ENV = "AGENT_HEALTH_GATEWAY_CONFIG"
NO_TOKEN, INVALID_TOKEN = "none", "invalid-token"  # the evidence of a call without a valid token
_PRINCIPAL = re.compile(r"^(controller|target|judge|peer:[A-Za-z0-9][A-Za-z0-9._-]*)$")
_ROUTE_KEYS = {"principal", "from", "to", "listen", "upstream", "protocol"}
ENV_TOKEN = "env:"
"""Prefix of a token source that is an environment variable (``env:VAR``), not a file."""
POOLED_CLASHES = ("cell", "run_id", "test_id", "repeat", "attempt", "agent", "key_file")
"""The settings a pooled gateway's assignment gives it: never set beside ``assignment``."""


def _principal(value: str) -> str:
    if not _PRINCIPAL.match(value):
        raise ValueError(
            f"{value!r} is not a principal: use controller, target, judge or peer:NAME"
        )
    return value


UNIX = "unix:"
"""Prefix of a listen address that is a Unix socket: ``unix:/ABSOLUTE/PATH``."""


def socket_path(value: str) -> str | None:
    """The path of a ``unix:/PATH`` listen address, else ``None`` (a TCP one)."""
    if not value.startswith(UNIX):
        return None
    path = value[len(UNIX) :]
    if not path.startswith("/") or "\0" in path:
        raise ValueError(f"listen address {value!r}: a Unix socket needs an absolute path")
    return path


def split_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:80`` for IPv6) as ``(host, port)``; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            f"listen address {value!r} is not HOST:PORT (e.g. 127.0.0.1:15001) "
            "or unix:/PATH (a Unix socket)"
        )
    return host.strip("[]"), int(port)


def check_listen(value: str) -> str:
    """``value`` if it is ``HOST:PORT`` or ``unix:/PATH``; else a ValueError saying so."""
    if socket_path(value) is None:
        split_listen(value)
    return value


class Route(BaseModel):
    """One listener: calls from ``principal`` to ``to``, forwarded to ``upstream``."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    principal: str = Field(description="who calls through this listener (claimed, see tokens)")
    to: str = Field(default="target", description="the callee, named like a principal")
    listen: str = Field(
        description="HOST:PORT to listen on, or unix:/PATH: a Unix socket, reachable only by "
        "the containers that mount its directory (a cell's controller, never its target)"
    )
    upstream: str = Field(description="base URL the calls are forwarded to")
    protocol: Literal["http", "mcp"] = Field(
        default="http",
        description="mcp: the callee is an MCP server (Streamable HTTP), whose calls are "
        "read and recorded one by one; only a route to a peer may say so",
    )

    _check_principal = field_validator("principal", "to")(_principal)

    @model_validator(mode="after")
    def _mcp_to_a_peer(self) -> Route:
        if self.protocol == "mcp" and not self.to.startswith("peer:"):
            raise ValueError(f"protocol=mcp: only a route to a peer (to=peer:NAME), not {self.to}")
        return self

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_listen(value)

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream {value!r} is not an http(s)://HOST[:PORT][/PATH] URL")
        if parts.query or parts.fragment:
            raise ValueError(f"upstream {value!r} must not have a query or fragment")
        return value.rstrip("/")

    @property
    def host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return split_listen(self.listen)[1]


class Settings(BaseModel):
    """Everything ``agent-health gateway`` is configured with."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    routes: tuple[Route, ...] = Field(min_length=1)
    ledger_url: str | None = Field(default=None, description="where exchanges go; None: nowhere")
    ledger_log: bool = Field(
        default=False,
        description="sealed records to standard output, framed (ledger.podlog), not to a store: "
        "the operator collects them from the log into a ConfigMap ledger",
    )
    key_file: str | None = Field(
        default=None, description="HMAC key file; default $AGENT_HEALTH_LEDGER_KEY"
    )
    cell: str | None = Field(default=None, description="the ledger cell every exchange goes to")
    spool: str | None = Field(
        default=None,
        description="a directory of the gateway's own (an emptyDir) where a cell's records "
        "wait until its cell-end, then go to the ledger in one write; None: write through",
    )
    spool_max_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="a cell's spool past this many bytes goes to the ledger before its end",
    )
    run_id: str | None = Field(
        default=None, description="the cell's run id (X-Agent-Health-Run-Id)"
    )
    test_id: str | None = Field(default=None, description="for the cell-meta record")
    repeat: int = Field(default=0, ge=0)
    attempt: int = Field(default=0, ge=0, description="the cell's attempt (0, then each retry)")
    agent: str | None = Field(
        default=None, description="an agent matrix's agent this cell runs (cell-meta)"
    )
    images: dict[str, str] = Field(default_factory=dict, description="container → pinned image")
    token_files: dict[str, str] = Field(
        default_factory=dict,
        description="principal → file holding its per-cell token, or env:VAR (the token is "
        "the environment variable VAR: a pooled cell's tokens come from its Secret as env)",
    )
    assignment: str | None = Field(
        default=None,
        description="a pooled cell's assignment file (ledger.assignment): the gateway listens "
        "at once, answers 503 until the file names its cell, then records that cell",
    )
    sandbox_key_env: str | None = Field(
        default=None,
        description="the environment variable holding the sandbox's own key, which unwraps "
        "the assigned cell's ledger key (with assignment)",
    )
    admin: str | None = Field(
        default=None, description="HOST:PORT or unix:/PATH for /healthz and /ledger/records"
    )
    health: str | None = Field(
        default=None,
        description="HOST:PORT answering /healthz alone (for the kubelet's probes), when the "
        "admin listener is a Unix socket only the controller reaches",
    )
    otlp_listen: str | None = Field(
        default=None,
        description="HOST:PORT of the OTLP/HTTP receiver the target exports its OpenTelemetry "
        "spans to (POST /v1/traces); they are sealed into the cell as spans records",
    )
    otlp_max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="largest OTLP body, also once inflated; a larger one is answered 413",
    )
    otlp_max_spans: int = Field(
        default=2000, ge=1, description="spans kept per run; later ones are dropped and counted"
    )
    connect_timeout: float = Field(default=10.0, gt=0)
    total_timeout: float | None = Field(default=None, gt=0, description="None: no total bound")
    idle_timeout: float = Field(default=300.0, gt=0, description="max silence while streaming")
    grace: float = Field(default=30.0, ge=0, description="how long shutdown waits for exchanges")
    usage_max_bytes: int = Field(default=1024 * 1024, ge=0, description="larger bodies: no usage")
    mcp_max_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="the most bytes of one MCP message read on a protocol=mcp route (a request "
        "body, a JSON answer, one event); a longer one passes unread, its call so recorded",
    )
    mcp_keep_bytes: int = Field(
        default=64 * 1024,
        ge=256,
        description="an MCP call's result or arguments past this many bytes of JSON are left "
        "out of its record (marked cut; isError is still read)",
    )
    # Limits: the target shares localhost with every listener, so each must hold under abuse.
    header_timeout: float = Field(
        default=30.0,
        gt=0,
        description="seconds a connection may take to send a complete request head, and may "
        "then stay idle before its next one (slowloris bytes trickled slowly are cut here)",
    )
    max_connections: int = Field(
        default=256,
        ge=1,
        description="open connections per listener; at the limit the oldest idle connection "
        "is closed for a new one, and a new one is refused when none is idle",
    )
    max_untrusted_calls: int = Field(
        default=64,
        ge=1,
        description="calls in flight per route listener from callers without a valid token "
        "(the target); more are answered 503, so trusted callers are still served",
    )
    admin_max_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="largest /ledger/records body; a larger one is answered 413",
    )
    body_timeout: float = Field(
        default=60.0, gt=0, description="seconds the admin listener waits for a request body"
    )
    max_refused_records: int = Field(
        default=100,
        ge=0,
        description="refused calls recorded per cell as exchanges; the rest are counted",
    )
    max_cell_exchanges: int | None = Field(
        default=None,
        ge=1,
        description="exchanges recorded per cell; past it they are dropped, counted and the "
        "cell marked (a ledger shared by a run's cells keeps room for each)",
    )
    max_cell_bytes: int | None = Field(
        default=None, ge=1024, description="bytes of exchange records per cell, likewise"
    )
    max_line_size: int = Field(default=8190, ge=256, description="longest request line, bytes")
    max_field_size: int = Field(default=8190, ge=256, description="longest header, bytes")
    max_headers: int = Field(default=128, ge=8, description="most headers in a request")

    @field_validator("token_files")
    @classmethod
    def _tokens(cls, value: dict[str, str]) -> dict[str, str]:
        for principal in value:
            _principal(principal)
            if principal == "target":
                raise ValueError("the target gets no token: calls without one are the target's")
        for source in value.values():
            if source == ENV_TOKEN:
                raise ValueError(f"{source!r} names no environment variable: use env:VAR")
        return value

    @field_validator("admin", "health", "otlp_listen")
    @classmethod
    def _admin(cls, value: str | None) -> str | None:
        return check_listen(value) if value is not None else None

    @model_validator(mode="after")
    def _one_ledger(self) -> Settings:
        if self.ledger_log and (self.ledger_url is not None or self.spool is not None):
            raise ValueError("ledger_log: records go to standard output; no ledger_url or spool")
        return self

    @model_validator(mode="after")
    def _pooled(self) -> Settings:
        if self.assignment is None:
            if self.sandbox_key_env is not None:
                raise ValueError("sandbox_key_env: only a pooled gateway (assignment) has one")
            return self
        clash = [name for name in POOLED_CLASHES if name in self.model_fields_set]
        if clash:
            raise ValueError(
                f"assignment: a pooled gateway takes its cell from the assignment, not "
                f"{', '.join(clash)}"
            )
        if self.sandbox_key_env is None:
            raise ValueError(
                "assignment: needs sandbox_key_env (the sandbox key unwraps its cell's)"
            )
        return self

    @model_validator(mode="after")
    def _room_for_trusted_callers(self) -> Settings:
        if self.max_untrusted_calls >= self.max_connections:
            raise ValueError(
                f"max_untrusted_calls ({self.max_untrusted_calls}) must be below "
                f"max_connections ({self.max_connections}), or the target can fill a listener"
            )
        return self


def parse_route(text: str) -> Route:
    """Parse one ``--route key=value,...`` flag (keys: principal|from, to, listen, upstream,
    protocol)."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _ROUTE_KEYS:
            raise errors.GatewayConfigError(
                f"--route {text!r}: {part!r} is not one of "
                "principal=, to=, listen=, upstream=, protocol= (comma-separated)"
            )
        fields["principal" if key == "from" else key] = value.strip()
    try:
        return Route.model_validate(fields)
    except ValidationError as err:
        raise errors.GatewayConfigError(f"--route {text!r}: {_first(err)}") from err


def build(fields: Mapping[str, object]) -> Settings:
    """Validate settings, turning pydantic's report into one line that names the field."""
    try:
        return Settings.model_validate(dict(fields))
    except ValidationError as err:
        raise errors.GatewayConfigError(f"gateway settings: {_first(err)}") from err


def _first(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def token_id(token: str) -> str:
    """The evidence recorded for a token: a short hash, never the token itself."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


class Tokens:
    """Per-principal tokens; :meth:`identify` tells who presented one."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._by_digest: dict[bytes, tuple[str, str]] = {}
        self._by_principal: dict[str, str] = {}
        for principal, token in tokens.items():
            _principal(principal)
            if not token:
                raise errors.GatewayConfigError(f"the token of {principal} is empty")
            self._by_principal[principal] = token
            digest = hashlib.sha256(token.encode("utf-8")).digest()
            self._by_digest[digest] = (principal, token_id(token))

    @classmethod
    def load(cls, files: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Tokens:
        """Read each principal's token from its file, or from the environment variable of an
        ``env:VAR`` source (surrounding whitespace ignored)."""
        environ = os.environ if environ is None else environ
        tokens = {}
        for principal, path in files.items():
            if path.startswith(ENV_TOKEN):
                variable = path[len(ENV_TOKEN) :]
                tokens[principal] = environ.get(variable, "").strip()
                if not tokens[principal]:
                    raise errors.GatewayConfigError(
                        f"the token of {principal} is the environment variable ${variable}, "
                        "which is unset or empty"
                    )
                continue
            try:
                tokens[principal] = Path(path).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise errors.GatewayConfigError(
                    f"cannot read the token file of {principal} at {path}: {err.strerror or err}"
                ) from err
            if not tokens[principal]:
                raise errors.GatewayConfigError(f"the token file of {principal} at {path} is empty")
        return cls(tokens)

    def evidence(self, presented: str | None) -> tuple[str, str]:
        """``(principal, evidence)`` of a caller: its token's principal and id, else the
        target with ``"none"`` (no token) or ``"invalid-token"`` (one nobody was given)."""
        found = self.identify(presented)
        if found is not None:
            return found
        return ("target", INVALID_TOKEN if presented else NO_TOKEN)

    def identify(self, presented: str | None) -> tuple[str, str] | None:
        """``(principal, evidence)`` for a valid token, else ``None``."""
        if not presented:
            return None
        digest = hashlib.sha256(presented.encode("utf-8")).digest()
        for known, found in self._by_digest.items():
            # Compare every digest in constant time; the table has a handful of entries.
            if hmac.compare_digest(known, digest):
                return found
        return None

    def principal_of(self, principal: str) -> bool:
        """Whether ``principal`` has a token at all."""
        return principal in self._by_principal

    def token_of(self, principal: str) -> str | None:
        """``principal``'s token, if it has one (for :data:`VIA_HEADER`)."""
        return self._by_principal.get(principal)
