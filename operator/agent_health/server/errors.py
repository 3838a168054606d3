"""The server's one exception tree::

    ServerError                 anything ``agent-health serve`` refuses, one line each
    ├── SettingsError           flags that cannot serve safely or at all (a usage error, exit 2)
    └── SteeringError           a start, cancel or steer the server cannot do now (answered 409)
        ├── Invalid             what was asked cannot be done at all (answered 400)
        └── NotFound            no such run, worker or EvaluationRun (answered 404)

Errors of the parts it calls (the history's, the cluster's API) are translated where the
server calls them, ``raise ... from err``.
"""

from __future__ import annotations


class ServerError(Exception):
    """Something ``agent-health serve`` refuses; its text is one line saying what to do."""


class SettingsError(ServerError):
    """The server's settings cannot serve (a public address without a credential, a token
    file that cannot be read, a port in use)."""


class SteeringError(ServerError):
    """A start, cancel or steer that cannot be done; ``status`` is the HTTP answer."""

    status = 409


class Invalid(SteeringError):
    status = 400


class NotFound(SteeringError):
    status = 404
