"""What the history answers: the queries, each in the caller's transaction, each returning
the typed values of :mod:`.answers` (no SQL leaves this module).

One concept: reading the history — the newest runs (with the trend each run carries), one
test across runs and its latest break (the last passing and first failing run and what
differed between them), flaky tests (outcome flips while neither the agent's identity nor
the test's content hash changed: a window function over the results, in the database),
regressions between consecutive runs of an agent, the grid of the newest runs × their tests
the history page draws, a baseline rebuilt as the report ``compare`` reads, pruning; the
trend a recording works out is :mod:`.trends`' (a run imports that, not this). Every query is plain
SQLAlchemy Core that SQLite and PostgreSQL both run; each reads through an index
(``tables.py``): runs by time and agent, a test's results by (test, run), a run's by its
primary key.

Definitions the commands and docs/history.md share:

* a result is *decided* when it passed, failed, was flaky (passed only on a retry) or
  errored by the agent — as in the pass rate; other errors and skips say nothing about the
  agent and are left out of flips, failure rates and breaks;
* the *previous run* of a run is the newest one before it of the same agent name and suite;
* a *break* is a test's newest decided outcome failing: its first failing run is the oldest
  of the failing streak that ends now, its last pass the run before that streak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic_core
import sqlalchemy as sa

from agent_health import statuses
from agent_health.history import answers, errors, facts, tables, trends

runs_t, results_t, tests_t, agents_t = tables.runs, tables.results, tables.tests, tables.agents
contents_t, labels_t = tables.contents, tables.test_labels
PASSED, FAILED, ERRORED, FLAKY = (
    tables.STATUSES[s] for s in ("passed", "failed", "errored", "flaky")
)
BY_AGENT = tables.CAUSES["agent"]


def _decided(results: sa.Table | Any = results_t) -> sa.ColumnElement[bool]:
    return sa.or_(
        results.c.status.in_((PASSED, FAILED, FLAKY)),
        sa.and_(results.c.status == ERRORED, results.c.cause == BY_AGENT),
    )


# -- runs ------------------------------------------------------------------------------------


def _runs_select() -> sa.Select[Any]:
    return sa.select(runs_t, *_agent_columns()).select_from(
        runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id)
    )


def _agent_columns() -> list[sa.ColumnElement[Any]]:
    return [
        agents_t.c.name.label("agent_name"),
        agents_t.c.connector.label("agent_connector"),
        agents_t.c.url.label("agent_url"),
        agents_t.c.command.label("agent_command"),
        agents_t.c.image.label("agent_image"),
        agents_t.c.version.label("agent_version"),
    ]


def _filtered(
    query: sa.Select[Any],
    *,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
    suite: str | None = None,
    branch: str | None = None,
    ending: facts.Ending | None = None,
) -> sa.Select[Any]:
    if branch is not None:  # the suite's checkout, else the CI job's
        query = query.where(sa.func.coalesce(runs_t.c.git_branch, runs_t.c.ci_branch) == branch)
    if ending is not None:
        query = query.where(ENDINGS[ending])
    if agent is not None:
        query = query.where(trends.named(agent))
    if since is not None:
        query = query.where(runs_t.c.started_at >= since)
    if suite is not None:
        query = query.where(runs_t.c.suite == suite)
    if label is not None:
        query = query.where(
            sa.exists()
            .where(results_t.c.run_id == runs_t.c.id)
            .where(results_t.c.test_id.in_(trends.labelled(label)))
        )
    return query


def runs(
    conn: sa.Connection,
    *,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
    limit: int = 20,
    suite: str | None = None,
    branch: str | None = None,
    ending: facts.Ending | None = None,
    offset: int = 0,
    ledger: Sequence[str] | None = None,
) -> list[answers.Run]:
    """The newest runs, newest first (``offset`` of them left out). With ``label``: only runs
    that ran a test carrying it, each counted over those tests alone (and its trend worked
    out over them); ``branch``: of that git (or CI) branch; ``ending``: that ended so
    (:data:`.facts.Ending`); ``ledger``: whose ledger is one of these URLs."""
    query = trends.newest(
        _filtered(
            _runs_select(),
            agent=agent,
            label=label,
            since=since,
            suite=suite,
            branch=branch,
            ending=ending,
        )
    )
    if ledger is not None:
        query = query.where(runs_t.c.ledger_url.in_(list(ledger)))
    rows = conn.execute(query.limit(limit).offset(offset)).mappings().all()
    kept = _trends(conn, rows)  # every previous run's uid in one statement
    found = [_run(row, kept.get(row["id"])) for row in rows]
    if label is None:
        return found
    return [_scoped(conn, run, row, label) for run, row in zip(found, rows, strict=True)]


def run(conn: sa.Connection, uid: str) -> answers.Run:
    """One run by uid, or by a part of it that names one run (``f3686ba2``, as tables show)."""
    row = _run_row(conn, uid)
    return _run(row, _trend_of(conn, row))


def _run_row(conn: sa.Connection, uid: str) -> Any:
    exact = conn.execute(_runs_select().where(runs_t.c.uid == uid)).mappings().first()
    if exact is not None:
        return exact
    like = "%" + uid.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = (
        conn.execute(_runs_select().where(runs_t.c.uid.like(like, escape="\\")).limit(2))
        .mappings()
        .all()
    )
    if len(rows) == 1:
        return rows[0]
    if not rows:
        raise errors.NotFoundError(
            f"no run {uid!r} in the history (`agent-health history` lists them)"
        )
    raise errors.NotFoundError(f"run {uid!r} is ambiguous: give more of its id")


def _run(row: Any, trend: answers.Trend | None) -> answers.Run:
    agent = None
    if row["agent_id"] is not None:
        agent = facts.Agent(
            name=row["agent_name"],
            connector=row["agent_connector"],
            url=row["agent_url"],
            command=json.loads(row["agent_command"]) if row["agent_command"] else None,
            image=row["agent_image"],
            version=row["agent_version"],
        )
    ci = None
    if row["ci_provider"]:
        ci = facts.CI(
            provider=row["ci_provider"],
            url=row["ci_url"],
            job=row["ci_job"],
            commit=row["ci_commit"],
            branch=row["ci_branch"],
            pr=row["ci_pr"],
        )
    return answers.Run(
        uid=row["uid"],
        group=row["group_uid"],
        source=row["source"],
        agent=agent,
        suite=row["suite"],
        suite_hash=row["suite_hash"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        duration_ms=row["duration_ms"],
        exit_code=row["exit_code"],
        interrupted=bool(row["interrupted"]),
        budget_stop=row["budget_stop"],
        stopped=row["stopped"],
        total=row["total"],
        passed=row["passed"],
        failed=row["failed"],
        errored=row["errored"],
        skipped=row["skipped"],
        flaky=row["flaky"],
        not_run=row["not_run"],
        errored_by_cause={
            cause: row[f"errored_{cause}"] for cause in ("agent", "judge", "test", "infra")
        },
        pass_rate=row["pass_rate"],
        pass_rate_interval=_interval(row["pass_rate_low"], row["pass_rate_high"]),
        score=row["score"],
        score_interval=_interval(row["score_low"], row["score_high"]),
        tokens=row["tokens"],
        cost_usd=row["cost_usd"],
        repeats=row["repeats"],
        selection=json.loads(row["selection"]) if row["selection"] else {},
        git_commit=row["git_commit"],
        git_branch=row["git_branch"],
        git_dirty=row["git_dirty"],
        judge_provider=row["judge_provider"],
        judge_model=row["judge_model"],
        ci=ci,
        report_path=row["report_path"],
        ledger_url=row["ledger_url"],
        ledger_verified=row["ledger_verified"],
        agent_health_version=row["agent_health_version"],
        config_hash=row["config_hash"],
        attempt=row["attempt"] or 0,
        trend=trend,
    )


def _interval(low: float | None, high: float | None) -> answers.Interval | None:
    return None if low is None or high is None else answers.Interval(low=low, high=high)


def _trend_of(conn: sa.Connection, row: Any) -> answers.Trend | None:
    """The trend kept on a run's row (the previous run's uid read by its id)."""
    if row["trend_from"] is None or row["trend_p"] is None:
        return None
    previous = conn.execute(
        sa.select(runs_t.c.uid).where(runs_t.c.id == row["trend_from"])
    ).scalar()
    return _trend(
        previous or f"#{row['trend_from']}",
        row["trend_effect"],
        row["trend_p"],
        row["trend_method"],
        row["trend_tests"],
    )


def _trend(previous: str, effect: float, p: float, method: str, tests: int) -> answers.Trend:
    """A trend as a run's row keeps it (``previous``: that run's uid), marked."""
    return answers.Trend(
        previous=previous,
        effect=effect,
        p_value=p,
        method=method,
        tests=tests,
        mark=trends.mark(effect, p),
    )


def _paired(
    conn: sa.Connection,
    previous: int,
    run_id: int,
    label: str | None = None,
    after: list[dict[str, Any]] | None = None,
    before: list[dict[str, Any]] | None = None,
) -> answers.Trend | None:
    """The paired test ``compare`` runs on the pass rate, between two runs' results, as a
    trend naming the previous run (``after``, ``before``: the newer and the older run's
    entries when the caller holds them already)."""
    found = trends.change(conn, previous, run_id, label, after, before)
    if found is None:
        return None
    uid = conn.execute(sa.select(runs_t.c.uid).where(runs_t.c.id == previous)).scalar_one()
    return _trend(uid, found.effect, found.p_value, found.method, found.tests)


def _scoped(conn: sa.Connection, run: answers.Run, row: Any, label: str) -> answers.Run:
    """``run`` counted over the tests carrying ``label`` alone."""
    from agent_health.engine import statistics

    entries = trends.run_entries(conn, row["id"], label)
    counts: dict[str, int] = dict.fromkeys(statuses.STATUSES, 0)
    causes = dict.fromkeys(("agent", "judge", "test", "infra"), 0)
    for entry in entries:
        counts[entry["status"]] += 1
        if entry["status"] == "errored" and entry["cause"] in causes:
            causes[entry["cause"]] += 1
    decided = counts["passed"] + counts["failed"] + counts["flaky"] + causes["agent"]
    rate = round(counts["passed"] / decided, 6) if decided else None
    interval = None
    if decided:
        low, high = statistics.wilson(counts["passed"], decided)
        interval = answers.Interval(low=round(low, 6), high=round(high, 6))
    scores = [e["score"] for e in entries if e["score"] is not None]
    totals = conn.execute(
        sa.select(sa.func.sum(results_t.c.tokens), sa.func.sum(results_t.c.cost_usd)).where(
            results_t.c.run_id == row["id"], results_t.c.test_id.in_(trends.labelled(label))
        )
    ).one()
    trend = None
    previous = trends.previous_run(conn, row["id"])
    if previous is not None:
        trend = _paired(conn, previous, row["id"], label)
    return run.model_copy(
        update={
            **counts,
            "total": len(entries),
            "not_run": 0,
            "errored_by_cause": causes,
            "pass_rate": rate,
            "pass_rate_interval": interval,
            "score": round(sum(scores) / len(scores), 6) if scores else None,
            "score_interval": None,
            "tokens": totals[0],
            "cost_usd": totals[1],
            "trend": trend,
        }
    )


# -- one test across runs --------------------------------------------------------------------


def timeline(
    conn: sa.Connection,
    pattern: str,
    *,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
    limit: int = 50,
) -> list[answers.TestHistory]:
    """Each test whose id is ``pattern`` — else whose id or title the regular expression
    ``pattern`` finds (case aside) — over its newest ``limit`` runs."""
    chosen = _tests_matching(conn, pattern, label)
    return [_test_history(conn, row, agent=agent, since=since, limit=limit) for row in chosen]


def _tests_matching(conn: sa.Connection, pattern: str, label: str | None) -> list[Any]:
    query = sa.select(tests_t)
    if label is not None:
        query = query.where(tests_t.c.id.in_(trends.labelled(label)))
    exact = conn.execute(query.where(tests_t.c.key == pattern)).mappings().all()
    if exact:
        return list(exact)
    try:
        found = re.compile(pattern, re.IGNORECASE)
    except re.error:
        found = re.compile(re.escape(pattern), re.IGNORECASE)
    rows = [
        row
        for row in conn.execute(query.order_by(tests_t.c.key)).mappings()
        if found.search(row["key"]) or found.search(row["title"])
    ]
    if not rows:
        raise errors.NotFoundError(
            f"no test in the history has the id {pattern!r} or matches it"
            + (f" among the tests labelled {label!r}" if label else "")
        )
    return rows


def _test_history(
    conn: sa.Connection,
    test_row: Any,
    *,
    agent: str | None,
    since: datetime | None,
    limit: int,
) -> answers.TestHistory:
    test_id = test_row["id"]
    joined = results_t.join(runs_t, results_t.c.run_id == runs_t.c.id).outerjoin(
        agents_t, runs_t.c.agent_id == agents_t.c.id
    )
    newest = trends.newest(
        _filtered(
            sa.select(runs_t.c.id, runs_t.c.started_at)
            .select_from(joined)
            .where(results_t.c.test_id == test_id),
            agent=agent,
            since=since,
        ).distinct()
    )
    chosen = [row[0] for row in conn.execute(newest.limit(limit))] if limit else []
    rows = (
        conn.execute(
            sa.select(
                results_t,
                runs_t.c.uid,
                runs_t.c.started_at,
                agents_t.c.name.label("agent_name"),
                contents_t.c.hash,
            )
            .select_from(joined.outerjoin(contents_t, results_t.c.content_id == contents_t.c.id))
            .where(results_t.c.test_id == test_id, results_t.c.run_id.in_(chosen))
            .order_by(runs_t.c.started_at, runs_t.c.id, results_t.c.repeat)
        )
        .mappings()
        .all()
        if chosen
        else []
    )
    found = [_outcome(row) for row in rows]
    return answers.TestHistory(
        id=test_row["key"],
        title=test_row["title"],
        file=test_row["file"],
        line=test_row["line"],
        labels=json.loads(test_row["labels"]),
        outcomes=found,
        broke=_break(conn, found),
    )


def _outcome(row: Any) -> answers.Outcome:
    return answers.Outcome(
        run=row["uid"],
        started_at=row["started_at"],
        agent=row["agent_name"],
        repeat=row["repeat"],
        status=tables.STATUS_NAMES[row["status"]],
        cause=tables.CAUSE_NAMES.get(row["cause"]) if row["cause"] is not None else None,
        score=row["score"],
        duration_ms=row["duration_ms"],
        tokens=row["tokens"],
        cost_usd=row["cost_usd"],
        content_hash=row["hash"],
        quarantined=bool(row["quarantined"]),
        turns=row["turns"],
        ended=row["ended"],
        messages=row["messages"].split("\n") if row["messages"] else [],
    )


def decided(outcome: answers.Outcome) -> bool:
    """Passed, failed, flaky or errored by the agent: an outcome that says something."""
    return outcome.status in statuses.DECIDED or (
        outcome.status == "errored" and outcome.cause == "agent"
    )


def _break(conn: sa.Connection, found: Sequence[answers.Outcome]) -> answers.Break | None:
    """The latest break of the newest outcome's agent: see the module docstring."""
    said = [o for o in found if decided(o)]
    if not said or said[-1].status == "passed":
        return None
    agent = said[-1].agent
    runs_seen: dict[str, list[answers.Outcome]] = {}
    for o in said:
        if o.agent == agent:
            runs_seen.setdefault(o.run, []).append(o)
    ordered = list(runs_seen.values())
    first_fail = None
    for group in reversed(ordered):
        if all(o.status == "passed" for o in group):
            if first_fail is None:
                return None
            last_pass = group[-1]
            return answers.Break(
                last_pass=last_pass,
                first_fail=first_fail,
                differences=_differences(conn, last_pass, first_fail),
            )
        first_fail = next(o for o in group if o.status != "passed")
    return None


def _differences(
    conn: sa.Connection, before: answers.Outcome, after: answers.Outcome
) -> list[answers.Difference]:
    """What differed between two runs of a test: the agent's image, version or identity, the
    suite's commit, the test's content hash, the judge's model."""
    rows = {
        row["uid"]: row
        for row in conn.execute(_runs_select().where(runs_t.c.uid.in_((before.run, after.run))))
        .mappings()
        .all()
    }
    was, now = rows[before.run], rows[after.run]
    found = []

    def differs(what: Any, old: Any, new: Any) -> None:
        if old != new:
            found.append(answers.Difference(what=what, before=_shown(old), after=_shown(new)))

    differs("agent image", was["agent_image"], now["agent_image"])
    differs("agent version", was["agent_version"], now["agent_version"])
    if was["agent_image"] == now["agent_image"] and was["agent_version"] == now["agent_version"]:
        identity = ("agent_connector", "agent_url", "agent_command")
        if any(was[k] != now[k] for k in identity):
            differs("agent", _agent_line(was), _agent_line(now))
    differs("suite commit", was["git_commit"], now["git_commit"])
    differs("test content", before.content_hash, after.content_hash)
    differs("judge model", was["judge_model"], now["judge_model"])
    return found


def _agent_line(row: Any) -> str:
    command = " ".join(json.loads(row["agent_command"])) if row["agent_command"] else None
    return " ".join(str(v) for v in (row["agent_connector"], row["agent_url"] or command) if v)


def _shown(value: Any) -> str | None:
    return None if value is None else str(value)


# -- flaky tests -----------------------------------------------------------------------------


def _window(
    conn: sa.Connection,
    runs: int,
    *,
    agent: str | None,
    since: datetime | None,
    label: str | None = None,
) -> list[int]:
    """The ids of the newest ``runs`` runs (of ``agent``, since ``since``)."""
    query = trends.newest(
        _filtered(
            sa.select(runs_t.c.id).select_from(
                runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id)
            ),
            agent=agent,
            since=since,
            label=label,
        )
    )
    return [row[0] for row in conn.execute(query.limit(runs))]


def flaky(
    conn: sa.Connection,
    *,
    runs: int = 50,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[answers.Flaky]:
    """Tests whose decided outcome flipped (pass ↔ not) across the newest ``runs`` runs, per
    agent identity and test content hash; ranked by flips, then by a failure rate nearer a
    coin's, then by more results."""
    from agent_health.engine import statistics

    window = _window(conn, runs, agent=agent, since=since)
    if not window:
        return []
    ok = sa.case((results_t.c.status == PASSED, 1), else_=0)
    group = (results_t.c.test_id, runs_t.c.agent_id, results_t.c.content_id)
    order = (runs_t.c.started_at, runs_t.c.id, results_t.c.repeat)
    newest_first = (runs_t.c.started_at.desc(), runs_t.c.id.desc(), results_t.c.repeat.desc())
    inner = (
        sa.select(
            *group,
            results_t.c.run_id,
            ok.label("ok"),
            sa.func.lag(ok).over(partition_by=group, order_by=order).label("before"),
            sa.func.row_number().over(partition_by=group, order_by=newest_first).label("back"),
        )
        .select_from(results_t.join(runs_t, results_t.c.run_id == runs_t.c.id))
        .where(results_t.c.run_id.in_(window), _decided())
    )
    if label is not None:
        inner = inner.where(results_t.c.test_id.in_(trends.labelled(label)))
    seq = inner.subquery()
    flips = sa.func.sum(
        sa.case((sa.and_(seq.c.before.is_not(None), seq.c.before != seq.c.ok), 1), else_=0)
    )
    query = (
        sa.select(
            seq.c.test_id,
            seq.c.agent_id,
            seq.c.content_id,
            sa.func.count().label("decided"),
            sa.func.sum(1 - seq.c.ok).label("failures"),
            flips.label("flips"),
            sa.func.count(sa.distinct(seq.c.run_id)).label("runs"),
            sa.func.max(sa.case((seq.c.back == 1, seq.c.ok), else_=None)).label("last_ok"),
        )
        .group_by(seq.c.test_id, seq.c.agent_id, seq.c.content_id)
        .having(flips > 0)
    )
    groups = conn.execute(query).all()
    if not groups:
        return []
    names = _names(
        conn,
        [g.test_id for g in groups],
        [g.agent_id for g in groups],
        [g.content_id for g in groups],
    )
    found = []
    for g in groups:
        failures, total = int(g.failures), int(g.decided)
        low, high = statistics.wilson(failures, total)
        key, title = names["tests"][g.test_id]
        found.append(
            answers.Flaky(
                id=key,
                title=title,
                agent=names["agents"].get(g.agent_id),
                content_hash=names["contents"].get(g.content_id),
                runs=int(g.runs),
                decided=total,
                failures=failures,
                flips=int(g.flips),
                failure_rate=round(failures / total, 6),
                failure_rate_interval=answers.Interval(low=round(low, 6), high=round(high, 6)),
                last_status="passed" if g.last_ok else "failed",
            )
        )
    found.sort(key=lambda f: (-f.flips, abs(f.failure_rate - 0.5), -f.decided, f.id))
    return found[:limit] if limit is not None else found


def _names(
    conn: sa.Connection,
    test_ids: Sequence[int],
    agent_ids: Sequence[int | None],
    content_ids: Sequence[int | None],
) -> dict[str, dict[Any, Any]]:
    """Keys and titles of tests, agents' identities and content hashes, by their ids."""
    tests: dict[Any, Any] = {}
    for part in tables.chunks(sorted(set(test_ids))):
        for row in conn.execute(
            sa.select(tests_t.c.id, tests_t.c.key, tests_t.c.title).where(tests_t.c.id.in_(part))
        ):
            tests[row.id] = (row.key, row.title)
    agents: dict[Any, Any] = {}
    wanted = sorted({a for a in agent_ids if a is not None})
    for part in tables.chunks(wanted):
        for found in conn.execute(sa.select(agents_t).where(agents_t.c.id.in_(part))).mappings():
            agents[found["id"]] = facts.Agent(
                name=found["name"],
                connector=found["connector"],
                url=found["url"],
                command=json.loads(found["command"]) if found["command"] else None,
                image=found["image"],
                version=found["version"],
            )
    contents: dict[Any, Any] = {}
    for part in tables.chunks(sorted({c for c in content_ids if c is not None})):
        contents.update(
            conn.execute(
                sa.select(contents_t.c.id, contents_t.c.hash).where(contents_t.c.id.in_(part))
            ).all()
        )
    return {"tests": tests, "agents": agents, "contents": contents}


# -- regressions -----------------------------------------------------------------------------


def regressions(
    conn: sa.Connection,
    *,
    runs: int = 10,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
) -> list[answers.Regression]:
    """Tests that passed in a run's previous run and failed or errored in it (repeat by
    repeat, as ``compare`` pairs them), over the newest ``runs`` runs, newest first."""
    window = _window(conn, runs, agent=agent, since=since)
    now, was = results_t.alias("now"), results_t.alias("was")
    found = []
    for run_id in window:
        head = conn.execute(
            sa.select(runs_t.c.uid, runs_t.c.started_at, runs_t.c.trend_from, agents_t.c.name)
            .select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
            .where(runs_t.c.id == run_id)
        ).one()
        if head.trend_from is None:
            continue
        previous = conn.execute(
            sa.select(runs_t.c.uid).where(runs_t.c.id == head.trend_from)
        ).scalar()
        if previous is None:  # pruned since
            continue
        query = (
            sa.select(
                tests_t.c.key,
                tests_t.c.title,
                now.c.status,
                now.c.cause,
                now.c.messages,
                (
                    sa.func.coalesce(now.c.content_id, 0) != sa.func.coalesce(was.c.content_id, 0)
                ).label("changed"),
            )
            .select_from(
                now.join(
                    was, sa.and_(was.c.test_id == now.c.test_id, was.c.repeat == now.c.repeat)
                ).join(tests_t, tests_t.c.id == now.c.test_id)
            )
            .where(
                now.c.run_id == run_id,
                was.c.run_id == head.trend_from,
                was.c.status == PASSED,
                now.c.status.in_((FAILED, ERRORED)),
            )
            .order_by(tests_t.c.key)
        )
        if label is not None:
            query = query.where(now.c.test_id.in_(trends.labelled(label)))
        seen: set[str] = set()
        for row in conn.execute(query):
            if row.key in seen:  # one per test, whatever its repeats
                continue
            seen.add(row.key)
            found.append(
                answers.Regression(
                    id=row.key,
                    title=row.title,
                    run=head.uid,
                    previous=previous,
                    started_at=head.started_at,
                    agent=head.name,
                    status=tables.STATUS_NAMES[row.status],
                    cause=tables.CAUSE_NAMES.get(row.cause) if row.cause is not None else None,
                    messages=row.messages.split("\n") if row.messages else [],
                    changed=bool(row.changed),
                )
            )
    return found


# -- the grid --------------------------------------------------------------------------------


def grid(
    conn: sa.Connection,
    *,
    runs: int = 100,
    agent: str | None = None,
    label: str | None = None,
    since: datetime | None = None,
) -> answers.Grid:
    """The newest ``runs`` runs, oldest first, × every test they ran: one character per
    (test, run) (:data:`answers.CELLS`; a test's repeats make one cell, the worst of them),
    and each run's test durations. With ``label``: the tests carrying it, and each run
    counted over them alone (as :func:`runs` does)."""
    window = _window(conn, runs, agent=agent, since=since, label=label)
    if not window:
        return answers.Grid(columns=[], rows=[])
    found = {row["id"]: row for row in _rows_of(conn, window)}
    ordered = [found[run_id] for run_id in reversed(window)]  # oldest first
    kept = _trends(conn, ordered)
    columns_runs = [_run(row, kept.get(row["id"])) for row in ordered]
    if label is not None:
        columns_runs = [
            _scoped(conn, run, row, label) for run, row in zip(columns_runs, ordered, strict=True)
        ]
    place = {row["id"]: i for i, row in enumerate(ordered)}
    worst = {code: rank for rank, code in enumerate(answers.WORST_FIRST)}
    cells: dict[int, list[str]] = {}
    durations: list[list[int]] = [[] for _ in ordered]
    query = sa.select(
        results_t.c.test_id,
        results_t.c.run_id,
        results_t.c.status,
        results_t.c.cause,
        results_t.c.duration_ms,
    )
    if label is not None:
        query = query.where(results_t.c.test_id.in_(trends.labelled(label)))
    codes = {tables.STATUSES[name]: code for name, code in answers.CELLS.items()}
    for part in tables.chunks(window):
        for test_id, run_id, status, cause, duration in conn.execute(
            query.where(results_t.c.run_id.in_(part))
        ):
            i = place[run_id]
            code = codes.get(status, answers.OTHER_ERROR)
            if status == ERRORED and cause != BY_AGENT:
                code = answers.OTHER_ERROR
            row_cells = cells.get(test_id)
            if row_cells is None:
                row_cells = cells[test_id] = [answers.ABSENT] * len(ordered)
            held = row_cells[i]
            if held == answers.ABSENT or worst[code] < worst[held]:
                row_cells[i] = code
            durations[i].append(duration)
    rows = []
    for part in tables.chunks(sorted(cells)):
        for test in conn.execute(sa.select(tests_t).where(tests_t.c.id.in_(part))).mappings():
            rows.append(
                answers.Row(
                    id=test["key"],
                    title=test["title"],
                    file=test["file"],
                    line=test["line"],
                    labels=json.loads(test["labels"]),
                    cells="".join(cells[test["id"]]),
                )
            )
    rows.sort(key=lambda r: r.id)
    columns = [
        answers.Column(run=run, latency=_latency(took))
        for run, took in zip(columns_runs, durations, strict=True)
    ]
    return answers.Grid(columns=columns, rows=rows)


def _rows_of(conn: sa.Connection, ids: Sequence[int]) -> list[Any]:
    found: list[Any] = []
    for part in tables.chunks(ids):
        found.extend(conn.execute(_runs_select().where(runs_t.c.id.in_(part))).mappings())
    return found


def _trends(conn: sa.Connection, rows: Sequence[Any]) -> dict[int, answers.Trend]:
    """The trend kept on each run's row (:func:`_trend_of`), their previous runs' uids read
    at once."""
    wanted = sorted({r["trend_from"] for r in rows if r["trend_from"] is not None})
    uids: dict[int, str] = {}
    for part in tables.chunks(wanted):
        uids.update(
            conn.execute(sa.select(runs_t.c.id, runs_t.c.uid).where(runs_t.c.id.in_(part))).all()
        )
    return {
        row["id"]: _trend(
            uids.get(row["trend_from"], f"#{row['trend_from']}"),
            row["trend_effect"],
            row["trend_p"],
            row["trend_method"],
            row["trend_tests"],
        )
        for row in rows
        if row["trend_from"] is not None and row["trend_p"] is not None
    }


def _latency(took: list[int]) -> answers.Latency | None:
    """Mean, median and 90th percentile (nearest rank) of a run's test durations."""
    if not took:
        return None
    took.sort()
    n = len(took)
    return answers.Latency(
        mean_ms=round(sum(took) / n, 3),
        p50_ms=float(took[(n - 1) // 2]),
        p90_ms=float(took[max(0, -(-9 * n // 10) - 1)]),
    )


# -- baselines -------------------------------------------------------------------------------

GREEN = sa.or_(
    runs_t.c.exit_code == 0,
    sa.and_(
        runs_t.c.exit_code.is_(None),
        runs_t.c.failed == 0,
        runs_t.c.errored == 0,
        runs_t.c.flaky == 0,
        runs_t.c.interrupted.is_(False),
        runs_t.c.budget_stop.is_(None),
        runs_t.c.total > 0,
    ),
)
"""A run that passed whole: exit code 0 (a report imported without one: nothing failed,
errored, was flaky, interrupted or stopped by a budget)."""

_INCOMPLETE = sa.or_(runs_t.c.interrupted.is_(True), runs_t.c.budget_stop.is_not(None))
ENDINGS: dict[str, sa.ColumnElement[bool]] = {
    "green": GREEN,
    "incomplete": _INCOMPLETE,
    "failed": sa.and_(
        sa.not_(_INCOMPLETE), sa.or_(runs_t.c.failed > 0, runs_t.c.errored_agent > 0)
    ),
    "errored": sa.and_(
        sa.not_(_INCOMPLETE),
        runs_t.c.failed == 0,
        runs_t.c.errored_agent == 0,
        runs_t.c.errored > 0,
    ),
}
"""The condition of each :data:`.facts.Ending` (read when a query runs: defined below
``GREEN``, which it uses)."""


def baseline(
    conn: sa.Connection,
    which: str,
    *,
    agent: str | None = None,
    suite: str | None = None,
    exclude: str | None = None,
) -> tuple[answers.Run, dict[str, Any]]:
    """The run ``which`` names (``last``, ``last-green`` or a uid) and its report, rebuilt as
    ``compare`` reads one (version 2: summary, provenance, a test entry per result). ``last``
    and ``last-green`` are of ``agent`` and ``suite`` (a run of no known suite, imported, is
    of any), never the run ``exclude``."""
    if which in ("last", "last-green"):
        query = _filtered(_runs_select(), agent=agent)
        if suite is not None:
            query = query.where(sa.or_(runs_t.c.suite == suite, runs_t.c.suite.is_(None)))
        if exclude is not None:
            query = query.where(runs_t.c.uid != exclude)
        if which == "last-green":
            query = query.where(GREEN)
        row = conn.execute(trends.newest(query).limit(1)).mappings().first()
        if row is None:
            of = " ".join(
                part
                for part in (
                    f"of agent {agent!r}" if agent else "",
                    f"of suite {suite!r}" if suite else "",
                )
                if part
            )
            kind = "green run (exit code 0)" if which == "last-green" else "run"
            raise errors.NotFoundError(
                f"no {kind} {of} in the history to compare with".replace("  ", " ")
            )
    else:
        row = _run_row(conn, which)
    found = _run(row, _trend_of(conn, row))
    return found, _report(conn, row, found)


def _report(conn: sa.Connection, row: Any, run: answers.Run) -> dict[str, Any]:
    query = (
        sa.select(
            results_t,
            tests_t.c.key,
            tests_t.c.title,
            tests_t.c.file,
            tests_t.c.line,
            tests_t.c.labels,
            contents_t.c.hash,
        )
        .select_from(
            results_t.join(tests_t, tests_t.c.id == results_t.c.test_id).outerjoin(
                contents_t, contents_t.c.id == results_t.c.content_id
            )
        )
        .where(results_t.c.run_id == row["id"])
        .order_by(tests_t.c.key, results_t.c.repeat)
    )
    tests = []
    for r in conn.execute(query).mappings():
        messages = r["messages"].split("\n") if r["messages"] else []
        error = next((m.removeprefix("error: ") for m in messages if m.startswith("error: ")), None)
        tests.append(
            {
                "id": r["key"],
                "name": r["title"],
                "file": r["file"],
                "line": r["line"],
                "labels": json.loads(r["labels"]),
                "repeat": r["repeat"],
                "status": tables.STATUS_NAMES[r["status"]],
                "score": r["score"],
                "error": error,
                "cause": tables.CAUSE_NAMES.get(r["cause"]) if r["cause"] is not None else None,
                "duration_ms": float(r["duration_ms"]),
                "content_hash": r["hash"] or "",
                "metrics": {
                    k: v
                    for k, v in (("total_tokens", r["tokens"]), ("cost_usd", r["cost_usd"]))
                    if v is not None
                },
                "signals": [],
                "quarantined": bool(r["quarantined"]),
            }
        )
    summary: dict[str, Any] = {
        "total": run.total,
        "passed": run.passed,
        "failed": run.failed,
        "errored": run.errored,
        "skipped": run.skipped,
        "flaky_count": run.flaky,
        "not_run": run.not_run,
        "pass_rate": run.pass_rate,
        "score": run.score,
        "duration_ms": run.duration_ms or 0.0,
        "tokens": run.tokens,
        "cost_usd": run.cost_usd,
        "errored_by_cause": run.errored_by_cause,
        "repeats": max([run.repeats, *(t["repeat"] + 1 for t in tests)]),
        "interrupted": run.interrupted,
    }
    agent = run.agent.model_dump(exclude={"version"}) if run.agent is not None else None
    provenance = {
        "run_id": run.uid,
        "agent": agent,
        "judge": {"provider": run.judge_provider, "model": run.judge_model},
        "agent_health_version": run.agent_health_version,
        "suite": {
            "git_commit": run.git_commit,
            "git_branch": run.git_branch,
            "git_dirty": run.git_dirty,
        },
        "ledger": run.ledger_url,
        "started_at": run.started_at.isoformat(),
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
    }
    return {"version": 2, "summary": summary, "provenance": provenance, "tests": tests}


# -- one run's results -----------------------------------------------------------------------


def results(
    conn: sa.Connection,
    uid: str,
    *,
    status: str | None = None,
    offset: int = 0,
    limit: int = 1000,
) -> answers.Results:
    """A page of one run's results (of ``status`` only, when given), in test id then repeat
    order: one query over the run's primary-key range, joined with its tests."""
    page = _results_page(conn, uid, status=status, offset=offset, limit=limit)
    # One validation of the whole page in pydantic's core, not a model built per row in
    # Python: for 2,000 results that was most of the page's time.
    return answers.Results.model_validate(page)


def results_json(
    conn: sa.Connection,
    uid: str,
    *,
    status: str | None = None,
    offset: int = 0,
    limit: int = 1000,
) -> bytes:
    """:func:`results` as the JSON of :class:`.answers.Results`, written straight from the rows:
    what a server sends. The rows are this module's own, typed by their columns, so
    validating them into models first only costs (for 2,000 results a third of the page's
    time, bench/serve.py); ``tests/test_history_store.py`` holds the two to the same JSON."""
    page = _results_page(conn, uid, status=status, offset=offset, limit=limit)
    return pydantic_core.to_json(page)


def _results_page(
    conn: sa.Connection, uid: str, *, status: str | None, offset: int, limit: int
) -> dict[str, Any]:
    """:class:`.answers.Results` as plain data (each field of :class:`.answers.Result`)."""
    row = _run_row(conn, uid)
    where = [results_t.c.run_id == row["id"]]
    if status is not None:
        code = tables.STATUSES.get(status)
        if code is None:
            raise errors.NotFoundError(f"no status {status!r}: one of {', '.join(tables.STATUSES)}")
        where.append(results_t.c.status == code)
    r, t = results_t.c, tests_t.c
    query = (
        sa.select(
            t.key,
            t.title,
            t.file,
            t.line,
            t.labels,
            r.repeat,
            r.status,
            r.cause,
            r.score,
            r.duration_ms,
            r.tokens,
            r.cost_usd,
            contents_t.c.hash,
            r.quarantined,
            r.turns,
            r.ended,
            r.messages,
        )
        .select_from(
            results_t.join(tests_t, t.id == r.test_id).outerjoin(
                contents_t, contents_t.c.id == r.content_id
            )
        )
        .where(*where)
        .order_by(t.key, r.repeat)
        .offset(offset)
        .limit(limit)
    )
    # Most tests share a few label sets (most often none): each is parsed once.
    labels: dict[str, list[str]] = {}
    status_names, cause_names = tables.STATUS_NAMES, tables.CAUSE_NAMES
    rows = [
        {
            "id": key,
            "title": title,
            "file": file,
            "line": line,
            "labels": labels[said] if said in labels else labels.setdefault(said, json.loads(said)),
            "repeat": repeat,
            "status": status_names[status],
            "cause": cause_names.get(cause) if cause is not None else None,
            "score": score,
            "duration_ms": duration,
            "tokens": tokens,
            "cost_usd": cost,
            "content_hash": content,
            "quarantined": bool(quarantined),
            "turns": turns,
            "ended": ended,
            "messages": messages.split("\n") if messages else [],
        }
        for (
            key,
            title,
            file,
            line,
            said,
            repeat,
            status,
            cause,
            score,
            duration,
            tokens,
            cost,
            content,
            quarantined,
            turns,
            ended,
            messages,
        ) in conn.execute(query).all()
    ]
    total = len(rows) + offset
    if len(rows) == limit or (offset and not rows):  # more may follow: count them
        total = conn.execute(
            sa.select(sa.func.count()).select_from(results_t).where(*where)
        ).scalar_one()
    return {"run": row["uid"], "total": int(total), "offset": offset, "results": rows}


# -- size and retention ----------------------------------------------------------------------


def count(conn: sa.Connection) -> tuple[int, int]:
    runs_n = conn.execute(sa.select(sa.func.count()).select_from(runs_t)).scalar_one()
    results_n = conn.execute(sa.select(sa.func.count()).select_from(results_t)).scalar_one()
    return int(runs_n), int(results_n)


def prune(conn: sa.Connection, *, keep_days: float | None, keep_runs: int | None) -> int:
    """Delete the runs older than ``keep_days`` days, or past the newest ``keep_runs``, with
    their results; then the agents no run refers to. Tests and content hashes stay (a row
    per test ever seen, and a run about to be recorded may have written them already)."""
    doomed: set[int] = set()
    if keep_days is not None:
        cutoff = datetime.now(UTC) - timedelta(days=keep_days)
        doomed.update(
            conn.execute(sa.select(runs_t.c.id).where(runs_t.c.started_at < cutoff)).scalars()
        )
    if keep_runs is not None:
        doomed.update(
            conn.execute(trends.newest(sa.select(runs_t.c.id)).offset(keep_runs)).scalars()
        )
    ids = sorted(doomed)
    for part in tables.chunks(ids):
        conn.execute(sa.delete(results_t).where(results_t.c.run_id.in_(part)))
        conn.execute(sa.delete(runs_t).where(runs_t.c.id.in_(part)))
    if ids:
        agents_used = sa.select(runs_t.c.agent_id).where(runs_t.c.agent_id.is_not(None))
        conn.execute(sa.delete(agents_t).where(agents_t.c.id.not_in(agents_used.distinct())))
    return len(ids)
