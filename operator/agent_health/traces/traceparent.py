"""What a W3C ``traceparent`` (``00-<trace id>-<parent span id>-<flags>``) holds.

Read by every test's result (its ``trace_id``) and by the trace sources; kept apart from
:mod:`.records` so that a run whose tests read no traces never makes the span and log
record classes (``tests/cli/test_cli_imports.py``).
"""

from __future__ import annotations


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id inside a W3C ``traceparent`` (``00-<trace id>-<span id>-<flags>``)."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    return parts[1]


def span_id_of(traceparent: str | None) -> str | None:
    """The parent span id inside a W3C ``traceparent``."""
    if not traceparent:
        return None
    parts = traceparent.split("-")
    return parts[2] if len(parts) == 4 and len(parts[2]) == 16 else None
