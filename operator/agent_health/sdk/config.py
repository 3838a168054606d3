"""``define_config(...)`` — the contents of ``agent-health.config.py``.

Secrets never live here: the judge names the *environment variable* that holds its key.
"""

import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ValidationError
from pydantic_core import core_schema

from agent_health import timeouts
from agent_health.connectors.base import ConnectorSpec
from agent_health.sdk import errors, otlpconfig, tracesconfig

if TYPE_CHECKING:
    from agent_health.sdk.sections import JudgeConfig as JudgeConfig
    from agent_health.sdk.sections import PeerSpec as PeerSpec
    from agent_health.sdk.sections import RetryConfig as RetryConfig

SECTIONS = ("JudgeConfig", "PeerSpec", "RetryConfig")
"""The sections' models of :mod:`.sections`, read here by name: made when first read."""


def __getattr__(name: str) -> Any:
    if name in SECTIONS:
        from agent_health.sdk import sections

        return getattr(sections, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PEER_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
"""A peer's name: a DNS label, as a RunSpec's ``peers[].name``."""


def peer_url_env(name: str) -> str:
    """The variable that gives the agent a peer's URL: ``AGENT_HEALTH_PEER_<NAME>_URL``."""
    return f"AGENT_HEALTH_PEER_{name.upper().replace('-', '_')}_URL"


class _OnFirstUse:
    """Marks a section of the config that its own model validates, with a validator built when
    a config first gives that section: the config's validator holds none of the section's
    schema, so a config without a judge, peers, traces, prices or OTLP export compiles none of
    theirs (about 9 M instructions of a run, issue #40). What a section accepts, and its
    errors at their place (``judge.model: Field required``), are its model's, as before.

    A section of :mod:`.sections` (the judge, a peer) is named, not annotated with its model,
    so its class is made when a config first gives it: a config without one makes none of
    their classes (5 M instructions of a run). Type checkers read the model (``_Judge``)."""

    def __init__(self, section: str | None = None, *, optional: bool = False) -> None:
        self.section = section
        self.optional = optional

    def model(self, source: Any = None) -> type[BaseModel]:
        """The section's model: the named one of :mod:`.sections`, else the annotated one."""
        if self.section is None:
            annotated: type[BaseModel] = _unwrap(source)  # TracesSettings | None: TracesSettings
            return annotated
        from agent_health.sdk import sections

        found: type[BaseModel] = getattr(sections, self.section)
        return found

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        annotated = None if self.section is not None else self.model(source)
        optional = self.optional or (annotated is not None and annotated is not source)

        def validate(value: Any) -> Any:
            if value is None and optional:
                return value
            model = annotated or self.model()
            if isinstance(value, model):
                return value  # as a model field takes an instance: not validated again
            return model.model_validate(value)  # its errors are put at the section's place

        return core_schema.no_info_plain_validator_function(validate)


ON_FIRST_USE = _OnFirstUse()
if TYPE_CHECKING:
    _Judge: TypeAlias = JudgeConfig | None
    _Peer: TypeAlias = PeerSpec
else:
    _Judge = Annotated[Any, _OnFirstUse("JudgeConfig", optional=True)]
    _Peer = Annotated[Any, _OnFirstUse("PeerSpec")]


class Config(BaseModel):
    """The whole config. Built with :func:`define_config`."""

    model_config = ConfigDict(
        defer_build=True, frozen=True, extra="forbid", arbitrary_types_allowed=True
    )

    agents: dict[str, ConnectorSpec] = Field(default_factory=dict)
    default_agent: str | None = None
    peers: dict[Annotated[str, Field(pattern=PEER_NAME)], _Peer] = Field(default_factory=dict)
    """The agent's tool servers, each behind the run's gateway (:class:`PeerSpec`)."""
    judge: _Judge = None
    evaluators: dict[str, Callable[..., Any]] = Field(default_factory=dict)
    insights: Callable[..., Any] | None = None
    # Its defaults as declared (model_construct): a config without traces builds no validator
    # of TracesSettings' own for them (issue #40).
    traces: Annotated[tracesconfig.TracesSettings, ON_FIRST_USE] = Field(
        default_factory=lambda: tracesconfig.TracesSettings.model_construct()
    )
    prices: dict[str, Annotated[tracesconfig.Price, ON_FIRST_USE]] = Field(default_factory=dict)
    otlp: Annotated[otlpconfig.OtlpConfig | None, ON_FIRST_USE] = None
    """Where each run is exported as OTLP traces (docs/otel.md); ``--otlp`` and
    ``OTEL_EXPORTER_OTLP_*`` override it."""
    connectors: dict[str, Callable[..., Any]] = Field(default_factory=dict)
    timeout: timeouts.Seconds | None = None
    test_match: list[str] | None = None
    """Playwright's ``testMatch``: glob patterns of test files (default: the loader's)."""
    # A lambda, not `list`: pydantic reads a default factory's signature as it builds the
    # model, and a builtin's is parsed by the tokenizer (its regular expressions compiled
    # for it: 14 M instructions of a run; tests/cli/test_cli_imports.py).
    test_ignore: list[str] = Field(default_factory=lambda: [])
    """Playwright's ``testIgnore``: glob patterns of files a folder search leaves out."""
    lenient_cases: bool = False
    """Load case files as ``--lenient`` does: what upstream refuses, with warnings."""
    history: str | bool | None = None
    """Where every run is recorded (docs/history.md): a ``sqlite:///`` (a relative path starts
    at this file's folder) or ``postgresql://`` URL; ``False``: no history. ``--history``,
    ``--no-history`` and ``AGENT_HEALTH_HISTORY`` override it; by default
    ``.agent-health/history.db`` beside this file."""
    quarantine: str | None = None
    """A quarantine file (``agent-health flaky --quarantine FILE``; relative to this file's
    folder): its tests are reported apart and never gate the exit code; ``--quarantine``
    overrides it."""
    source: str | None = None

    def agent(self, name: str | None) -> ConnectorSpec:
        """The spec for ``--agent NAME|URL`` (or the default agent)."""
        chosen = name or self.default_agent
        if chosen is None:
            if len(self.agents) == 1:
                return next(iter(self.agents.values()))
            raise errors.ConfigError(
                "no agent chosen: pass --agent NAME|URL or set default_agent in "
                "agent-health.config.py"
                + (f" (agents: {', '.join(sorted(self.agents))})" if self.agents else "")
            )
        if chosen in self.agents:
            return self.agents[chosen]
        if "://" in chosen or chosen.startswith("cmd:"):
            return ConnectorSpec.parse(chosen)
        known = ", ".join(sorted(self.agents)) or "none configured"
        raise errors.ConfigError(
            f"unknown agent {chosen!r}; known agents: {known}; or give a URL such as "
            "rest+http://127.0.0.1:8080/run"
        )

    def price_table(self) -> tracesconfig.PriceTable:
        """``prices={...}`` merged with ``traces={"prices": {...}}`` (the latter wins)."""
        return tracesconfig.PriceTable({**self.prices, **self.traces.prices})

    def agent_name(self, name: str | None) -> str | None:
        """The name ``--agent`` resolves to (a config key, or the URL as given)."""
        if name:
            return name
        if self.default_agent:
            return self.default_agent
        return next(iter(self.agents)) if len(self.agents) == 1 else None

    def judge_from_env(self, environ: Mapping[str, str] | None = None) -> "JudgeConfig | None":
        """The judge config after the CI overrides ``AGENT_HEALTH_JUDGE_*``."""
        env = os.environ if environ is None else environ
        overrides = {
            key: env[f"AGENT_HEALTH_JUDGE_{key.upper()}"]
            for key in ("provider", "model", "base_url", "api_key_env")
            if env.get(f"AGENT_HEALTH_JUDGE_{key.upper()}")
        }
        if not overrides:
            return self.judge
        base = self.judge.model_dump() if self.judge else {}
        from agent_health.sdk import sections

        try:
            return sections.JudgeConfig.model_validate({**base, **overrides})
        except ValidationError as err:
            raise errors.ConfigError(
                "AGENT_HEALTH_JUDGE_* environment overrides are incomplete: "
                + _first(err, sections.JudgeConfig)
            ) from err


def define_config(**kwargs: Any) -> Config:
    """Declare agents, judge, evaluators, insights, traces, prices and OTLP export.

    Example::

        config = define_config(
            agents={"rca": {"connector": "rest", "url": "http://127.0.0.1:8080/run"}},
            judge={"provider": "openai", "model": "gpt-4o-mini",
                   "api_key_env": "OPENAI_API_KEY"},
            prices={"default": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}},
            traces={"opensearch": {"hosts": ["http://127.0.0.1:9200"], "wait_seconds": 20}},
            insights=explain,   # async def explain(result, traces, llm) -> {summary, why, ...}
            otlp={"endpoint": "http://127.0.0.1:4318"},   # export each run (docs/otel.md)
        )
    """
    try:
        return Config.model_validate(kwargs)
    except ValidationError as err:
        raise errors.ConfigError(f"define_config: {_first(err)}") from err


def _first(err: ValidationError, model: type[BaseModel] = Config) -> str:
    """The first few problems, each at its place; an unknown key gets "did you mean"."""
    parts = []
    for e in err.errors()[:3]:
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"]
        if e["type"] == "extra_forbidden":
            message = _unknown_key(model, e["loc"])
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def _unknown_key(model: type[BaseModel], loc: Sequence[int | str]) -> str:
    """ "unknown key 'modle'; did you mean 'model'?" for a key at ``loc`` under ``model``."""
    owner = _owner(model, loc[:-1])
    key = str(loc[-1])
    if owner is None:
        return f"unknown key {key!r}"
    known = sorted(n for n in owner.model_fields if n != "source")
    import difflib  # a config with a mistake in it: no run that starts pays for it

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
    return f"unknown key {key!r}; {hint}"


def _owner(model: type[BaseModel], path: Sequence[int | str]) -> type[BaseModel] | None:
    """The model that holds the key at ``path`` (dict keys and list indexes stepped over)."""
    current: Any = model
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = _section(field.metadata) or _unwrap(field.annotation)
            continue
        if typing.get_origin(current) in (dict, Mapping, list, tuple, Sequence):
            args = typing.get_args(current)
            current = _unwrap(args[-1]) if args else None
            continue
        return None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _section(metadata: Sequence[Any]) -> type[BaseModel] | None:
    """The model of a section :mod:`.sections` holds, when ``metadata`` names one."""
    for marker in metadata:
        if isinstance(marker, _OnFirstUse) and marker.section is not None:
            return marker.model()
    return None


def _unwrap(annotation: Any) -> Any:
    """``X | None`` → ``X``; ``Annotated[X, ...]`` → ``X`` (a named section's model)."""
    if typing.get_origin(annotation) is Annotated:
        base, *metadata = typing.get_args(annotation)
        annotation = _section(metadata) or base
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation
