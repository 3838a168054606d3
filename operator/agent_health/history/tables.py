"""The history's tables (SQLAlchemy Core), as the newest migration leaves them.

A result is the row there are millions of, so it is kept small (52 bytes on SQLite at 2 M
results, index included; ``bench/history.py`` measures it): keyed by (run, test, repeat) —
integers, the table
clustered on that key (``WITHOUT ROWID`` on SQLite) — with the status and cause as small
integer codes, the duration in whole milliseconds, and the test's content hash as the
integer id of a row of ``contents`` (one per distinct hash, not 71 characters per result).
What a result says in words (its error and failed gates, one line each) is kept only for
results that did not pass. A test's title, file, line and labels live once, in ``tests``;
an agent's identity (name, connector, URL, command, image digest, version) once, in
``agents``. Everything a run is (counts, intervals, git, CI, judge, where its report is)
is one row of ``runs``.

Changing a table here needs a new revision under ``migrations/versions/`` that makes the
same change (``tests/history/test_history_store.py`` compares the two): a history on disk is
migrated in place by Alembic when a newer agent-health opens it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

STATUSES: dict[str, int] = {"passed": 1, "failed": 2, "errored": 3, "skipped": 4, "flaky": 5}
"""A result's status as stored (never renumber: the codes are on disk)."""
CAUSES: dict[str, int] = {"agent": 1, "judge": 2, "test": 3, "infra": 4}
"""An errored result's cause as stored."""
STATUS_NAMES = {code: name for name, code in STATUSES.items()}
CAUSE_NAMES = {code: name for name, code in CAUSES.items()}
SOURCES = ("local", "ci", "operator")
"""Where a run was recorded from: a laptop, a CI job, the operator."""
CHUNK = 500
"""Keys bound in one statement at most (``IN (...)``): :func:`chunks`."""


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """``values`` in slices of at most ``size`` (bound parameters per statement stay few)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


class UtcDateTime(sa.TypeDecorator[datetime]):
    """A moment, always in UTC: written as UTC (SQLite keeps it as text without a zone,
    PostgreSQL as ``timestamptz``) and read back as an aware UTC ``datetime``, whatever the
    database or its session's time zone."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# The names of constraints and indexes; revision 0001 made them by this convention (Alembic
# names them with the target metadata's), so it never changes.
metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

info = sa.Table(
    "history_info",
    metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

agents = sa.Table(
    "agents",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("identity", sa.String(64), nullable=False, unique=True),
    sa.Column("name", sa.Text),
    sa.Column("connector", sa.Text),
    sa.Column("url", sa.Text),  # without user info or query
    sa.Column("command", sa.Text),  # a started or cmd: agent's argv, as JSON
    sa.Column("image", sa.Text),  # the pinned image digest (cluster cells)
    sa.Column("version", sa.Text),  # the version the agent reports, if any
    sa.Index(None, "name"),
)

tests = sa.Table(
    "tests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("key", sa.Text, nullable=False, unique=True),  # the test's stable id
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("file", sa.Text, nullable=False),
    sa.Column("line", sa.Integer, nullable=False),
    sa.Column("labels", sa.Text, nullable=False),  # JSON list, as last recorded
)

test_labels = sa.Table(
    "test_labels",
    metadata,
    sa.Column("label", sa.Text, primary_key=True),
    sa.Column("test_id", sa.Integer, sa.ForeignKey("tests.id"), primary_key=True),
    sqlite_with_rowid=False,
)

contents = sa.Table(
    "contents",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("hash", sa.String(80), nullable=False, unique=True),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("uid", sa.String(80), nullable=False, unique=True),
    sa.Column("group_uid", sa.String(80)),  # an agent matrix: its runs share it
    sa.Column("agent_id", sa.Integer, sa.ForeignKey("agents.id")),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("suite", sa.Text),  # which suite: its folder in git, or the RunSpec
    sa.Column("suite_hash", sa.String(80)),  # sha256 of its tests' ids and content
    sa.Column("started_at", UtcDateTime(), nullable=False),
    sa.Column("ended_at", UtcDateTime()),
    sa.Column("recorded_at", UtcDateTime(), nullable=False),
    sa.Column("duration_ms", sa.Float),
    sa.Column("exit_code", sa.SmallInteger),
    sa.Column("interrupted", sa.Boolean, nullable=False),
    sa.Column("budget_stop", sa.Text),  # the budget limit that stopped it, if one did
    sa.Column("stopped", sa.Text),  # why no more tests started (-x), if so
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("passed", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),
    sa.Column("errored", sa.Integer, nullable=False),
    sa.Column("skipped", sa.Integer, nullable=False),
    sa.Column("flaky", sa.Integer, nullable=False),
    sa.Column("not_run", sa.Integer, nullable=False),
    sa.Column("errored_agent", sa.Integer, nullable=False),
    sa.Column("errored_judge", sa.Integer, nullable=False),
    sa.Column("errored_test", sa.Integer, nullable=False),
    sa.Column("errored_infra", sa.Integer, nullable=False),
    sa.Column("pass_rate", sa.Float),
    sa.Column("pass_rate_low", sa.Float),
    sa.Column("pass_rate_high", sa.Float),
    sa.Column("score", sa.Float),
    sa.Column("score_low", sa.Float),
    sa.Column("score_high", sa.Float),
    sa.Column("tokens", sa.BigInteger),
    sa.Column("cost_usd", sa.Float),
    sa.Column("repeats", sa.Integer, nullable=False),
    sa.Column("selection", sa.Text),  # JSON: grep, labels, shard
    sa.Column("git_commit", sa.String(64)),
    sa.Column("git_branch", sa.Text),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("judge_provider", sa.Text),
    sa.Column("judge_model", sa.Text),
    sa.Column("ci_provider", sa.String(32)),
    sa.Column("ci_url", sa.Text),
    sa.Column("ci_job", sa.Text),
    sa.Column("ci_commit", sa.String(64)),
    sa.Column("ci_branch", sa.Text),
    sa.Column("ci_pr", sa.Text),
    sa.Column("report_path", sa.Text),
    sa.Column("ledger_url", sa.Text),
    sa.Column("ledger_verified", sa.Boolean),
    sa.Column("agent_health_version", sa.String(40)),
    sa.Column("config_hash", sa.String(80)),
    # Which attempt of the run the results are (revision 0002): null or 0 its first; N after
    # an EvaluationRun's errored cells were requeued N times, its new grades replacing these.
    sa.Column("attempt", sa.SmallInteger),
    # The pass rate against the previous run of the same agent and suite (the paired test
    # compare uses), worked out when the run is recorded so that listing runs reads no result.
    sa.Column("trend_from", sa.Integer),  # the previous run's id
    sa.Column("trend_effect", sa.Float),
    sa.Column("trend_p", sa.Float),
    sa.Column("trend_method", sa.String(32)),
    sa.Column("trend_tests", sa.Integer),
    sa.Index(None, "agent_id", "started_at"),
    sa.Index(None, "started_at"),
    sa.Index(None, "group_uid"),
)

results = sa.Table(
    "results",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("test_id", sa.Integer, sa.ForeignKey("tests.id"), primary_key=True),
    sa.Column("repeat", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("status", sa.SmallInteger, nullable=False),
    sa.Column("cause", sa.SmallInteger),
    sa.Column("score", sa.Float),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Column("tokens", sa.Integer),
    sa.Column("cost_usd", sa.Float),
    sa.Column("content_id", sa.Integer, sa.ForeignKey("contents.id")),
    sa.Column("quarantined", sa.Boolean),
    sa.Column("turns", sa.SmallInteger),  # a conversation's turns; null for one run
    sa.Column("ended", sa.String(16)),  # why a conversation ended
    sa.Column("messages", sa.Text),  # its error and failed gates, one line each
    sa.Index(None, "test_id", "run_id"),
    sqlite_with_rowid=False,
)
