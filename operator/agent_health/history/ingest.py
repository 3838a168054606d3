"""A run report turned into the history's rows, inside the caller's transaction.

:func:`record` writes one run per agent (an agent matrix: one per agent, sharing a group
uid): the run's row (counts, intervals, cost, git, judge, CI, where its report and ledger
are), the agent's identity (found or added), each test (found, added, or its title, place
and labels brought up to date), each distinct content hash once, and one compact row per
(test, repeat). Then the run's trend against the previous run of the same agent and suite
is worked out (the paired test ``compare`` uses) and kept on its row, so that listing runs
reads no result; a run recorded out of order (an import of an older report) also renews
the trend of the run after it.

A run whose uid is there already is left alone: recording the same run twice is a no-op.
The uid is the report's ``provenance.run_id``, else the context's, else one derived from
the report's content (an old report imported twice gets the same one). The one exception is
a later **attempt** of the same run (``RunContext.attempt``: an EvaluationRun whose errored
cells were requeued): its results replace the earlier attempt's under the same uid and row
id, in the same transaction — the run's counts, results and trend become the new attempt's,
as the EvaluationRun's own status does — and the trend of the run after it is renewed.

The report is read as its JSON shape (:func:`report_data`): a live :class:`RunReport`
without copying its test entries, or a saved report of version 1 or 2 as loaded.
"""

from __future__ import annotations

import hashlib
import json
import operator
import types
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa

from agent_health.history import facts, tables, trends

if TYPE_CHECKING:
    from agent_health.engine import reports

MESSAGE_CHARS = 240
"""A stored message (an error, a failed gate) is cut to this many characters, on one line."""
MESSAGES = 6
"""At most this many messages are kept per result: the error, then the failed gates."""
EMPTY: Mapping[str, int] = types.MappingProxyType({})
"""No ids known (read-only: shared by every :class:`Known` made without them)."""


def report_data(report: reports.RunReport | Mapping[str, Any]) -> dict[str, Any]:
    """The report in its JSON shape; a live report's test entries are not copied."""
    if isinstance(report, Mapping):
        return dict(report)
    return {
        "version": report.version,
        "summary": report.summary.model_dump(mode="json"),
        "provenance": (
            report.provenance.model_dump(mode="json") if report.provenance is not None else None
        ),
        "tests": report.tests,
        "matrix": report.matrix.model_dump(mode="json") if report.matrix is not None else None,
    }


def recorded_data(report: reports.RunReport | Mapping[str, Any]) -> dict[str, Any]:
    """:func:`report_data` as recording reads it: a live report's summary as the fields
    :func:`record` keeps (:func:`_counts`), read from its attributes. Serialized whole, the
    summary's serializer is built, and that loads the report's optional parts (a budget's, the
    insights rollup's and the agent matrix's modules and models, ``report._parts``), which a
    one-test run otherwise never loads: about 32 M instructions of it. A report without a run
    id (its uid is derived from its whole content) or of an agent matrix is read whole."""
    if isinstance(report, Mapping) or report.matrix is not None:
        return report_data(report)
    if report.provenance is None or not report.provenance.run_id:
        return report_data(report)
    summary = report.summary
    budget = summary.budget
    return {
        "version": report.version,
        "summary": {
            **{name: getattr(summary, name) for name in SUMMARY_FIELDS},
            "errored_by_cause": dict(summary.errored_by_cause),
            "budget": {"exhausted": budget.exhausted} if budget is not None else None,
            "pass_rate_interval": _bounds(summary.pass_rate_interval),
            "score_interval": _bounds(summary.score_interval),
        },
        "provenance": report.provenance.model_dump(mode="json"),
        "tests": report.tests,
        "matrix": None,
    }


SUMMARY_FIELDS = (
    "total",
    "passed",
    "failed",
    "errored",
    "skipped",
    "flaky_count",
    "not_run",
    "pass_rate",
    "score",
    "tokens",
    "cost_usd",
    "duration_ms",
    "repeats",
    "interrupted",
    "stopped",
)
"""The summary's plain fields a run's row keeps (:func:`_counts`; its intervals, causes and
budget aside)."""


def _bounds(interval: Any) -> dict[str, float] | None:
    return None if interval is None else {"low": interval.low, "high": interval.high}


def derived_uid(data: Mapping[str, Any]) -> str:
    """A uid for a report that names none (reports before run ids): a hash of its content,
    so the same file imported twice is the same run."""
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return "report-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def suite_hash(tests: Sequence[Mapping[str, Any]]) -> str:
    """``sha256:`` of the suite's tests: each id with its content hash, sorted."""
    pairs = sorted({(str(t["id"]), str(t.get("content_hash") or "")) for t in tests})
    digest = hashlib.sha256()
    for test_id, content in pairs:
        digest.update(f"{test_id}\x00{content}\n".encode("utf-8", "surrogatepass"))
    return "sha256:" + digest.hexdigest()


# Known and Upcoming are named tuples, not frozen dataclasses: the same immutable records,
# without the methods a dataclass compiles for itself as its module is imported (about a
# millisecond of every run that records its history, issue #40).


class Known(NamedTuple):
    """What was read and written before the run ended (:func:`prepare`): the ids of its
    tests and content hashes, and the run it will be compared with and that run's results
    for its trend, without their scores (:func:`.trends.ahead_of`)."""

    tests: Mapping[str, int] = EMPTY
    contents: Mapping[str, int] = EMPTY
    previous: tuple[int, list[dict[str, Any]]] | None = None


class Upcoming(NamedTuple):
    """Whose run is coming: its agent's name and its suite, and when it started (what its
    previous run is found by)."""

    agent: str | None
    suite: str | None
    started_at: datetime


def prepare(
    conn: sa.Connection, tests: Sequence[Mapping[str, Any]], line: Upcoming | None = None
) -> Known:
    """Find or add the tests a run is about to run (and their content hashes), in their own
    transaction while the run goes on, and with ``line`` read the run it will be compared
    with: the run's own transaction at its end then writes only the run and its results.
    ``tests`` are entries as the report will hold them (``id``, ``name``, ``file``,
    ``line``, ``labels``, ``content_hash``)."""
    previous = None
    if line is not None:
        started = line.started_at
        started = started.replace(tzinfo=UTC) if started.tzinfo is None else started.astimezone(UTC)
        previous = trends.ahead_of(conn, line.agent, line.suite, started)
    return Known(
        tests=_test_ids(conn, tests), contents=_content_ids(conn, tests), previous=previous
    )


def record(
    conn: sa.Connection,
    data: Mapping[str, Any],
    context: facts.RunContext,
    known: Known | None = None,
) -> list[facts.Recorded]:
    """Write ``data`` (:func:`report_data`) as one run per agent; see the module docstring.
    ``known``: what :func:`prepare` found (a test or hash it does not hold is looked up)."""
    known = known or Known()
    provenance = data.get("provenance") or {}
    base = context.uid or provenance.get("run_id") or derived_uid(data)
    groups = _groups(data)
    uids = [base if len(groups) == 1 else f"{base}/{name}" for name, _, _ in groups]
    runs = tables.runs
    there = {
        uid: (run_id, attempt or 0)
        for uid, run_id, attempt in conn.execute(
            sa.select(runs.c.uid, runs.c.id, runs.c.attempt).where(runs.c.uid.in_(uids))
        )
    }
    everything = data["tests"]
    common = _common(data, context, everything, group=base if len(groups) > 1 else None)
    done = []
    for uid, (name, summary, tests) in zip(uids, groups, strict=True):
        earlier = there.get(uid)
        if earlier is not None and earlier[1] >= context.attempt:
            kept = facts.Recorded(uid=uid, agent=name, new=False, results=0, attempt=earlier[1])
            done.append(kept)
            continue
        agent_id = _agent_id(conn, _agent_info(provenance, name), _version(context, name))
        test_ids = dict(known.tests)
        test_ids.update(_test_ids(conn, [t for t in tests if str(t["id"]) not in test_ids]))
        content_ids = dict(known.contents)
        unseen = [t for t in tests if str(t.get("content_hash") or "") not in content_ids]
        content_ids.update(_content_ids(conn, unseen))
        row = {**common, **_counts(summary), "uid": uid, "agent_id": agent_id}
        if earlier is None:
            # The row as the statement's parameters, not its values: compiling it binds
            # each column once instead of coercing ~60 values into the statement first.
            run_id = _new_id(conn.execute(sa.insert(runs), row))
        else:  # a later attempt: the same row (what refers to it stays right), new results
            run_id = earlier[0]
            conn.execute(sa.delete(tables.results).where(tables.results.c.run_id == run_id))
            conn.execute(sa.update(runs).where(runs.c.id == run_id).values(row))
        rows = [_result(run_id, t, test_ids, content_ids) for t in tests]
        _insert_many(conn, tables.results, rows)
        _trends(conn, run_id, rows, known.previous)
        replaced = earlier[1] if earlier is not None else None
        done.append(
            facts.Recorded(
                uid=uid,
                agent=name,
                new=True,
                results=len(rows),
                attempt=context.attempt,
                replaced=replaced,
            )
        )
    return done


def _groups(data: Mapping[str, Any]) -> list[tuple[str | None, Mapping[str, Any], list[Any]]]:
    """(agent, summary, tests) per agent: one for a run of one agent, one per agent of a
    matrix (each with its own summary, as the matrix holds it)."""
    matrix = data.get("matrix") or {}
    agents = matrix.get("agents") or []
    if len(agents) < 2:
        tests = data["tests"]
        named = {t.get("agent") for t in tests} - {None}
        agent = (data.get("provenance") or {}).get("agent") or {}
        name = named.pop() if len(named) == 1 else agent.get("name")
        return [(name, data["summary"], list(tests))]
    summaries = matrix.get("summaries") or {}
    return [
        (
            agent,
            summaries.get(agent) or data["summary"],
            [t for t in data["tests"] if t.get("agent") == agent],
        )
        for agent in agents
    ]


def _agent_info(provenance: Mapping[str, Any], name: str | None) -> dict[str, Any] | None:
    """The provenance's agent of the run (or the matrix's agent called ``name``)."""
    if name is not None:
        for info in provenance.get("agents") or []:
            if isinstance(info, Mapping) and info.get("name") == name:
                return dict(info)
        single = provenance.get("agent")
        if isinstance(single, Mapping) and single.get("name") in (name, None):
            return {**single, "name": name}
        return {"name": name}
    single = provenance.get("agent")
    return dict(single) if isinstance(single, Mapping) else None


def _version(context: facts.RunContext, name: str | None) -> str | None:
    versions = context.agent_versions
    return versions.get(name or "") or (versions.get("") if len(versions) == 1 else None)


def _agent_id(
    conn: sa.Connection, info: Mapping[str, Any] | None, version: str | None
) -> int | None:
    if info is None:
        return None
    agent = facts.Agent(
        name=info.get("name"),
        connector=info.get("connector"),
        url=info.get("url"),
        command=list(info["command"]) if info.get("command") else None,
        image=info.get("image"),
        version=version,
    )
    identity = hashlib.sha256(agent.model_dump_json().encode()).hexdigest()
    agents = tables.agents
    found = conn.execute(sa.select(agents.c.id).where(agents.c.identity == identity)).scalar()
    if found is not None:
        return int(found)
    values = agent.model_dump()
    values["command"] = json.dumps(values["command"]) if values["command"] else None
    return _new_id(conn.execute(sa.insert(agents).values(identity=identity, **values)))


def _insert_many(conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` (each with the same keys, every value one the driver takes as it is: numbers,
    text, ``None``, ``True``) inserted into ``table``.

    On SQLite, in one executemany of the driver: the statement is Core's, compiled for the
    connection's dialect, and the rows skip SQLAlchemy's per-row parameter processing (2,000
    results: 14 ms through ``execute``, 8.5 ms so, here). Elsewhere through ``execute``,
    whose "insertmanyvalues" batches are PostgreSQL's fast path.
    """
    if not rows:
        return
    if conn.dialect.name != "sqlite":
        conn.execute(sa.insert(table), list(rows))
        return
    compiled = sa.insert(table).compile(dialect=conn.dialect, column_keys=list(rows[0]))
    if compiled.positional:
        order = compiled.positiontup or []
        values = operator.itemgetter(*order)  # a tuple of the values, in one C call per row
        if len(order) == 1:
            conn.exec_driver_sql(compiled.string, [(values(row),) for row in rows])
        else:
            conn.exec_driver_sql(compiled.string, [values(row) for row in rows])
    else:
        conn.exec_driver_sql(compiled.string, list(rows))


def _new_id(inserted: sa.CursorResult[Any]) -> int:
    key = inserted.inserted_primary_key
    if key is None:  # pragma: no cover  # every table here has an integer key
        raise RuntimeError("the database gave no id for the row it inserted")
    return int(key[0])


def _test_ids(conn: sa.Connection, tests: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each test's id in ``tests``: found, added, or brought up to date (title, file, line,
    labels as this run saw them)."""
    wanted: dict[str, tuple[str, str, int, str]] = {}
    for t in tests:
        key = str(t["id"])
        if key not in wanted:
            wanted[key] = _test_row(t)
    found = _tests_found(conn, list(wanted))
    unseen = [key for key in wanted if key not in found]
    if unseen:
        rows = [{"key": key, **dict(zip(TEST_FIELDS, wanted[key], strict=True))} for key in unseen]
        conn.execute(sa.insert(tables.tests), rows)
        added = _tests_found(conn, unseen)
        _labels(conn, [(added[key][0], wanted[key][3]) for key in unseen], replace=False)
        found.update(added)
    table = tables.tests
    relabelled = []
    for key, row in wanted.items():
        test_id, *was = found[key]
        if tuple(was) != row:
            values = dict(zip(TEST_FIELDS, row, strict=True))
            conn.execute(sa.update(table).where(table.c.id == test_id).values(**values))
            if was[3] != row[3]:
                relabelled.append((test_id, row[3]))
    if relabelled:
        _labels(conn, relabelled, replace=True)
    return {key: int(row[0]) for key, row in found.items()}


TEST_FIELDS = ("title", "file", "line", "labels")
"""What a test's row holds beside its key and id, in :func:`_test_row`'s order."""


def _tests_found(conn: sa.Connection, keys: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """Each of ``keys``' test found: (id, title, file, line, labels) by key."""
    table = tables.tests
    columns = (table.c.id, table.c.title, table.c.file, table.c.line, table.c.labels)
    found: dict[str, tuple[Any, ...]] = {}
    for part in tables.chunks(keys):
        query = sa.select(table.c.key, *columns).where(table.c.key.in_(part))
        for key, *row in conn.execute(query).all():  # fetched at once, not row by row
            found[key] = tuple(row)
    return found


def _test_row(t: Mapping[str, Any]) -> tuple[str, str, int, str]:
    """A test's (title, file, line, labels as JSON), as its row keeps them."""
    given = t.get("labels")
    # Most tests carry no label: their JSON is known without encoding it.
    labels = json.dumps([str(label) for label in given], ensure_ascii=False) if given else "[]"
    return (
        str(t.get("name") or t["id"]),
        str(t.get("file") or ""),
        int(t.get("line") or 0),
        labels,
    )


def _labels(conn: sa.Connection, tests: Sequence[tuple[int, str]], *, replace: bool) -> None:
    table = tables.test_labels
    if replace:
        for part in tables.chunks([test_id for test_id, _ in tests]):
            conn.execute(sa.delete(table).where(table.c.test_id.in_(part)))
    rows = [
        {"test_id": test_id, "label": label}
        for test_id, labels in tests
        for label in dict.fromkeys(json.loads(labels))
    ]
    if rows:
        conn.execute(sa.insert(table), rows)


def _content_ids(conn: sa.Connection, tests: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    hashes = sorted({str(t["content_hash"]) for t in tests if t.get("content_hash")})
    table = tables.contents
    found: dict[str, int] = {}
    for part in tables.chunks(hashes):
        found.update(
            conn.execute(sa.select(table.c.hash, table.c.id).where(table.c.hash.in_(part))).all()
        )
    new = [{"hash": h} for h in hashes if h not in found]
    if new:
        conn.execute(sa.insert(table), new)
        for part in tables.chunks([row["hash"] for row in new]):
            found.update(
                conn.execute(
                    sa.select(table.c.hash, table.c.id).where(table.c.hash.in_(part))
                ).all()
            )
    return found


def _common(
    data: Mapping[str, Any],
    context: facts.RunContext,
    tests: Sequence[Mapping[str, Any]],
    *,
    group: str | None,
) -> dict[str, Any]:
    """The columns every run of one report shares (an agent matrix: each agent's)."""
    provenance = data.get("provenance") or {}
    suite = provenance.get("suite") or {}
    judge = provenance.get("judge") or {}
    ci = context.ci
    started = _time(provenance.get("started_at")) or context.started_at or datetime.now(UTC)
    return {
        "group_uid": group,
        "source": context.source,
        "suite": context.suite or suite.get("name"),
        "suite_hash": suite_hash(tests) if tests else None,
        "started_at": _utc(started),
        "ended_at": _utc(_time(provenance.get("ended_at"))),
        "recorded_at": _utc(datetime.now(UTC)),
        "exit_code": context.exit_code,
        "selection": json.dumps(provenance["selection"]) if provenance.get("selection") else None,
        "git_commit": suite.get("git_commit"),
        "git_branch": suite.get("git_branch"),
        "git_dirty": suite.get("git_dirty"),
        "judge_provider": judge.get("provider"),
        "judge_model": None if judge.get("skipped") else judge.get("model"),
        "ci_provider": ci.provider if ci else None,
        "ci_url": ci.url if ci else None,
        "ci_job": ci.job if ci else None,
        "ci_commit": ci.commit if ci else None,
        "ci_branch": ci.branch if ci else None,
        "ci_pr": ci.pr if ci else None,
        "report_path": context.report_path,
        "ledger_url": provenance.get("ledger"),
        "ledger_verified": context.ledger_verified,
        "agent_health_version": provenance.get("agent_health_version"),
        "config_hash": provenance.get("config_hash"),
        "attempt": context.attempt or None,
    }


def _counts(summary: Mapping[str, Any]) -> dict[str, Any]:
    causes = summary.get("errored_by_cause") or {}
    budget = summary.get("budget") or {}
    rate = summary.get("pass_rate_interval") or {}
    score = summary.get("score_interval") or {}
    return {
        "duration_ms": summary.get("duration_ms"),
        "interrupted": bool(summary.get("interrupted")),
        "budget_stop": budget.get("exhausted"),
        "stopped": summary.get("stopped"),
        "total": int(summary.get("total") or 0),
        "passed": int(summary.get("passed") or 0),
        "failed": int(summary.get("failed") or 0),
        "errored": int(summary.get("errored") or 0),
        "skipped": int(summary.get("skipped") or 0),
        "flaky": int(summary.get("flaky_count") or 0),
        "not_run": int(summary.get("not_run") or 0),
        "errored_agent": int(causes.get("agent") or 0),
        "errored_judge": int(causes.get("judge") or 0),
        "errored_test": int(causes.get("test") or 0),
        "errored_infra": int(causes.get("infra") or 0),
        "pass_rate": summary.get("pass_rate"),
        "pass_rate_low": rate.get("low"),
        "pass_rate_high": rate.get("high"),
        "score": summary.get("score"),
        "score_low": score.get("low"),
        "score_high": score.get("high"),
        "tokens": summary.get("tokens"),
        "cost_usd": summary.get("cost_usd"),
        "repeats": int(summary.get("repeats") or 1),
    }


def _result(
    run_id: int, t: Mapping[str, Any], test_ids: Mapping[str, int], content_ids: Mapping[str, int]
) -> dict[str, Any]:
    metrics = t.get("metrics") or {}
    tokens = metrics.get("total_tokens")
    cost = metrics.get("cost_usd")
    turns = t.get("turns") or []
    ended = t.get("ended") or {}
    status = str(t["status"])
    return {
        "run_id": run_id,
        "test_id": test_ids[str(t["id"])],
        "repeat": int(t.get("repeat") or 0),
        "status": tables.STATUSES[status],
        "cause": tables.CAUSES.get(t.get("cause") or ""),
        "score": t.get("score"),
        "duration_ms": round(float(t.get("duration_ms") or 0)),
        "tokens": tokens if isinstance(tokens, int) else None,
        "cost_usd": cost if isinstance(cost, int | float) else None,
        "content_id": content_ids.get(str(t.get("content_hash") or "")),
        "quarantined": True if t.get("quarantined") else None,
        "turns": len(turns) or None,
        "ended": str(ended.get("reason"))[:16] if ended.get("reason") else None,
        "messages": None if status == "passed" else _messages(t),
    }


def _messages(t: Mapping[str, Any]) -> str | None:
    """Why a result did not pass, one line each: its error, then each failed gate."""
    lines = []
    if t.get("error"):
        cause = f"[{t['cause']}] " if t.get("cause") else ""
        lines.append(f"error: {cause}{t['error']}")
    elif t.get("skip_reason"):
        lines.append(f"skipped: {t['skip_reason']}")
    for s in t.get("signals") or []:
        if s.get("role") == "gate" and s.get("passed") is False:
            detail = (
                s.get("error") or s.get("reasoning") or json.dumps(s.get("evidence"), default=str)
            )
            lines.append(f"✗ {s.get('name')}: {detail}")
    cut = [_line(text) for text in lines[:MESSAGES]]
    return "\n".join(cut) if cut else None


def _line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 1] + "…"


def _trends(
    conn: sa.Connection,
    run_id: int,
    rows: Sequence[Mapping[str, Any]],
    ahead: tuple[int, list[dict[str, Any]]] | None = None,
) -> None:
    """The trend of the run just written (from its rows; ``ahead``: its previous run's
    results as read while it ran), and of the next run of its agent and suite (when this
    one was recorded out of order, it is that run's previous one now)."""
    names, causes = tables.STATUS_NAMES, tables.CAUSE_NAMES
    entries = [
        {
            "id": str(row["test_id"]),
            "repeat": row["repeat"],
            "status": names[row["status"]],
            "cause": causes.get(row["cause"]) if row["cause"] is not None else None,
            "score": None,
        }
        for row in rows
    ]
    line = trends.same_line(conn, run_id)  # read once: the previous run and the next
    trends.renew_trend(conn, run_id, entries, ahead, line=line)
    following = trends.next_run(conn, run_id, line)
    if following is not None:
        trends.renew_trend(conn, following)


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _utc(value: datetime | None) -> datetime | None:
    """``value`` in UTC (a time without a zone is taken as UTC already)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
