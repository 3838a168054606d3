"""Errors of the history (the store of every run).

::

    HistoryError                   (agent_health.sdk.errors.AgentHealthError)
     ├── LocationError             the URL cannot name a history: an unknown scheme, a
     │                             malformed URL, a missing extra (a usage error: exit 2
     │                             before anything runs)
     ├── UnavailableError          the history cannot be opened, read or written: unreachable,
     │                             locked past its busy timeout, corrupt, no permission
     │    └── NewerSchemaError     written by a newer agent-health (its schema revision is
     │                             one this agent-health does not know): refused, never changed
     └── NotFoundError             what was asked for is not in the history (a run id, a
                                   baseline, a test)

Every message is one line, names the history by its URL with the password taken out
(:func:`agent_health.history.location.Location.shown`) and says what to do. SQLAlchemy's and
the drivers' errors are translated at the boundary (``raise ... from err``): a run that cannot
record its results warns with this line and goes on (the history is never why a run fails).
"""

from __future__ import annotations

from agent_health.sdk import errors


class HistoryError(errors.AgentHealthError):
    """Base of the history's errors."""

    error_cause = "infra"


class LocationError(HistoryError):
    """The URL cannot name a history (unknown scheme, malformed, a missing extra)."""


class UnavailableError(HistoryError):
    """The history cannot be opened, read or written (unreachable, locked, corrupt)."""


class NewerSchemaError(UnavailableError):
    """The history was written by a newer agent-health; it is left as it is."""


class NotFoundError(HistoryError):
    """A run, a baseline or a test the history does not hold."""
