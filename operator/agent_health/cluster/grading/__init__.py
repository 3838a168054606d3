"""Grading cells from their ledgers: evidence, the verdict, re-grading a recorded ledger."""
