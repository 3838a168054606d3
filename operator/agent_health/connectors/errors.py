"""Errors raised by connectors.

::

    ConnectorError                 the agent could not be reached or answered badly
     ├── AgentUnreachable          connection refused, DNS, reset before an answer
     ├── AgentTimeout              no complete answer within the timeout (``partial``: what
     │                             had arrived by then)
     ├── AgentHTTPError            the agent answered with a non-2xx status
     ├── AgentRunFailed            the agent said its run failed (AG-UI RUN_ERROR, an error
     │                             body, a command that exited non-zero)
     ├── AgentProtocolError        the answer is not valid protocol (bad JSON, bad shape)
     │    └── AgentStreamIncomplete  a stream ended before its final event
     ├── ConnectorConfigError      the connector spec itself is wrong (unknown kind, bad URL)
     └── AgentAbsent               before the first test: no agent answers where the spec
                                   says (never a test's error: the run does not start)

Every error carries a one-line message that says which of these happened; the engine
turns it into an ``errored`` test with that message, and ``error_cause`` says whom the
error blames: the agent under test, except for a wrong connector spec (the test's setup).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_health.connectors.partial import Partial

# A pattern, compiled by re (and kept in its cache) at the first message that quotes a URL:
# an error's message, which a passing run never makes.
_URL = r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+"


def without_credentials(text: str) -> str:
    """``text`` with every URL's user info and query string cut (``user:pass@``,
    ``?api_key=...``): where an agent's URL carries its credentials. Messages name the agent
    by its URL, and they end up in terminals, reports and CI logs."""
    return re.sub(_URL, _cut, text)


def _cut(match: re.Match[str]) -> str:
    scheme, _, rest = match.group(0).partition("://")
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]
    path, question, _ = path.partition("?")
    if not slash:  # no path: the query, if any, follows the authority
        authority, question, _ = authority.partition("?")
    return f"{scheme}://{authority}{slash}{path}" + ("?…" if question else "")


class ConnectorError(Exception):
    """The agent could not be reached or its answer could not be used. Its message never
    carries the credentials of a URL it quotes (:func:`without_credentials`)."""

    error_cause: str = "agent"

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(without_credentials(message), *args)


class AgentUnreachable(ConnectorError):
    """The connection to the agent failed before any answer arrived."""


class AgentTimeout(ConnectorError):
    """The agent did not answer within the timeout. ``partial``: what it had sent by then,
    when the connector kept it (every built-in one does; see :mod:`.partial`)."""

    def __init__(self, message: str, *, partial: Partial | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class AgentHTTPError(ConnectorError):
    """The agent answered with a status that is not 2xx."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class AgentRunFailed(ConnectorError):
    """The agent answered, and its answer says the run failed."""


class AgentProtocolError(ConnectorError):
    """The agent's answer does not follow the protocol."""


class AgentStreamIncomplete(AgentProtocolError):
    """An event stream ended (or was cut) before the event that finishes a run."""


class ConnectorConfigError(ConnectorError):
    """The connector is configured wrongly (unknown kind, missing URL, ...)."""

    error_cause: str = "test"


class AgentAbsent(ConnectorError):
    """A run's look before its first test (:mod:`.preflight`) found no agent where the spec
    says: nothing answers at the URL, nothing is served at its path, or a subprocess agent's
    program does not exist. The run does not start; the message names the URL and the
    likely fix."""
