"""Errors of the traces package.

::

    AgentHealthError (agent_health.sdk.errors)
     └── TracesError            a trace could not be read for this run
          ├── TracesNotEnabled  traces are switched off for the agent under test
          ├── TracesNotFound    no spans (or no token usage) landed within the bounded wait
          └── TracesBackendError the trace store answered with an error or was unreachable

Every message names the run id and, where there is one, the index or source and what to do.
A trace that cannot be read is an error, never a silent zero.
"""

from __future__ import annotations

from agent_health.sdk import errors


class TracesError(errors.AgentHealthError):
    """A trace could not be read for this run."""


class TracesNotEnabled(TracesError):
    """Traces are switched off for the agent under test (``traces.enabled``)."""


class TracesNotFound(TracesError):
    """Nothing landed for this run within the bounded wait."""


class TracesBackendError(TracesError):
    """The trace store failed (unreachable, bad credentials, a malformed answer)."""
