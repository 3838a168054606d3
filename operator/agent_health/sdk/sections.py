"""The config's sections only some configs give: the judge (:class:`JudgeConfig`, with how
its calls are retried: :class:`RetryConfig`) and the agent's tool servers (:class:`PeerSpec`).

Their classes are made when a config first gives one (or code first reads one of these names
from :mod:`agent_health.sdk.config`, which shows them): a run whose config gives neither makes
none of them (issue #40; ``tests/cli/test_cli_imports.py``).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_health import timeouts


class RetryConfig(BaseModel):
    """How a judge call is retried on 429 / 5xx / timeouts (exponential backoff with jitter).

    A ``Retry-After`` from the provider is honoured as long as it fits in ``max_time``.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    max_attempts: int = Field(default=4, ge=1)
    initial_wait: timeouts.Wait = 0.5
    max_wait: timeouts.Wait = 20.0
    max_time: timeouts.Seconds = 120.0


class JudgeConfig(BaseModel):
    """Which model judges, how to reach it, and how calls are retried, limited and cached."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    provider: Literal["openai", "anthropic", "bedrock"] = "openai"
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = Field(default=8, ge=1)
    timeout: timeouts.Seconds = 60.0
    region: str | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    max_output_tokens: int = Field(default=1024, ge=1)
    max_steps: int = Field(default=8, ge=1)
    max_tokens: int = Field(default=32_000, ge=1)
    cache: bool = True
    cache_path: str | None = None
    input_cost_per_mtok: float | None = Field(default=None, ge=0)
    output_cost_per_mtok: float | None = Field(default=None, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)


class PeerSpec(BaseModel):
    """A server the agent calls for its tools (``peers={"time": {...}}``): the run puts it
    behind its own gateway and tells the agent where, in ``AGENT_HEALTH_PEER_<NAME>_URL``
    (as a cell does), so every call to it is recorded in the calling test's ledger cell.

    ``protocol: mcp`` (the default): an MCP server, whose calls are read one by one (the
    ``mcp`` records that tool matchers check): ``url`` of one that serves Streamable HTTP, or
    the ``command`` of a stdio one, which the run starts behind its bridge (one process per
    MCP session). ``protocol: http``: any HTTP server at ``url``, recorded as exchanges.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    protocol: Literal["mcp", "http"] = "mcp"
    url: str | None = Field(default=None, pattern=r"^https?://")
    command: tuple[str, ...] | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    listen: str | None = Field(
        default=None,
        pattern=r"^127\.0\.0\.1:[0-9]{1,5}$",
        description="127.0.0.1:PORT for the gateway's listener in front of the peer (an "
        "agent started by hand is given a fixed address); default: a free port",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: Any) -> Any:
        if isinstance(value, str):
            import shlex  # a peer's command given as one string: not every config has one

            words = shlex.split(value)
            if not words:
                raise ValueError("is empty; give the server's program and its arguments")
            return tuple(words)
        return value

    @model_validator(mode="after")
    def _one_server(self) -> "PeerSpec":
        if (self.url is None) == (self.command is None):
            raise ValueError("give the server's url, or (an MCP server over stdio) its command")
        if self.command is not None and self.protocol != "mcp":
            raise ValueError("a command is an MCP server over stdio: protocol must be mcp")
        return self
