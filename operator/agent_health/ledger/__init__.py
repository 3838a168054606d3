"""Ledger records and backends (DESIGN.md §6): per-cell append-only JSONL, HMAC-chained."""
