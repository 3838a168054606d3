"""``agent-health serve``: the server transport — pages and a JSON API (described by OpenAPI)
over the history, live runs over Server-Sent Events, and starting and steering runs, local
and in the cluster (docs/serve.md).

The face of the room::

    from agent_health import server

    guards = server.Access(host="127.0.0.1")
    settings = server.Settings(history="sqlite:///.agent-health/history.db", port=0)
    await server.serve(settings, guards, ready=print)        # until cancelled

    app = server.application(state)                           # the aiohttp application

It sits above the engine and the history (it reads the history through its face, and the
engine's reports and ``compare``) and below the CLI (an import-linter contract keeps it so).
Names load on first use: ``agent-health --help`` never imports aiohttp's web server.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from agent_health.server.access import Access, Role
    from agent_health.server.app import application, serve
    from agent_health.server.errors import NotFound, ServerError, SettingsError, SteeringError
    from agent_health.server.state import Settings, State

_WHERE = {
    "Access": "access",
    "Role": "access",
    "application": "app",
    "serve": "app",
    "NotFound": "errors",
    "ServerError": "errors",
    "SettingsError": "errors",
    "SteeringError": "errors",
    "Settings": "state",
    "State": "state",
}


def __getattr__(name: str) -> _typing.Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("_"))})


__all__ = [
    "Access",
    "NotFound",
    "Role",
    "ServerError",
    "Settings",
    "SettingsError",
    "State",
    "SteeringError",
    "application",
    "serve",
]
