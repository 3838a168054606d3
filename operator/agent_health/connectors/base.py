"""The connector seam: a Protocol, the spec that selects one, and the table of kinds.

A connector is any object with ``async run(request) -> AgentReply`` and ``async aclose()``.
Built-in kinds live in an immutable table; users add their own through
``define_config(connectors={"kind": factory})``, which is passed to :func:`create` rather
than mutating module state.
"""

import importlib
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_health import timeouts
from agent_health.connectors import environment, errors
from agent_health.connectors.protocol import AgentReply, AgentRequest


@runtime_checkable
class Connector(Protocol):
    """Reaches one agent."""

    async def run(self, request: AgentRequest) -> AgentReply:
        """Send one request and return the agent's whole answer."""
        ...

    async def aclose(self) -> None:
        """Release connections and processes."""
        ...


class ConnectorSpec(BaseModel):
    """How to reach an agent: the value of one ``agents={...}`` entry in the config."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    connector: str = "rest"
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: timeouts.Seconds = 120.0
    command: tuple[str, ...] | None = Field(
        default=None,
        description="Start the agent with this command before the run (like Playwright's "
        "webServer); '{port}' is replaced by a free port, also in url and ready_url. A list "
        "of arguments, or one string split as a shell would split it (no shell runs it).",
    )
    ready_url: str | None = None
    ready_timeout: timeouts.Seconds = 30.0
    cwd: str | None = None
    env: dict[str, environment.Value] = Field(
        default_factory=dict,
        description="What the agent agent-health starts (command, or the subprocess "
        "connector) finds in its environment beside PATH, HOME, TMPDIR, the locale and the "
        'proxy variables: a value, or {"from_env": "NAME"} to copy agent-health\'s NAME. '
        "Nothing else of agent-health's environment reaches it.",
    )
    options: dict[str, Any] = Field(default_factory=dict)
    uds: str | None = Field(
        default=None,
        description="connect through this Unix socket instead of TCP (the URL's host is then "
        "only the Host header): a cell's controller reaches its gateway this way",
    )

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, environment.Value]) -> dict[str, environment.Value]:
        wrong = next((name for name in value if not environment.NAME.match(name)), None)
        if wrong is not None:
            raise ValueError(
                f"{wrong!r} is not a variable name (letters, digits and _, not starting with "
                "a digit)"
            )
        return value

    @model_validator(mode="after")
    def _started(self) -> "ConnectorSpec":
        if self.env and not self.command:
            raise ValueError(
                "env is for an agent agent-health starts (a command, or the subprocess "
                "connector); this one is reached at its url: set its environment where it runs"
            )
        return self

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        if isinstance(value, str):
            import shlex  # a command given as one string: not every spec has one

            try:
                words = shlex.split(value)
            except ValueError as err:  # an unclosed quote
                raise ValueError(f"cannot split {value!r} into arguments: {err}") from err
            if not words:
                raise ValueError("is empty; give the program to start and its arguments")
            return tuple(words)
        return value

    @classmethod
    def parse(cls, value: str) -> "ConnectorSpec":
        """Parse the URL forms of ``--agent``: ``rest+http://...``, ``agui+http://...``,
        ``openai+http://...``, ``cmd:PROGRAM`` or a bare ``http://...`` (REST)."""
        if value.startswith("cmd:"):
            try:
                return cls.model_validate({"connector": "subprocess", "command": value[4:]})
            except ValidationError as err:
                problem = err.errors()[0]["msg"].removeprefix("Value error, ")
                raise errors.ConnectorConfigError(
                    f"--agent {value!r}: the command {problem}"
                ) from err
        scheme, sep, rest = value.partition("+")
        if sep and rest.startswith(("http://", "https://")):
            return cls(connector=scheme, url=rest)
        if value.startswith(("http://", "https://")):
            return cls(connector="rest", url=value)
        raise errors.ConnectorConfigError(
            f"cannot read agent {value!r}: use a name from the config's agents, "
            "or rest+http://HOST/PATH, agui+http://..., openai+http://..., cmd:PROGRAM"
        )


ConnectorFactory = Callable[[ConnectorSpec], Connector]


class Conversations(NamedTuple):
    """What a connector that holds conversations offers one (see :func:`conversations_of`)."""

    end: Callable[[str], Awaitable[None]] | None
    """Awaited with the run id when a conversation ends: the connector releases what it kept
    for it (a subprocess agent's process); a failure to end it is the agent's."""


def conversations_of(caller: object) -> Conversations | None:
    """How the connector behind ``caller`` (a connector or its bound ``run``) holds a
    conversation, or ``None`` when it cannot.

    A connector holds conversations when it sets ``holds_conversations = True``: each turn
    is then one ``run(request)`` with the conversation so far in ``request.messages`` and the
    turn's number in ``request.turn``. It may define ``async end_conversation(run_id)``.
    """
    owner = getattr(caller, "__self__", caller)
    if getattr(owner, "holds_conversations", False) is not True:
        return None
    end = getattr(owner, "end_conversation", None)
    return Conversations(end=end if callable(end) else None)


# Built-in kinds by module, imported only when used: a REST run never loads AG-UI's models.
BUILTINS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "rest": ("agent_health.connectors.rest", "RestConnector"),
        "agui": ("agent_health.connectors.agui", "AguiConnector"),
        "openai": ("agent_health.connectors.openai_chat", "OpenAIChatConnector"),
        "subprocess": ("agent_health.connectors.subprocess", "SubprocessConnector"),
    }
)


HTTP_KINDS = frozenset({"rest", "agui", "openai"})
"""The built-in kinds that speak HTTP (and take an ``observe`` callback)."""


def _builtin(name: str) -> ConnectorFactory | None:
    where = BUILTINS.get(name)
    if where is None:
        return None
    factory: ConnectorFactory = getattr(importlib.import_module(where[0]), where[1])
    return factory


def known(extra: Mapping[str, ConnectorFactory] | None = None) -> list[str]:
    """Names of the connector kinds available, built-in and user-supplied."""
    return sorted({*BUILTINS, *(extra or {})})


def create(
    spec: ConnectorSpec,
    extra: Mapping[str, ConnectorFactory] | None = None,
    *,
    observe: Callable[[Any], None] | None = None,
) -> Connector:
    """Build the connector that ``spec`` names; user kinds in ``extra`` win over built-ins.

    ``observe`` is handed to the built-in HTTP connectors, which tell it about every
    exchange (a :class:`~agent_health.ledger.observation.Observation`); the local ledger
    records them. A user's connector owns its transport and is not observed.
    """
    user = (extra or {}).get(spec.connector)
    if user is not None:
        return user(spec)
    factory = _builtin(spec.connector)
    if factory is None:
        raise errors.ConnectorConfigError(
            f"unknown connector {spec.connector!r}; known: {', '.join(known(extra))}"
        )
    if observe is not None and spec.connector in HTTP_KINDS:
        return cast(Callable[..., Connector], factory)(spec, observe=observe)
    return factory(spec)


def register(name: str, factory: ConnectorFactory) -> dict[str, ConnectorFactory]:
    """A one-entry table for ``define_config(connectors=...)``: ``register("x", X)``."""
    return {name: factory}
