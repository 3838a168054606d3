"""The first schema: runs, their results, tests, agents and content hashes.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "history_info",
        sa.Column("key", sa.String(40), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "agents",
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
    op.create_table(
        "tests",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.Text, nullable=False, unique=True),  # the test's stable id
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("file", sa.Text, nullable=False),
        sa.Column("line", sa.Integer, nullable=False),
        sa.Column("labels", sa.Text, nullable=False),  # JSON list, as last recorded
    )
    op.create_table(
        "test_labels",
        sa.Column("label", sa.Text, primary_key=True),
        sa.Column("test_id", sa.Integer, sa.ForeignKey("tests.id"), primary_key=True),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "contents",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("hash", sa.String(80), nullable=False, unique=True),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uid", sa.String(80), nullable=False, unique=True),
        sa.Column("group_uid", sa.String(80)),  # an agent matrix: its runs share it
        sa.Column("agent_id", sa.Integer, sa.ForeignKey("agents.id")),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("suite", sa.Text),  # which suite: its folder in git, or the RunSpec
        sa.Column("suite_hash", sa.String(80)),  # sha256 of its tests' ids and content
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
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
    op.create_table(
        "results",
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


def downgrade() -> None:
    for table in ("results", "runs", "contents", "test_labels", "tests", "agents"):
        op.drop_table(table)
    op.drop_table("history_info")
