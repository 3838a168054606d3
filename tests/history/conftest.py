"""The history of runs: its store (SQLite and PostgreSQL), its queries, pages and the CLI on it."""
