"""Alembic's environment for the history: always online, on the connection the caller opened
(``config.attributes["connection"]``), inside the caller's transaction; no ini file, no logging
set-up (a command's output stays its own)."""

from __future__ import annotations

from alembic import context

from agent_health.history import tables

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=tables.metadata,
    # SQLite alters a table by copying it: Alembic's batch mode does that where needed.
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
