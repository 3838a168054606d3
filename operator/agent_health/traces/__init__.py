"""Traces of a run and the metrics derived from them (DESIGN.md §4)."""
