"""A run's attempt: an EvaluationRun whose errored cells were requeued records again, its new
grades replacing the earlier attempt's (docs/operator.md, "The history").

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for every run recorded before: their first (and only) attempt.
    op.add_column("runs", sa.Column("attempt", sa.SmallInteger))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("attempt")
