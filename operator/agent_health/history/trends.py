"""A run's trend: its pass rate against the previous run of the same agent and suite, by the
paired test ``compare`` uses (:mod:`agent_health.engine.statistics.pairing`), worked out when
the run is recorded and kept on its row — and what a run reads of its agent's newest runs
for the history line it prints.

What a recording needs of the history's reading, apart from :mod:`.queries` (the
``history`` command's, the page's and the server's): ``agent-health run`` records and says
its line without importing those or building their answers' models (:mod:`.answers`).
:mod:`.queries` marks a kept trend with :func:`mark`, and works one out over a label's
tests with :func:`change`.

* the *previous run* of a run is the newest one before it of the same agent name and suite
  (:func:`previous_run`; :func:`ahead_of` finds it while the run goes on, before it is recorded);
* a trend is *marked* better or worse when its change is significant at :data:`ALPHA`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa

from agent_health.history import facts, tables

if TYPE_CHECKING:
    from agent_health.engine import statistics

ALPHA = 0.05
"""The significance level of a run's trend mark (▲/▼), as ``compare``'s default."""

runs_t, results_t, agents_t = tables.runs, tables.results, tables.agents
labels_t = tables.test_labels


def named(agent: str) -> sa.ColumnElement[bool]:
    """The condition "a run of the agent ``agent``" (its name, or its URL) as listing runs
    filters them (the runs joined with their agents)."""
    return sa.or_(agents_t.c.name == agent, agents_t.c.url == agent)


def newest(query: sa.Select[Any]) -> sa.Select[Any]:
    return query.order_by(runs_t.c.started_at.desc(), runs_t.c.id.desc())


def labelled(label: str) -> sa.Select[Any]:
    return sa.select(labels_t.c.test_id).where(labels_t.c.label == label)


class Rate(NamedTuple):
    """One run's pass rate and its trend's mark, as the history line a run prints shows it."""

    pass_rate: float | None
    agentless: bool
    """The run had no agent (a suite run without one): what the line of such a run lists."""
    mark: facts.Mark | None
    method: str | None
    p_value: float | None


def rates(
    conn: sa.Connection, *, agent: str | None = None, suite: str | None = None, limit: int = 20
) -> list[Rate]:
    """The newest runs' pass rates and trend marks, newest first, found as
    :func:`.queries.runs` finds them (by ``agent``'s name or URL and ``suite``) — the history
    line's, read without making a :class:`~.answers.Run` of each (its model, its fifty columns
    and the previous runs' uids are what the line does not show)."""
    query = sa.select(
        runs_t.c.pass_rate,
        runs_t.c.agent_id,
        runs_t.c.trend_from,
        runs_t.c.trend_effect,
        runs_t.c.trend_p,
        runs_t.c.trend_method,
    ).select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
    if agent is not None:
        query = query.where(named(agent))
    if suite is not None:
        query = query.where(runs_t.c.suite == suite)
    query = newest(query)
    found = []
    rows: Sequence[Any] = conn.execute(query.limit(limit)).all()
    for rate, agent_id, since, effect, p, method in rows:
        trended = since is not None and p is not None
        found.append(
            Rate(
                pass_rate=rate,
                agentless=agent_id is None,
                mark=mark(effect, p) if trended else None,
                method=method if trended else None,
                p_value=p if trended else None,
            )
        )
    return found


def mark(effect: float, p: float) -> facts.Mark | None:
    """Better or worse when the change is significant at :data:`ALPHA`."""
    if p < ALPHA and effect:
        return "better" if effect > 0 else "worse"
    return None


def run_entries(
    conn: sa.Connection, run_id: int, label: str | None = None, *, scores: bool = True
) -> list[dict[str, Any]]:
    """A run's results as ``compare``'s test entries (id, repeat, status, cause, score);
    ``scores=False``: every score ``None`` (a trend pairs pass rates alone), not read."""
    score = results_t.c.score if scores else sa.null()
    query = sa.select(
        results_t.c.test_id, results_t.c.repeat, results_t.c.status, results_t.c.cause, score
    ).where(results_t.c.run_id == run_id)
    if label is not None:
        query = query.where(results_t.c.test_id.in_(labelled(label)))
    names, causes = tables.STATUS_NAMES, tables.CAUSE_NAMES
    # Fetched at once (one call into the driver, not one per row).
    return [
        {
            "id": str(test_id),
            "repeat": repeat,
            "status": names[status],
            "cause": causes.get(cause) if cause is not None else None,
            "score": value,
        }
        for test_id, repeat, status, cause, value in conn.execute(query).all()
    ]


def same_line(conn: sa.Connection, run_id: int) -> tuple[Any, sa.ColumnElement[bool]]:
    """A run's row, and the condition "a run of the same agent name and suite"."""
    row = conn.execute(
        sa.select(runs_t.c.id, runs_t.c.started_at, runs_t.c.suite, agents_t.c.name)
        .select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
        .where(runs_t.c.id == run_id)
    ).one()
    return row, of_line(row.name, row.suite)


def of_line(agent: str | None, suite: str | None) -> sa.ColumnElement[bool]:
    """The condition "a run of the agent named ``agent`` and of ``suite``"."""
    if agent is None:
        named = sa.or_(runs_t.c.agent_id.is_(None), agents_t.c.name.is_(None))
    else:
        named = agents_t.c.name == agent
    suite_is = runs_t.c.suite.is_(None) if suite is None else runs_t.c.suite == suite
    return sa.and_(named, suite_is)


def previous_run(
    conn: sa.Connection, run_id: int, line: tuple[Any, Any] | None = None
) -> int | None:
    """The newest run before ``run_id`` of the same agent name and suite (``line``: what
    :func:`same_line` says of it, when the caller read it already)."""
    row, same = line or same_line(conn, run_id)
    earlier = sa.or_(
        runs_t.c.started_at < row.started_at,
        sa.and_(runs_t.c.started_at == row.started_at, runs_t.c.id < row.id),
    )
    found = conn.execute(
        newest(
            sa.select(runs_t.c.id)
            .select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
            .where(same, earlier)
        ).limit(1)
    ).scalar()
    return int(found) if found is not None else None


def ahead_of(
    conn: sa.Connection, agent: str | None, suite: str | None, started_at: datetime
) -> tuple[int, list[dict[str, Any]]] | None:
    """The run a run of ``agent`` and ``suite`` started at ``started_at`` will be compared
    with once it is recorded — the newest of that agent and suite started by then — and its
    results as ``compare``'s entries, their scores left out (a trend pairs pass rates
    alone); read while the run goes on, so recording it at its end reads neither
    (:func:`renew_trend` checks it is still the previous run)."""
    found = conn.execute(
        newest(
            sa.select(runs_t.c.id)
            .select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
            .where(of_line(agent, suite), runs_t.c.started_at <= started_at)
        ).limit(1)
    ).scalar()
    if found is None:
        return None
    return int(found), run_entries(conn, int(found), scores=False)


def next_run(conn: sa.Connection, run_id: int, line: tuple[Any, Any] | None = None) -> int | None:
    """The oldest run after ``run_id`` of the same agent name and suite (``line``: as
    :func:`previous_run`'s)."""
    row, same = line or same_line(conn, run_id)
    later = sa.or_(
        runs_t.c.started_at > row.started_at,
        sa.and_(runs_t.c.started_at == row.started_at, runs_t.c.id > row.id),
    )
    found = conn.execute(
        sa.select(runs_t.c.id)
        .select_from(runs_t.outerjoin(agents_t, runs_t.c.agent_id == agents_t.c.id))
        .where(same, later)
        .order_by(runs_t.c.started_at, runs_t.c.id)
        .limit(1)
    ).scalar()
    return int(found) if found is not None else None


def change(
    conn: sa.Connection,
    previous: int,
    run_id: int,
    label: str | None = None,
    after: list[dict[str, Any]] | None = None,
    before: list[dict[str, Any]] | None = None,
) -> statistics.PairedTest | None:
    """The pass rate's paired test between two runs' results (:func:`paired`'s, without the
    previous run's uid, which a run's row keeps as its id)."""
    from agent_health.engine import statistics

    if before is None:
        before = run_entries(conn, previous, label)
    if after is None:
        after = run_entries(conn, run_id, label)
    return statistics.pair_runs(unscored(before), unscored(after)).pass_rate


def unscored(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with every score ``None`` (the pass rate's test alone), copied only where
    one has a score."""
    return [e if e["score"] is None else {**e, "score": None} for e in entries]


def renew_trend(
    conn: sa.Connection,
    run_id: int,
    entries: list[dict[str, Any]] | None = None,
    ahead: tuple[int, list[dict[str, Any]]] | None = None,
    *,
    line: tuple[Any, Any] | None = None,
) -> None:
    """Work out and keep a run's trend against its previous run (``entries``: the run's own
    results as ``compare``'s test entries, when the caller holds them; ``ahead``: what
    :func:`ahead_of` read while the run went on, used when it is the previous run still;
    ``line``: what :func:`same_line` says of the run, when the caller read it)."""
    before_id = previous_run(conn, run_id, line)
    before = ahead[1] if ahead is not None and ahead[0] == before_id else None
    found = (
        change(conn, before_id, run_id, after=entries, before=before)
        if before_id is not None
        else None
    )
    conn.execute(
        sa.update(runs_t)
        .where(runs_t.c.id == run_id)
        .values(
            trend_from=before_id,
            trend_effect=found.effect if found else None,
            trend_p=found.p_value if found else None,
            trend_method=found.method if found else None,
            trend_tests=found.tests if found else None,
        )
    )
