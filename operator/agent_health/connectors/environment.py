"""What an agent agent-health starts finds in its environment: an allow-list, and what its
config gives it.

An agent started by ``command`` (its config) or run by the subprocess connector is the
program under test, not a part of agent-health: it must not inherit the environment
agent-health runs in, where the judge's API key, ``AGENT_HEALTH_LEDGER_KEY`` (which signs
the ledger) and the OTLP export's headers live. An agent holding the judge's key could
spend the judge's quota until the judge errors (and an errored judge takes the test out of
the pass rate); one holding the ledger key could forge its own record.

So it is started with only what a program needs to run (:data:`INHERITED`: ``PATH``,
``HOME``, ``TMPDIR``, the locale, the time zone, the proxy variables and the CA bundles
that go with them) and what its config entry's ``env`` gives it::

    agents={"rca": {"command": ["python", "agent.py", "{port}"], "url": ...,
                    "env": {"MODE": "test",                                   # a value
                            "OPENAI_API_KEY": {"from_env": "RCA_OPENAI_KEY"}}}}  # a variable

``{"from_env": "NAME"}`` copies agent-health's own variable ``NAME`` when the agent starts,
so a secret never lives in the config file. A run refuses to give an agent the judge's,
the ledger's or the export's credentials even when its ``env`` names them
(:func:`agent_health.engine.running.agent_process.refuse_credentials`). ``agent.run(env=...)`` adds
a run's own variables on top, as before.
"""

import re
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from agent_health.connectors import errors

INHERITED: Final = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "LANG",
        "LANGUAGE",
        "TZ",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    }
)
"""What a started agent inherits from agent-health's environment (and every ``LC_*``)."""
INHERITED_PREFIXES: Final = ("LC_",)

NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A variable's name as a shell writes it: what every program can read."""


class FromEnv(BaseModel):
    """``{"from_env": "NAME"}``: the value of agent-health's own variable ``NAME``."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    from_env: str = Field(pattern=NAME.pattern, description="the variable to copy")


Value = str | FromEnv
"""A value of an agent's ``env``: as written, or copied from a variable."""


def inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ``."""
    return {
        name: value
        for name, value in environ.items()
        if name in INHERITED or name.startswith(INHERITED_PREFIXES)
    }


def resolved(given: Mapping[str, Value], environ: Mapping[str, str]) -> dict[str, str]:
    """An agent's ``env`` with each ``from_env`` read from ``environ``; a variable that is
    not set is a :class:`~errors.ConnectorConfigError` naming it."""
    out: dict[str, str] = {}
    for name, value in given.items():
        if isinstance(value, FromEnv):
            if value.from_env not in environ:
                raise errors.ConnectorConfigError(
                    f"env.{name}: from_env names ${value.from_env}, which is not set; export "
                    f"it, or give {name} a value"
                )
            out[name] = environ[value.from_env]
        else:
            out[name] = value
    return out


def started(given: Mapping[str, Value], environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of an agent agent-health starts: the allow-listed variables of
    ``environ``, then its config's ``env`` (which wins)."""
    return {**inherited(environ), **resolved(given, environ)}
