"""Records as the JSON objects a writer seals, built straight from values it made itself.

``records.to_object(records.CellEnd(...), with_mac=False)`` validates every value through
pydantic and serializes it back: for a local run's cells (five records a test) that round
trip cost more than the rest of recording them. These builders give the same object — key
for key, value for value, so the same canonical bytes and the same MAC — without it:
``tests/ledger/test_ledger_objects.py`` holds each one to its model, defaults and late fields
included. They check nothing, so they are for values the engine produced (its own ids,
times, hashes and JSON-mode dumps); whatever is read back goes through
:func:`records.parse_object`, which validates.

Every value must already be JSON data (``str``, ``int``, ``float``, ``bool``, ``None``,
lists and dicts of them); a time is written with :func:`stamp`, as pydantic writes it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from agent_health.ledger import encoding

if TYPE_CHECKING:
    from agent_health.ledger import observation

Object = dict[str, Any]
VERSION = 1
"""The version of every record built here but ``mcp`` and an ``exchange`` the gateway
answered itself (``records.BASE_VERSION``)."""
GATEWAY_VERSION = 2
"""The version of an ``exchange`` the gateway answered itself (``records.GATEWAY``)."""
GATEWAY = "gateway"
"""The callee of such an exchange (``records.GATEWAY``)."""
MCP_VERSION = 4
"""The version of an ``mcp`` record (``records.MCP_VERSION``: the kind is new in it)."""
EXCHANGE_MCP_VERSION = 5
"""The version of an ``exchange`` that carries the MCP calls read in it
(``records.EXCHANGE_MCP_VERSION``: its ``mcp`` field is new in it)."""
MCP_SHARED = ("principal", "evidence", "server", "run_id", "status", "started_at")
"""The members of an ``mcp`` record a call carried by its exchange takes from the exchange
(``server`` is the exchange's ``upstream``), besides ``time``, which is its ``ended_at``."""


def stamp(moment: datetime) -> str:
    """A UTC time as pydantic's JSON mode writes it: ISO 8601, ``Z``, microseconds when set.

    >>> from datetime import UTC
    >>> stamp(datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC))
    '2026-01-02T03:04:05.006000Z'
    >>> stamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    '2026-01-02T03:04:05Z'
    """
    text = moment.isoformat()
    if not text.endswith("+00:00"):
        raise ValueError(f"ledger times are UTC; got {text}")
    return text[:-6] + "Z"


def stamp_epoch(seconds: float) -> str:
    """:func:`stamp` of a time in epoch seconds (an :class:`~.observation.Observation`'s).

    >>> stamp_epoch(1767323045.006)
    '2026-01-02T03:04:05.006000Z'
    """
    return stamp(datetime.fromtimestamp(seconds, UTC))


def stamp_now() -> str:
    """:func:`stamp` of this moment, without a ``datetime``: what the gateway dates each MCP
    call with (making and formatting a datetime cost as much as building the record).

    >>> stamp_now().endswith("Z")
    True
    """
    now = time.time_ns() // 1000
    seconds, micro = divmod(now, 1_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{micro:06d}Z" if micro else f"{text}Z"


class Clock:
    """:func:`stamp_now` and :func:`stamp` for one writer that dates many records a second
    (the gateway, two times per MCP call): the text of each second is made once, and only
    the microseconds after it each time (formatting a whole time cost as much as building
    the call's record). One per writer, never shared across threads.

    >>> from datetime import UTC
    >>> Clock().of(datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC))
    '2026-01-02T03:04:05.006000Z'
    """

    __slots__ = ("_epoch_key", "_epoch_text", "_now_key", "_now_text", "_of_key", "_of_text")

    def __init__(self) -> None:
        self._now_key = -1
        self._now_text = ""
        self._of_key: tuple[int, ...] = ()
        self._of_text = ""
        self._epoch_key: int | None = None
        self._epoch_text = ""

    def now(self) -> str:
        """:func:`stamp_now`."""
        seconds, micro = divmod(time.time_ns() // 1000, 1_000_000)
        if seconds != self._now_key:
            self._now_key = seconds
            self._now_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        text = self._now_text
        return f"{text}.{micro:06d}Z" if micro else f"{text}Z"

    def epoch(self, seconds: float) -> str:
        """:func:`stamp_epoch` of ``seconds`` (a local cell's four times: its start, its
        exchange's two ends, its end; the gateway's MCP calls' starts and their exchanges'
        starts and ends), rounded to the microsecond as
        ``datetime.fromtimestamp`` rounds it: the fraction times a million, half to even,
        carried into the second when it comes to a million."""
        fraction, whole = math.modf(seconds)
        micro = round(fraction * 1_000_000)
        if micro >= 1_000_000:
            whole += 1.0
            micro -= 1_000_000
        elif micro < 0:
            whole -= 1.0
            micro += 1_000_000
        key = int(whole)
        if key != self._epoch_key:
            moment = time.gmtime(key)
            if not 1000 <= moment.tm_year <= 9999:  # isoformat pads the year; strftime may not
                return stamp_epoch(seconds)
            self._epoch_key = key
            self._epoch_text = time.strftime("%Y-%m-%dT%H:%M:%S", moment)
        text = self._epoch_text
        return f"{text}.{micro:06d}Z" if micro else f"{text}Z"

    def of(self, moment: datetime) -> str:
        """:func:`stamp` of ``moment`` (a time in another zone is refused as it refuses it)."""
        if moment.tzinfo is not UTC:
            return stamp(moment)
        year, month, day = moment.year, moment.month, moment.day
        hour, minute, second = moment.hour, moment.minute, moment.second
        key = (year, month, day, hour, minute, second)
        if key != self._of_key:
            self._of_key = key
            self._of_text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        micro = moment.microsecond
        return f"{self._of_text}.{micro:06d}Z" if micro else f"{self._of_text}Z"


def _head(kind: str, at: str) -> Object:
    return {"version": VERSION, "seq": 0, "time": at, "kind": kind}


def _late(obj: Object, **values: Any) -> Object:
    """Add the late fields that are set (an unset one is left out, as ``to_object`` does)."""
    for name, value in values.items():
        if value is not None:
            obj[name] = value
    return obj


def cell_meta(
    *, at: str, test_id: str, repeat: int, run_id: str, agent: str | None = None
) -> Object:
    """A local cell's ``cell-meta`` (no images: nothing ran in a container), ``at`` both its
    time and its start."""
    obj = _head("cell-meta", at)
    obj.update(test_id=test_id, repeat=repeat, run_id=run_id, images={}, started_at=at)
    return _late(obj, agent=agent)


def exchange(
    seen: observation.Observation, mcp: list[Object] | None = None, clock: Clock | None = None
) -> Object:
    """The ``exchange`` record of what was seen of one exchange, dated when it ended: the one
    place an :class:`~.observation.Observation` becomes a record, for the gateway and the
    local ledger alike. Version 1, or 2 when the gateway answered the call itself
    (``upstream`` ``gateway``: :data:`GATEWAY_VERSION`).

    Token usage is the gateway's reading of the answer, or else read here from the body a
    connector kept — only from an answer that names a ``"usage"`` key (the shapes
    :mod:`.usage` reads) and was not an error: scanning every reply (a REST protocol v1
    reply has none) would cost more than the rest of the record.

    ``mcp``: the MCP calls read in the exchange, each as :func:`mcp_entry` makes it; the
    record is then version 5 (:data:`EXCHANGE_MCP_VERSION`). :func:`exchange_text` writes
    the same record as its line. ``clock``: the writer's, which dates it (else
    :func:`stamp_epoch`).
    """
    found = _usage(seen)
    at = clock.epoch if clock is not None else stamp_epoch
    ended = at(seen.ended_at)
    obj = _head("exchange", ended)
    if seen.upstream == GATEWAY:
        obj["version"] = GATEWAY_VERSION
    if mcp is not None:
        obj["version"] = EXCHANGE_MCP_VERSION
        obj["mcp"] = mcp
    obj.update(
        principal=seen.principal,
        evidence=seen.evidence,
        upstream=seen.upstream,
        run_id=seen.run_id,
        method=seen.method,
        path=seen.path,
        status=seen.status,
        started_at=at(seen.started_at),
        ended_at=ended,
        request_bytes=seen.request_bytes,
        response_bytes=seen.response_bytes,
        request_sha256=seen.request_sha256,
        response_sha256=seen.response_sha256,
        usage=found.model_dump(mode="json") if found is not None else None,
        error=seen.error,
    )
    return obj


def _usage(seen: observation.Observation) -> Any:
    """The exchange's token usage (:func:`exchange`), or None."""
    found, body, status = seen.usage, seen.body, seen.status
    answered = status is not None and status < 400  # find() below, not in: strictjson's why
    if found is None and body and answered and body.find(b'"usage"') >= 0:
        from agent_health.ledger import usage  # pydantic: loaded by the first reply with one

        found = usage.parse(body, seen.content_type)
    return found


def run_result(
    *,
    at: str,
    run_id: str,
    prompt: str | None,
    context: list[dict[str, str]] | None = None,
    output: str = "",
    trajectory: list[Object] | None = None,
    token_usage: dict[str, int] | None = None,
    duration_ms: float = 0.0,
    error: str | None = None,
    cause: str | None = None,
    unreported: list[str] | None = None,
    raw: Object | None = None,
    truncated: list[str] | None = None,
    turns: list[Object] | None = None,
    ended: dict[str, str] | None = None,
) -> Object:
    """A ``run-result``: what ``agent.run()`` returned, or (``error``, ``cause``) why not;
    a conversation's ``turns`` and why it ``ended``."""
    obj = _head("run-result", at)
    obj.update(
        run_id=run_id,
        prompt=prompt,
        context=context if context is not None else [],
        output=output,
        trajectory=trajectory if trajectory is not None else [],
        token_usage=token_usage if token_usage is not None else {},
        duration_ms=float(duration_ms),
    )
    return _late(
        obj,
        error=error,
        cause=cause,
        unreported=unreported,
        raw=raw,
        truncated=truncated,
        turns=turns,
        ended=ended,
    )


def signal(*, at: str, data: Object) -> Object:
    """A ``signal``: one signal of the body, as JSON data."""
    obj = _head("signal", at)
    obj["signal"] = data
    return obj


def cell_end(
    *,
    at: str,
    status: str,
    exit_code: int | None = None,
    error: str | None = None,
    duration_ms: float | None = None,
    cause: str | None = None,
    content_hash: str | None = None,
    insights: Object | None = None,
) -> Object:
    """A ``cell-end``: the status the controller saw, the cell's last record."""
    obj = _head("cell-end", at)
    obj.update(
        status=status,
        exit_code=exit_code,
        error=error,
        duration_ms=None if duration_ms is None else float(duration_ms),
    )
    return _late(obj, cause=cause, content_hash=content_hash, insights=insights)


def mcp_call(
    *,
    at: str,
    principal: str,
    evidence: str,
    server: str,
    run_id: str | None,
    session: str | None,
    method: str,
    id: int | str | None = None,
    name: str | None = None,
    arguments: Object | None = None,
    arguments_cut: bool = False,
    result: Object | None = None,
    result_bytes: int = 0,
    result_cut: bool = False,
    is_error: bool | None = None,
    error: Object | None = None,
    problem: str | None = None,
    status: int | None,
    started_at: str,
    ended_at: str,
) -> Object:
    """An ``mcp`` record (version 4): one MCP call the gateway read (:func:`mcp_record`,
    by name)."""
    return mcp_record(
        arguments,
        arguments_cut,
        ended_at,
        error,
        evidence,
        id,
        is_error,
        method,
        name,
        principal,
        problem,
        result,
        result_bytes,
        result_cut,
        run_id,
        server,
        session,
        started_at,
        status,
        at,
    )


def mcp_record(
    arguments: Object | None,
    arguments_cut: bool,
    ended_at: str,
    error: Object | None,
    evidence: str,
    id: int | str | None,
    is_error: bool | None,
    method: str,
    name: str | None,
    principal: str,
    problem: str | None,
    result: Object | None,
    result_bytes: int,
    result_cut: bool,
    run_id: str | None,
    server: str,
    session: str | None,
    started_at: str,
    status: int | None,
    at: str,
) -> Object:
    """:func:`mcp_call` with its members given in the record's (canonical) order, by
    position: the gateway builds one per call it proxies, so without the model's round trip
    (the record's fields hold what the MCP SDK's types already validated), and binding
    twenty members by name cost as much as building the record. Its keys go in in canonical
    order, which :func:`mcp_text` writes and the canonical encoder's sort finds in one pass."""
    return {
        "arguments": arguments,
        "arguments_cut": arguments_cut,
        "ended_at": ended_at,
        "error": error,
        "evidence": evidence,
        "id": id,
        "is_error": is_error,
        "kind": "mcp",
        "method": method,
        "name": name,
        "principal": principal,
        "problem": problem,
        "result": result,
        "result_bytes": result_bytes,
        "result_cut": result_cut,
        "run_id": run_id,
        "seq": 0,
        "server": server,
        "session": session,
        "started_at": started_at,
        "status": status,
        "time": at,
        "version": MCP_VERSION,
    }


class Written(NamedTuple):
    """A record already written as its canonical line but for the two members sealing adds:
    ``head`` holds the members that sort before ``mac`` (from the ``{``, up to a comma),
    ``middle`` those between ``mac`` and ``seq`` (up to a comma), ``tail`` those after
    ``seq`` (to the ``}``). ``chain.Sealer.line_written`` fills in both; only strings are
    held, which the garbage collector never walks."""

    kind: str
    head: str
    middle: str
    tail: str


_ascii = json.encoder.encode_basestring_ascii  # the canonical encoder's own, for one string


def mcp_text(obj: Object) -> Written:
    """:func:`mcp_call`'s record as its canonical line (its ``seq`` and ``mac`` left to the
    sealer), written member by member in canonical order: the gateway writes one per MCP
    call it proxies, and the canonical encoder spent a third of that sorting and walking
    members that are known here (``tests/ledger/test_ledger_objects.py`` holds this to
    :func:`encoding.canonical` of the object, hostile values included).

    Raises ``RecordError`` for what JSON cannot hold, as the encoder does, and ``TypeError``
    for a member of another type than :func:`mcp_call` takes (the encoder writes that one).
    """
    a, j, n = _ascii, encoding.text, int.__repr__
    arguments, error, result = obj["arguments"], obj["error"], obj["result"]
    id, is_error, status = obj["id"], obj["is_error"], obj["status"]
    name, problem, run_id, session = obj["name"], obj["problem"], obj["run_id"], obj["session"]
    cut, result_cut, size = obj["arguments_cut"], obj["result_cut"], obj["result_bytes"]
    if (
        type(cut) is not bool
        or type(result_cut) is not bool
        or type(size) is not int
        or not (is_error is None or type(is_error) is bool)
        or not (status is None or type(status) is int)
    ):
        raise TypeError("a member of an mcp record is not of the type mcp_call takes")
    head = (
        f'{{"arguments":{"null" if arguments is None else j(arguments)},'
        f'"arguments_cut":{"true" if cut else "false"},"ended_at":{a(obj["ended_at"])},'
        f'"error":{"null" if error is None else j(error)},"evidence":{a(obj["evidence"])},'
        f'"id":{"null" if id is None else a(id) if type(id) is str else j(id)},'
        f'"is_error":{"null" if is_error is None else "true" if is_error else "false"},'
        '"kind":"mcp",'
    )
    middle = (
        f'"method":{a(obj["method"])},"name":{"null" if name is None else a(name)},'
        f'"principal":{a(obj["principal"])},'
        f'"problem":{"null" if problem is None else a(problem)},'
        f'"result":{"null" if result is None else j(result)},'
        f'"result_bytes":{n(size)},"result_cut":{"true" if result_cut else "false"},'
        f'"run_id":{"null" if run_id is None else a(run_id)},'
    )
    tail = (
        f'"server":{a(obj["server"])},"session":{"null" if session is None else a(session)},'
        f'"started_at":{a(obj["started_at"])},"status":{"null" if status is None else n(status)},'
        f'"time":{a(obj["time"])},"version":{MCP_VERSION}}}'
    )
    return Written("mcp", head, middle, tail)


_ENTRY = (
    "arguments",
    "arguments_cut",
    "ended_at",
    "error",
    "id",
    "is_error",
    "method",
    "name",
    "problem",
    "result",
    "result_bytes",
    "result_cut",
    "session",
)
"""The members of a call an exchange carries (``records.McpCall``), in canonical order."""


def mcp_entry(call: Object) -> Object:
    """:func:`mcp_call`'s record as its exchange carries it (version 5): without the members
    the exchange holds for it (:data:`MCP_SHARED`), ``time``, ``kind``, ``seq`` and
    ``version``."""
    return {name: call[name] for name in _ENTRY}


def mcp_entry_text(call: Object, arguments_text: str | None = None) -> str:
    """:func:`mcp_entry` of :func:`mcp_call`'s record as its canonical text, written member
    by member (the gateway writes one per MCP call it proxies, as soon as the call is
    answered, so that its parsed arguments and result die young): held to
    :func:`encoding.text` of the entry by ``tests/ledger/test_ledger_objects.py``.
    ``arguments_text``: :func:`encoding.text` of the call's arguments, when the caller wrote
    them already (the gateway's recorder keeps that text with each call it keeps readable).

    Raises ``RecordError`` for what JSON cannot hold, as the encoder does, and ``TypeError``
    for a member of another type than :func:`mcp_call` takes.
    """
    a, j, n = _ascii, encoding.text, int.__repr__
    arguments, error, result = call["arguments"], call["error"], call["result"]
    if arguments_text is None and arguments is not None:
        arguments_text = j(arguments)
    id, is_error, session = call["id"], call["is_error"], call["session"]
    name, problem = call["name"], call["problem"]
    cut, result_cut, size = call["arguments_cut"], call["result_cut"], call["result_bytes"]
    if (
        type(cut) is not bool
        or type(result_cut) is not bool
        or type(size) is not int
        or not (is_error is None or type(is_error) is bool)
    ):
        raise TypeError("a member of an mcp call is not of the type mcp_call takes")
    return (
        f'{{"arguments":{"null" if arguments_text is None else arguments_text},'
        f'"arguments_cut":{"true" if cut else "false"},"ended_at":{a(call["ended_at"])},'
        f'"error":{"null" if error is None else j(error)},'
        f'"id":{"null" if id is None else a(id) if type(id) is str else j(id)},'
        f'"is_error":{"null" if is_error is None else "true" if is_error else "false"},'
        f'"method":{a(call["method"])},"name":{"null" if name is None else a(name)},'
        f'"problem":{"null" if problem is None else a(problem)},'
        f'"result":{"null" if result is None else j(result)},'
        f'"result_bytes":{n(size)},"result_cut":{"true" if result_cut else "false"},'
        f'"session":{"null" if session is None else a(session)}}}'
    )


def exchange_text(
    seen: observation.Observation,
    calls: list[str],
    started: str | None = None,
    ended: str | None = None,
) -> Written:
    """:func:`exchange` of ``seen`` carrying ``calls`` (each :func:`mcp_entry_text`) as its
    canonical line, written member by member (its ``seq`` and ``mac`` left to the sealer):
    what the gateway seals once per HTTP exchange on an MCP route, held to
    :func:`encoding.canonical` of :func:`exchange` by ``tests/ledger/test_ledger_objects.py``.
    ``started``, ``ended``: :func:`stamp_epoch` of its start and its end, when the caller
    made them already (the gateway's :class:`Clock` does, :meth:`Clock.epoch`).
    """
    a = _ascii
    found = _usage(seen)
    usage = "null" if found is None else encoding.text(found.model_dump(mode="json"))
    ended = a(ended or stamp_epoch(seen.ended_at))
    run_id, status, error = seen.run_id, seen.status, seen.error
    digest = seen.response_sha256
    head = (
        f'{{"ended_at":{ended},"error":{"null" if error is None else a(error)},'
        f'"evidence":{a(seen.evidence)},"kind":"exchange",'
    )
    middle = (
        f'"mcp":[{",".join(calls)}],"method":{a(seen.method)},"path":{a(seen.path)},'
        f'"principal":{a(seen.principal)},"request_bytes":{int(seen.request_bytes)},'
        f'"request_sha256":{a(seen.request_sha256)},'
        f'"response_bytes":{int(seen.response_bytes)},'
        f'"response_sha256":{"null" if digest is None else a(digest)},'
        f'"run_id":{"null" if run_id is None else a(run_id)},'
    )
    tail = (
        f'"started_at":{a(started or stamp_epoch(seen.started_at))},'
        f'"status":{"null" if status is None else int(status)},"time":{ended},'
        f'"upstream":{a(seen.upstream)},"usage":{usage},"version":{EXCHANGE_MCP_VERSION}}}'
    )
    return Written("exchange", head, middle, tail)


CALL_SHARES = (
    ("principal", "principal"),
    ("evidence", "evidence"),
    ("server", "upstream"),
    ("run_id", "run_id"),
    ("status", "status"),
    ("started_at", "started_at"),
)
"""What an MCP call carried in its exchange (version 5) takes from it when read as the
``mcp`` record it stands for: (the call's field, the exchange's field)."""


def unfold(recorded: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """``records.unfold`` for records as their JSON objects: each exchange that carries MCP
    calls (version 5) preceded by its calls as the ``mcp`` records they stand for (version
    5; the exchange's caller, server, run, status and start, ``time`` their ``ended_at``),
    then that exchange without them; every other record as it is."""
    for record in recorded:
        calls = record.get("mcp") if record.get("kind") == "exchange" else None
        if not isinstance(calls, list):
            yield record
            continue
        shared = {name: record.get(field) for name, field in CALL_SHARES}
        shared.update(version=EXCHANGE_MCP_VERSION, seq=record.get("seq"), kind="mcp")
        for call in calls:
            if isinstance(call, Mapping):
                yield {**call, **shared, "time": call.get("ended_at")}
        yield {name: value for name, value in record.items() if name != "mcp"}
