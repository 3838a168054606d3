"""The versioned records of a cell's ledger, one JSON object per line.

Every record carries ``version`` (of the file format), ``kind`` (the discriminator),
``seq`` (0-based position in its cell, assigned by the writer), ``time`` and ``mac`` (the
HMAC chain link, see :mod:`agent_health.ledger.chain`). Lines are canonical JSON (sorted
keys, no whitespace), so a record always serializes to the same bytes. Add fields only with
defaults, and bump :data:`VERSION` for anything else.

A record is written at the lowest version that can carry it, so a reader that knows only
version 1 still reads every ledger that needs nothing newer. Version 2 adds one callee name,
``gateway``: an ``exchange`` the gateway answered itself instead of forwarding — an append to
its admin listener refused for want of the controller's token, or a call refused under load.
A version-1 reader meets such a record with "unknown record version 2; upgrade".
Version 3 adds one kind, ``spans``: OpenTelemetry spans the agent exported to the gateway's
OTLP receiver (docs/ledger.md); a cell without any is written at version 1 or 2 as before.
Version 4 adds one kind, ``mcp``: a Model Context Protocol request (``tools/call``,
``tools/list``, ``resources/read``, ``prompts/get``) the gateway read on its way to a peer
declared ``protocol: mcp``, and its answer; a cell without MCP peers has none.
Version 5 adds one field, ``mcp`` of ``exchange``: the MCP calls read in that HTTP exchange
(:class:`McpCall`, each what an ``mcp`` record holds but the members it shares with its
exchange), so a proxied call costs one sealed line as a plain call does. The gateway writes
a call that way when its exchange ends; a call whose exchange is still open when its cell
must have it on record (the controller's records, a read of the target's calls: an endless
stream) is written as a version-4 ``mcp`` record, as before. Readers take both shapes alike
through :func:`unfold`, which gives each call as its :class:`McpRecord`.

Fields added after a record kind first shipped are left out of the line while they are
unset (:data:`_Record.LATE_FIELDS`), so a record that does not use them is byte for byte
what an older writer wrote and an older reader still reads it: ``cause``, ``content_hash``
and ``insights`` of ``cell-end``, ``error``, ``cause``, ``unreported``, ``raw`` and
``truncated`` of ``run-result``, ``cell``, ``attempt``, ``restarted``, ``agent``, ``dropped``,
``dropped_why`` and ``dropped_cause`` of ``cell-meta``, ``mcp`` of ``exchange``.

Kinds, in the order a cell writes them: ``cell-meta`` (first), ``exchange``, ``spans`` and
``mcp`` (any number, from the gateway), ``run-result`` and ``signal`` (from the controller),
``cell-end`` (last).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from agent_health import statuses
from agent_health.ledger import encoding, errors, objects, strictjson
from agent_health.ledger import usage as usage_parser

VERSION: Literal[5] = 5
"""The newest version this code writes (see the module docstring for which records need it)."""
BASE_VERSION: Literal[1] = 1
"""The version of every record that needs nothing newer."""
SUPPORTED_VERSIONS = frozenset({1, 2, 3, 4, 5})
SPANS_VERSION: Literal[3] = 3  # the kind is new in it
MCP_VERSION: Literal[4] = 4  # the kind is new in it
EXCHANGE_MCP_VERSION: Literal[5] = 5  # an exchange's mcp field is new in it
MCP_METHODS = ("tools/call", "tools/list", "resources/read", "prompts/get")
"""The MCP requests the gateway records: one :class:`McpCall` of their exchange each (or one
``mcp`` record each, version 4)."""
GATEWAY = objects.GATEWAY
"""The callee of an exchange the gateway answered itself (a refused call); version 2."""
_PRINCIPAL = re.compile(r"^(controller|target|judge|peer:[A-Za-z0-9][A-Za-z0-9._-]*)$")
Status = statuses.Ended
"""What a cell's one run ended as (a cell is never ``flaky``: retries are new cells)."""
Cause = statuses.Cause


def _now() -> datetime:
    return datetime.now(UTC)


def _check_principal(value: str) -> str:
    if not _PRINCIPAL.match(value):
        raise ValueError(
            f"{value!r} is not a principal: use controller, target, judge or peer:NAME"
        )
    return value


class _Record(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    LATE_FIELDS: ClassVar[frozenset[str]] = frozenset()
    """Fields added later: written only when set (see the module docstring)."""

    version: Literal[1, 2] = BASE_VERSION
    seq: int = Field(default=0, ge=0, description="0-based position in the cell; set by Writer")
    time: datetime = Field(default_factory=_now)
    mac: str = Field(default="", description="HMAC chain link; empty until sealed by Writer")


class CellMeta(_Record):
    """What the cell is: the first record of every cell."""

    LATE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"cell", "attempt", "restarted", "agent", "dropped", "dropped_why", "dropped_cause"}
    )

    kind: Literal["cell-meta"] = "cell-meta"
    test_id: str
    repeat: int = Field(ge=0)
    run_id: str
    images: dict[str, str] = Field(
        default_factory=dict, description="container name → image pinned by digest"
    )
    started_at: datetime = Field(default_factory=_now)
    cell: str | None = Field(
        default=None,
        description="the ledger cell these records belong to (an attempt's: CELL or CELL.aN): "
        "sealed in, so a ledger cannot pass for another cell's or another attempt's",
    )
    attempt: int | None = Field(default=None, ge=0, description="0 first, N the Nth retry")
    restarted: bool | None = Field(
        default=None,
        description="set on a cell-meta the gateway appends when it starts again on a cell "
        "that already has records: what passed while it was down is not on record",
    )
    agent: str | None = Field(
        default=None, description="the agent of an agent matrix this cell ran against"
    )
    dropped: int | None = Field(
        default=None,
        ge=1,
        description="set on a cell-meta the gateway appends when it had to drop exchanges "
        "(the cell's caps, or a write the store refused): how many, so far",
    )
    dropped_why: str | None = Field(default=None, description="why they were dropped")
    dropped_cause: Literal["agent", "infra"] | None = Field(
        default=None,
        description="whom the drop blames: agent (the target's own calls and spans filled the "
        "cell's share; the controller's and peers' records alone fit it) or infra (a write "
        "the store refused, or a share too small for the controller's and peers' own "
        "records); unset on a mark of an older gateway, read as infra",
    )


class McpCall(BaseModel):
    """One MCP call read in an HTTP exchange, as the exchange's ``mcp`` list holds it
    (version 5): an :class:`McpRecord`'s fields but those its exchange already carries —
    ``principal``, ``evidence``, ``server`` (its ``upstream``), ``run_id``, ``status`` and
    ``started_at`` — and ``time`` (its ``ended_at``). :func:`unfold` gives it back as the
    :class:`McpRecord` it stands for."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    method: str = Field(description="tools/call, tools/list, resources/read or prompts/get")
    id: int | str | None = None
    name: str | None = None
    session: str | None = None
    arguments: dict[str, Any] | None = None
    arguments_cut: bool = False
    result: dict[str, Any] | None = None
    result_bytes: int = Field(default=0, ge=0)
    result_cut: bool = False
    is_error: bool | None = None
    error: dict[str, Any] | None = None
    problem: str | None = None
    ended_at: datetime


class Exchange(_Record):
    """One HTTP exchange that passed through the gateway: who called whom, and what came back;
    on a route to an MCP peer, the MCP calls read in it (``mcp``, version 5)."""

    LATE_FIELDS: ClassVar[frozenset[str]] = frozenset({"mcp"})

    kind: Literal["exchange"] = "exchange"
    version: Literal[1, 2, 5] = BASE_VERSION  # type: ignore[assignment]
    principal: str = Field(description='the caller: "controller", "target", "peer:NAME", "judge"')
    evidence: str = Field(
        default="none", description='id of the token the caller presented, or "none"'
    )
    upstream: str = Field(
        description='the callee, named like a principal, or "gateway" for a call the gateway '
        "refused itself (version 2)"
    )
    run_id: str | None = None
    method: str
    path: str
    status: int | None = Field(default=None, description="None when the upstream failed")
    started_at: datetime
    ended_at: datetime
    request_bytes: int = Field(ge=0)
    response_bytes: int = Field(default=0, ge=0)
    request_sha256: str
    response_sha256: str | None = None
    usage: usage_parser.TokenUsage | None = None
    error: str | None = None
    mcp: list[McpCall] | None = Field(
        default=None,
        description="the MCP calls read in this exchange, in the order their answers were "
        "read (version 5; a call still unanswered when the exchange ended says so in its "
        "problem)",
    )

    @model_validator(mode="before")
    @classmethod
    def _versions(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("mcp") is not None:
            if "version" not in data:
                return {**data, "version": EXCHANGE_MCP_VERSION}
            if data["version"] != EXCHANGE_MCP_VERSION:
                raise ValueError(
                    f"an exchange that carries mcp calls is a version {EXCHANGE_MCP_VERSION} record"
                )
            if not str(data.get("upstream", "")).startswith("peer:"):
                raise ValueError(
                    "only an exchange with an MCP server (upstream peer:NAME) carries mcp calls"
                )
            return data
        if data.get("version") == EXCHANGE_MCP_VERSION:
            raise ValueError(
                f"a version {EXCHANGE_MCP_VERSION} exchange carries mcp calls; this one has none"
            )
        if data.get("upstream") == GATEWAY:
            if "version" not in data:
                return {**data, "version": 2}
            if data["version"] == BASE_VERSION:
                raise ValueError(f"an exchange with upstream {GATEWAY!r} is a version 2 record")
        return data

    @field_validator("principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        return _check_principal(value)

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        if value != GATEWAY and not _PRINCIPAL.match(value):
            raise ValueError(
                f"{value!r} is not a callee: use controller, target, judge, peer:NAME or gateway"
            )
        return value


class SpansRecord(_Record):
    """OpenTelemetry spans the agent exported in one OTLP request, as the receiver kept them
    (:mod:`agent_health.ledger.otlp` gives their shape): only spans of this cell's run's
    trace; those in it that name another run are counted in ``rejected``, never kept."""

    kind: Literal["spans"] = "spans"
    version: Literal[3] = SPANS_VERSION  # type: ignore[assignment]
    principal: str = Field(description="who sent them (the target, unless a token says else)")
    evidence: str = Field(default="none", description="id of the caller's token, or none")
    run_id: str
    trace_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="the run's trace id")
    content_type: str = Field(description="application/x-protobuf or application/json")
    request_bytes: int = Field(ge=0)
    request_sha256: str
    spans: list[dict[str, Any]] = Field(default_factory=list)
    rejected: int = Field(default=0, ge=0, description="spans naming another run: not kept")
    dropped: int = Field(default=0, ge=0, description="spans past the receiver's cap: not kept")

    @field_validator("principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        return _check_principal(value)


class McpRecord(_Record):
    """One MCP request the gateway read on a route to a peer declared ``protocol: mcp``, and
    what answered it (version 4): who asked which server for which tool, with which
    arguments, and what came back. The gateway reads each message as strictly as every other
    byte an agent sends (:mod:`agent_health.ledger.strictjson`, the MCP SDK's types) and
    within the same bounds; what it could not read is said in ``problem``, never guessed."""

    kind: Literal["mcp"] = "mcp"
    version: Literal[4, 5] = MCP_VERSION  # type: ignore[assignment]
    """4 on the ledger; 5 for a call :func:`unfold` read out of a version-5 exchange."""
    principal: str = Field(description="the caller (the target, unless a token says else)")
    evidence: str = Field(default="none", description="id of the caller's token, or none")
    server: str = Field(description="the MCP server called: peer:NAME")
    run_id: str | None = None
    session: str | None = Field(
        default=None, description="the Mcp-Session-Id the call carried (or was given)"
    )
    method: str = Field(description="tools/call, tools/list, resources/read or prompts/get")
    id: int | str | None = Field(default=None, description="the JSON-RPC request id")
    name: str | None = Field(
        default=None, description="the tool or prompt called; the uri of resources/read"
    )
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="tools/call and prompts/get: the arguments sent; left out past the "
        "gateway's --mcp-keep-bytes (arguments_cut)",
    )
    arguments_cut: bool = Field(default=False, description="the arguments are not kept")
    result: dict[str, Any] | None = Field(
        default=None,
        description="the JSON-RPC result; left out past the gateway's --mcp-keep-bytes "
        "(result_cut; is_error is still read)",
    )
    result_bytes: int = Field(
        default=0, ge=0, description="bytes of the JSON answer (body or event) that carried it"
    )
    result_cut: bool = Field(default=False, description="the result is not kept")
    is_error: bool | None = Field(
        default=None,
        description="tools/call: the result's isError as the server sent it; None when no "
        "result was read",
    )
    error: dict[str, Any] | None = Field(
        default=None, description="a JSON-RPC error answer: code, message (and data)"
    )
    problem: str | None = Field(
        default=None,
        description="what the gateway could not read: a malformed message, no answer, an "
        "answer too large to read, an id used twice",
    )
    status: int | None = Field(default=None, description="the HTTP status of the exchange")
    started_at: datetime
    ended_at: datetime

    @field_validator("principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        return _check_principal(value)

    @field_validator("version")
    @classmethod
    def _alone_at_4(cls, value: int) -> int:
        if value != MCP_VERSION:
            raise ValueError(
                f"an mcp record on its own is version {MCP_VERSION} (version "
                f"{EXCHANGE_MCP_VERSION} carries MCP calls in their exchange's record)"
            )
        return value

    @field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if not value.startswith("peer:"):
            raise ValueError(f"{value!r} is not an MCP server: use peer:NAME")
        return _check_principal(value)


class RunResultRecord(_Record):
    """The agent's reply to the one ``agent.run()`` of the test, as the controller saw it;
    or, when the call failed, why (``error``, ``cause``): the gateway then saw the target
    answer, and this record says what the controller made of it."""

    LATE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"error", "cause", "unreported", "raw", "truncated", "turns", "ended"}
    )

    kind: Literal["run-result"] = "run-result"
    run_id: str
    prompt: str | None = None
    context: list[dict[str, str]] = Field(
        default_factory=list, description="the context items sent with the prompt"
    )
    output: str = ""
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    token_usage: dict[str, int] = Field(default_factory=dict)
    duration_ms: float = Field(default=0.0, ge=0)
    error: str | None = Field(default=None, description="why agent.run() failed, if it did")
    cause: Cause | None = Field(default=None, description="whom that failure blames")
    unreported: list[str] | None = Field(
        default=None,
        description='protocol fields the agent left out ("trajectory", "token_usage"): '
        "unknown, not empty",
    )
    raw: dict[str, Any] | None = Field(
        default=None,
        description="the reply's fields beyond the protocol's (e.g. the model it used), "
        "which metrics such as cost read",
    )
    truncated: list[str] | None = Field(
        default=None,
        description="fields cut to the recording's caps (output, trajectory[3].tool_output, "
        "trajectory[10000:], raw): the record is not the whole answer and cannot be replayed",
    )
    turns: list[dict[str, Any]] | None = Field(
        default=None,
        description="a conversation's turns, first to last: number, user, output, "
        "token_usage, duration_ms, unreported (each turn's steps are the trajectory's steps "
        "marked with its number); None for a single run",
    )
    ended: dict[str, str] | None = Field(
        default=None, description="why a conversation ended: reason and detail"
    )


class SignalRecord(_Record):
    """One signal (matcher, judge verdict or metric) recorded by the test body."""

    kind: Literal["signal"] = "signal"
    signal: dict[str, Any]


class CellEnd(_Record):
    """The controller's last word: the status it saw and how it exited."""

    LATE_FIELDS: ClassVar[frozenset[str]] = frozenset({"cause", "content_hash", "insights"})

    kind: Literal["cell-end"] = "cell-end"
    status: Status
    exit_code: int | None = None
    error: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    cause: Cause | None = Field(default=None, description="why an errored test errored")
    content_hash: str | None = Field(
        default=None,
        description="the test's content hash (name, labels, body), so a re-grade compares "
        "with the run's own report",
    )
    insights: dict[str, Any] | None = Field(
        default=None,
        description="what the test's insights function said ({summary, why, "
        "recommendations} or {error}); kept so a re-grade and the operator keep it",
    )


Record = Annotated[
    CellMeta | Exchange | SpansRecord | McpRecord | RunResultRecord | SignalRecord | CellEnd,
    Field(discriminator="kind"),
]
KINDS = ("cell-meta", "exchange", "spans", "mcp", "run-result", "signal", "cell-end")
_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)


def parse_line(line: str, number: int | None = None) -> Record:
    """Parse one JSONL line into its record; ``number`` (1-based) names it in errors.

    Raises :class:`~agent_health.ledger.errors.RecordError` for bad JSON, an unknown
    ``version`` or ``kind``, or fields that do not validate.
    """
    where = f"ledger line {number}" if number is not None else "ledger line"
    try:
        payload = strictjson.loads(line)
    except ValueError as err:
        raise errors.RecordError(f"{where}: not JSON ({err})", line=number) from err
    return parse_object(payload, number)


def parse_object(payload: Any, number: int | None = None) -> Record:
    """Validate an already-decoded JSON object as a record (see :func:`parse_line`)."""
    where = f"ledger line {number}" if number is not None else "ledger line"
    if not isinstance(payload, dict):
        raise errors.RecordError(
            f"{where}: expected a JSON object, got {type(payload).__name__}", line=number
        )
    version = payload.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise errors.RecordError(
            f"{where}: unknown record version {version!r}; this agent-health reads version "
            f"{', '.join(map(str, sorted(SUPPORTED_VERSIONS)))} — upgrade agent-health to read it",
            line=number,
        )
    kind = payload.get("kind")
    if kind not in KINDS:
        raise errors.RecordError(
            f"{where}: unknown record kind {kind!r}; known: {', '.join(KINDS)}", line=number
        )
    try:
        return _ADAPTER.validate_python(payload)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"][1:]) or kind
        raise errors.RecordError(
            f"{where}: {kind} record field {field!r}: {first['msg']}", line=number
        ) from err


def parse_lines(lines: list[str]) -> list[Record]:
    """Parse every non-blank line; errors name the 1-based line number."""
    return [parse_line(line, n) for n, line in enumerate(lines, start=1) if line.strip()]


def calls_of(exchange: Exchange) -> list[McpRecord]:
    """The MCP calls an exchange carries (version 5), each as the :class:`McpRecord` it
    stands for: the exchange's caller, server, run, status, start, ``seq`` and ``mac``, the
    call's own ``ended_at`` its ``time``, ``version`` 5. Built without validating again: the
    exchange and its calls were validated when read."""
    shared: dict[str, Any] = {name: getattr(exchange, field) for name, field in objects.CALL_SHARES}
    shared.update(version=EXCHANGE_MCP_VERSION, seq=exchange.seq, mac=exchange.mac, kind="mcp")
    return [
        McpRecord.model_construct(**shared, **dict(call), time=call.ended_at)
        for call in exchange.mcp or ()
    ]


def unfold(recorded: Iterable[Record]) -> Iterator[Record]:
    """``recorded`` with each exchange that carries MCP calls (version 5) preceded by its
    calls as :class:`McpRecord`\\ s (:func:`calls_of`) — the order a version-4 writer put
    them in, each call before the exchange it came in — and that exchange without them:
    what every reader of MCP calls reads, so both shapes of a ledger read alike."""
    for record in recorded:
        if isinstance(record, Exchange) and record.mcp is not None:
            yield from calls_of(record)
            yield record.model_copy(update={"mcp": None})
        else:
            yield record


def to_object(record: Record, *, with_mac: bool = True) -> dict[str, Any]:
    """The record as plain JSON data (pydantic ``mode="json"``), optionally without ``mac``;
    late fields that are unset are left out."""
    data = record.model_dump(mode="json", exclude=None if with_mac else {"mac"})
    for name in record.LATE_FIELDS:
        if data.get(name) is None:
            del data[name]
    return data


canonical = encoding.canonical
"""Stable bytes of JSON data (:func:`.encoding.canonical`, here for the records' readers)."""


def dump_line(record: Record) -> str:
    """The record as one canonical JSON line (without the newline)."""
    return canonical(to_object(record)).decode("ascii")
