"""The ``traces={...}`` and ``prices={...}`` parts of ``define_config``.

Example::

    define_config(
        traces={
            "enabled": True,                      # or a list of agent names
            "opensearch": {
                "hosts": ["https://opensearch:9200"],
                "index": "otel-v1-apm-span-*",
                "run_id_attribute": "agent_health.run_id",
                "wait_seconds": 30,
            },
            "otlp": {"listen": "127.0.0.1:4318"},  # the run's own receiver; default: on
        },
        prices={"gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}},
    )

Credentials come from environment variables named here (``username_env``, ``password_env``),
never from the file.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health import timeouts
from agent_health.sdk import deferred

if TYPE_CHECKING:
    from agent_health.sdk import opensearchconfig
    from agent_health.sdk.opensearchconfig import OpenSearchSettings as OpenSearchSettings


def __getattr__(name: str) -> Any:
    # OpenSearchSettings is shown here, in the traces' part it belongs to; its class is made
    # when first read or when a config's traces are first validated (issue #40).
    if name == "OpenSearchSettings":
        from agent_health.sdk import opensearchconfig

        return opensearchconfig.OpenSearchSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DEFAULT_PRICE_KEY = "default"


class Price(BaseModel):
    """What one model costs, in US dollars per million tokens."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class OtlpSettings(BaseModel):
    """agent-health's own OTLP/HTTP receiver of a local run (docs/writing-tests.md, "Traces").

    On for agents the run starts (``command``), which are told where it listens in
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``listen`` puts it at a fixed address for every run
    (an agent started by hand exports there); ``enabled=False`` turns it off.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    enabled: bool = True
    listen: str | None = Field(
        default=None, pattern=r"^[^:\s]+:[0-9]{1,5}$", description="HOST:PORT, e.g. 127.0.0.1:4318"
    )
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_spans: int = Field(default=2000, ge=1, description="spans kept per run")
    wait_seconds: timeouts.Wait = Field(default=5.0, description="how long a read waits for spans")

    def wanted(self, started: bool) -> bool:
        """Whether a local run listens: for an agent it starts, or at a fixed address."""
        return self.enabled and (started or self.listen is not None)


class TracesSettings(deferred.PartsFirst, BaseModel):
    """Which agents have traces, where extra spans come from, and the price table."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    enabled: bool | list[str] = True
    # Named, not resolved, as the class is made: its module loads as pydantic first builds
    # this model's validator (model_rebuild), which a config that gives no traces never does.
    opensearch: "opensearchconfig.OpenSearchSettings | None" = None
    # Defaults as declared (model_construct): a config that gives none builds no validator
    # of its own for them (issue #40).
    otlp: OtlpSettings = Field(default_factory=lambda: OtlpSettings.model_construct())
    prices: dict[str, Price] = Field(default_factory=dict)

    @classmethod
    def load_parts(cls) -> None:
        """:mod:`.opensearchconfig`, put where pydantic reads this model's field types."""
        from agent_health.sdk import opensearchconfig

        globals()["opensearchconfig"] = opensearchconfig

    def enabled_for(self, agent: str | None) -> bool:
        """True when ``result.traces`` may be read for runs of ``agent``."""
        if isinstance(self.enabled, bool):
            return self.enabled
        return agent is not None and agent in self.enabled


class PriceTable:
    """Looks up the price of a model; ``default`` covers models the table does not name."""

    __slots__ = ("_prices",)

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(prices or {})

    def __bool__(self) -> bool:
        return bool(self._prices)

    def price(self, model: str | None) -> Price | None:
        if model is not None and model in self._prices:
            return self._prices[model]
        return self._prices.get(DEFAULT_PRICE_KEY)

    def cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float | None:
        """The cost in USD, or ``None`` when the table has no price for ``model``."""
        price = self.price(model)
        return None if price is None else price.cost(input_tokens, output_tokens)
