"""OTLP export of runs: its spans, encoding and the example."""
