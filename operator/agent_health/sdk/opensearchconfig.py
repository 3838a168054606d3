"""The ``traces={"opensearch": {...}}`` part of ``define_config``: where the agent's OTel
spans land in OpenSearch (indexed by Data Prepper) and how long a read waits for them.

Made when a config's traces are first validated (or ``tracesconfig.OpenSearchSettings`` is
first read): a run whose config reads no spans from OpenSearch never makes it (issue #40).
Credentials come from environment variables named here, never from the file.
"""

from pydantic import BaseModel, ConfigDict, Field

from agent_health import timeouts


class OpenSearchSettings(BaseModel):
    """Where OTel spans of the agent land (indexed by Data Prepper) and how long to wait."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    hosts: list[str] = Field(min_length=1)
    index: str = "otel-v1-apm-span-*"
    logs_index: str | None = None
    run_id_attribute: str = "agent_health.run_id"
    wait_seconds: timeouts.Wait = 30.0
    poll_seconds: timeouts.Seconds = 1.0
    max_spans: int = Field(default=10_000, ge=1, le=10_000)
    timeout: timeouts.Seconds = 10.0
    username_env: str | None = None
    password_env: str | None = None
    verify_certs: bool = True
