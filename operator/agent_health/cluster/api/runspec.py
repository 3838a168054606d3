"""RunSpec: *what* is evaluated — the suite, the target agent, its peers, judge, ledger, isolation.

A RunSpec is long-lived and shared by many EvaluationRuns. Its status records what the
operator resolved once for everyone: image digests and the tests the suite declares.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

from agent_health.cluster.api import meta

KIND = "RunSpec"
PLURAL = "runspecs"
MAX_TOKENS = 32768
"""The most output tokens any RunSpec's judge may allow one call (``spec.judge.maxTokens``)."""


class ConfigMapSuite(meta.Model):
    """Test files in a ConfigMap, mounted into the stock controller image."""

    name: meta.DnsSubdomain = pydantic.Field(
        description="The ConfigMap in the RunSpec's namespace; each key is one file of the suite."
    )


class Suite(meta.Model):
    """Where the test files come from: exactly one of ``image`` or ``configMap``."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=meta.cel(
            (
                "has(self.image) != has(self.configMap)",
                "suite needs exactly one source: image or configMap",
            )
        )
    )

    image: meta.Image | None = pydantic.Field(
        default=None, description="A controller image that contains the suite."
    )
    config_map: ConfigMapSuite | None = pydantic.Field(
        default=None, description="A ConfigMap of test files, mounted into the stock controller."
    )
    path: Annotated[str, pydantic.Field(pattern=r"^/", max_length=1024)] = pydantic.Field(
        default="/suite", description="The suite root inside the controller container."
    )

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> Suite:
        if (self.image is None) == (self.config_map is None):
            raise ValueError("suite needs exactly one source: image or configMap")
        return self


class Target(meta.Model):
    """The agent under test, run as a native sidecar of every cell."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=meta.cel(
            (
                "self.connector == 'subprocess' || has(self.port)",
                "target.port is required unless the connector is subprocess",
            )
        )
    )

    image: meta.Image = pydantic.Field(description="The agent's image, pinned to a digest once.")
    port: meta.Port | None = pydantic.Field(
        default=None, description="The port the agent listens on (its startup probe waits for it)."
    )
    connector: Literal["rest", "agui", "openai", "subprocess"] = pydantic.Field(
        default="rest", description="The protocol the controller speaks to the agent."
    )
    path: Annotated[str, pydantic.Field(pattern=r"^/", max_length=1024)] = pydantic.Field(
        default="/", description="The HTTP path the connector calls on the target."
    )
    env: meta.EnvList = pydantic.Field(
        default_factory=list,
        description="The agent's environment; literal URLs of peers are pointed at the gateway.",
    )
    resources: meta.Resources = pydantic.Field(default_factory=dict)

    @pydantic.model_validator(mode="after")
    def _port_for_network(self) -> Target:
        if self.connector != "subprocess" and self.port is None:
            raise ValueError("target.port is required unless the connector is subprocess")
        return self


class NamedTarget(Target):
    """One agent of an agent matrix: a target with a name that EvaluationRuns pick by
    (``spec.agents``), pinned and fenced like ``target``."""

    name: meta.DnsLabel = pydantic.Field(
        description="The agent's name in an EvaluationRun's spec.agents, its cells and status."
    )

    def target(self) -> Target:
        """This agent as the cell's ``target``."""
        return Target.model_validate(self.model_dump(exclude={"name"}))


MAX_PEER_TOOLS = 256
"""The most tools a peer declares (``peers[].tools``), or lists when the RunSpec resolves."""
ToolName = Annotated[str, pydantic.Field(min_length=1, max_length=128)]


class Peer(meta.Model):
    """A simulated user, tool server or other agent the target talks to."""

    name: meta.DnsLabel = pydantic.Field(
        description="The peer's name: principal peer:NAME, and AGENT_HEALTH_PEER_<NAME>_URL."
    )
    image: meta.Image = pydantic.Field(description="The peer's image, pinned to a digest once.")
    port: meta.Port = pydantic.Field(description="The port the peer listens on.")
    env: meta.EnvList = pydantic.Field(default_factory=list, description="The peer's environment.")
    resources: meta.Resources = pydantic.Field(default_factory=dict)
    tools: Annotated[list[ToolName], pydantic.Field(max_length=MAX_PEER_TOOLS)] = pydantic.Field(
        default_factory=list,
        description="The tools this peer serves. A tool matcher on one of them is checked "
        "against the calls the gateway recorded from the target to this peer: a call the "
        "agent claims and the gateway did not see fails the matcher.",
    )
    protocol: Literal["http", "mcp"] = pydantic.Field(
        default="http",
        description="mcp: the peer is an MCP server (Streamable HTTP); the gateway reads each "
        "tools/call, tools/list, resources/read and prompts/get of the target's into the ledger "
        "(mcp records), and tool matchers on its tools are held to those calls by name, "
        "arguments and isError. Its tools are those declared here, those it listed when the "
        "RunSpec resolved (status.mcpTools: the discovery pod runs it and asks tools/list), "
        "and those it lists or is called for in a cell.",
    )


class Judge(meta.Model):
    """The judge model; its credentials stay in the operator, never in a cell."""

    provider: Literal["openai", "anthropic", "bedrock"] = pydantic.Field(
        description="openai is any OpenAI-compatible endpoint (vLLM, Ollama, LiteLLM, ...)."
    )
    model: Annotated[str, pydantic.Field(min_length=1, max_length=256)] = pydantic.Field(
        description="The model that judges this RunSpec's cells."
    )
    base_url: Annotated[str, pydantic.Field(pattern=r"^https?://", max_length=2048)] | None = (
        pydantic.Field(default=None, description="The provider's endpoint (default: its own).")
    )
    secret_ref: meta.SecretKeyRef | None = pydantic.Field(
        default=None,
        description="The Secret key holding the provider's API key; the Secret must be "
        "labelled agenthealth.dev/usable-by-runs=true.",
    )
    models: Annotated[
        list[Annotated[str, pydantic.Field(min_length=1, max_length=256)]],
        pydantic.Field(max_length=8),
    ] = pydantic.Field(
        default_factory=list,
        description="Other models a cell may ask for (judge(model=...), an evaluator's llm); "
        "model is always allowed, nothing else is.",
    )
    max_tokens: Annotated[int, pydantic.Field(ge=1, le=MAX_TOKENS)] = pydantic.Field(
        default=1024,
        description="The most output tokens one model call of this judge may ask for "
        "(capped by the operator's --judge-max-tokens).",
    )

    def allowed_models(self) -> frozenset[str]:
        """Every model a cell of this RunSpec may have the judge service call."""
        return frozenset({self.model, *self.models})


class Ledger(meta.Model):
    """Where cells record exchanges, run results and signals (chosen by URL scheme)."""

    url: Annotated[
        str, pydantic.Field(pattern=r"^(configmap|s3|gs|file)://.+", max_length=2048)
    ] = pydantic.Field(
        description=(
            "configmap://{namespace}/NAME-{run} (one ConfigMap per run, in the run's "
            "namespace, owned by the run), or s3:// / gs:// under a prefix the operator "
            "allows (--ledger-allow); no query options, credentials or other namespace."
        )
    )


class OpenSearch(meta.Model):
    """OpenSearch holding the target's OTel spans."""

    hosts: Annotated[
        list[Annotated[str, pydantic.Field(pattern=r"^https?://", max_length=2048)]],
        pydantic.Field(min_length=1, max_length=16),
    ]
    index: Annotated[str, pydantic.Field(min_length=1, max_length=255)] = "otel-v1-apm-span-*"
    secret_ref: meta.SecretKeyRef | None = None


class Traces(meta.Model):
    """Extra trace sources beyond the gateway's own record (always available)."""

    opensearch: OpenSearch | None = None


class Otlp(meta.Model):
    """Where each cell exports its test as OTLP traces (docs/otel.md): the controller sends
    them, so the cells' NetworkPolicy must let them reach it (the operator's --egress)."""

    endpoint: Annotated[str, pydantic.Field(pattern=r"^https?://", max_length=2048)] = (
        pydantic.Field(
            description="The base URL of an OTLP/HTTP receiver, e.g. "
            "http://otel-collector.observability.svc:4318 (/v1/traces is added)."
        )
    )
    protocol: Literal["http/protobuf"] = pydantic.Field(
        default="http/protobuf", description="OTLP over HTTP with protobuf bodies."
    )
    headers_secret_ref: meta.SecretKeyRef | None = pydantic.Field(
        default=None,
        description="A Secret key holding the export headers as k=v,k2=v2 "
        "(OTEL_EXPORTER_OTLP_HEADERS), e.g. an API key; offered to runs like every Secret.",
    )
    capture_content: bool = pydantic.Field(
        default=False,
        description="Put content on the spans: tool call arguments and results, checks' "
        "evidence, the judge's reasoning and error texts (docs/otel.md).",
    )


class WarmPool(meta.Model):
    """Cells started warm: a pool of ready sandboxes of this RunSpec (docs/operator.md)."""

    replicas: Annotated[int, pydantic.Field(ge=1, le=1000)] = pydantic.Field(
        description="Ready sandboxes (target and peers up) the pool keeps while a run needs "
        "it; each serves one cell, then is deleted and replaced. The operator keeps at most "
        "its --max-warm-replicas warm in one namespace, over all its pools."
    )
    keep_seconds: Annotated[int, pydantic.Field(ge=0, le=86400)] = pydantic.Field(
        default=300,
        description="How long the pool stays up after the last run that used it ended (the "
        "next run starts warm), before it is scaled to zero.",
    )


class Isolation(meta.Model):
    """How a cell runs: a plain Pod, or an Agent Sandbox with a RuntimeClass such as gVisor."""

    model_config = pydantic.ConfigDict(
        json_schema_extra=meta.cel(
            (
                "!has(self.runtimeClassName) || self.mode == 'agentSandbox'",
                "isolation.runtimeClassName is only allowed with mode agentSandbox",
            ),
            (
                "!has(self.warmPool) || self.mode == 'agentSandbox'",
                "isolation.warmPool is only allowed with mode agentSandbox",
            ),
        )
    )

    mode: Literal["pod", "agentSandbox"] = pydantic.Field(
        default="pod", description="agentSandbox wraps each cell in an agents.x-k8s.io Sandbox."
    )
    runtime_class_name: meta.DnsSubdomain | None = pydantic.Field(
        default=None, description="The Sandbox pod's RuntimeClass, e.g. gvisor."
    )
    warm_pool: WarmPool | None = pydantic.Field(
        default=None,
        description="Start cells from a SandboxWarmPool of ready sandboxes (extensions."
        "agents.x-k8s.io); an empty pool falls back to a cold start (status.counts.coldStarts).",
    )

    @pydantic.model_validator(mode="after")
    def _runtime_class_needs_sandbox(self) -> Isolation:
        if self.runtime_class_name is not None and self.mode != "agentSandbox":
            raise ValueError("isolation.runtimeClassName is only allowed with mode agentSandbox")
        if self.warm_pool is not None and self.mode != "agentSandbox":
            raise ValueError("isolation.warmPool is only allowed with mode agentSandbox")
        return self


class Spec(meta.Model):
    """The desired evaluation setup."""

    suite: Suite
    target: Target
    targets: Annotated[
        list[NamedTarget],
        pydantic.Field(max_length=16, json_schema_extra=meta.list_map("name")),
    ] = pydantic.Field(
        default_factory=list,
        description="More agents, by name, for an agent matrix: an EvaluationRun's spec.agents "
        "runs its tests against each one it names (target serves runs that name none).",
    )
    peers: Annotated[
        list[Peer], pydantic.Field(max_length=16, json_schema_extra=meta.list_map("name"))
    ] = pydantic.Field(default_factory=list, description="Containers the target talks to.")
    judge: Judge | None = pydantic.Field(
        default=None, description="This RunSpec's judge; unset: the operator's own judge."
    )
    ledger: Ledger | None = pydantic.Field(
        default=None, description="Where cells record; unset: the operator's --ledger-url."
    )
    traces: Traces | None = None
    otlp: Otlp | None = pydantic.Field(
        default=None,
        description="Export each cell's test as OTLP traces; unset: the operator's "
        "--otlp-endpoint, if any.",
    )
    isolation: Isolation = pydantic.Field(
        default_factory=Isolation,
        # The API server fills in {} and then its mode: `kubectl get` shows Isolation "pod".
        json_schema_extra={"default": {}},
    )
    timeout_seconds: Annotated[int, pydantic.Field(ge=1, le=86400)] = pydantic.Field(
        default=600, description="Default per-test timeout; an EvaluationRun may override it."
    )
    queue: meta.DnsLabel | None = pydantic.Field(
        default=None,
        description="The Kueue LocalQueue (in the RunSpec's namespace) its discovery pod and "
        "the cells of its runs wait in for admission; an EvaluationRun's spec.queue wins; "
        "unset: the operator's --default-queue.",
    )


MAX_DISCOVERED = 1000


class Status(meta.Model):
    """What the operator resolved for this RunSpec."""

    observed_generation: Annotated[int, pydantic.Field(ge=0)] | None = None
    image_digests: Annotated[
        dict[str, Annotated[str, pydantic.Field(pattern=meta.DIGEST_PATTERN)]],
        pydantic.Field(description="Each image of the spec → its resolved sha256 digest."),
    ] = pydantic.Field(default_factory=dict)
    discovered_tests: Annotated[
        list[Annotated[str, pydantic.Field(max_length=512)]],
        pydantic.Field(
            max_length=MAX_DISCOVERED, description="Test ids the suite declares (bounded)."
        ),
    ] = pydantic.Field(default_factory=list)
    test_count: Annotated[int, pydantic.Field(ge=0)] | None = pydantic.Field(
        default=None, description="All discovered tests, also those past the bounded list."
    )
    mcp_tools: Annotated[
        dict[str, Annotated[list[ToolName], pydantic.Field(max_length=MAX_PEER_TOOLS)]],
        pydantic.Field(
            max_length=16,
            description="Each MCP peer (protocol: mcp) → the tools it listed (tools/list) "
            "when the RunSpec resolved: tool matchers on them are held to the gateway's "
            "record, as on the tools a peer declares.",
        ),
    ] = pydantic.Field(default_factory=dict)
    conditions: meta.Conditions = pydantic.Field(default_factory=list)


class RunSpec(meta.Model):
    """The whole custom resource as stored by Kubernetes."""

    api_version: Literal["agenthealth.dev/v1alpha1"] = "agenthealth.dev/v1alpha1"
    kind: Literal["RunSpec"] = "RunSpec"
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)
    spec: Spec
    status: Status | None = None

    def images(self) -> list[str]:
        """Every image a cell of this RunSpec runs, in a stable order, without duplicates."""
        found = [self.spec.suite.image, self.spec.target.image]
        found += [t.image for t in self.spec.targets] + [p.image for p in self.spec.peers]
        return list(dict.fromkeys(i for i in found if i is not None))

    def environments(self) -> list[tuple[str, list[meta.EnvVar]]]:
        """Every ``env`` list a container of a cell is given, with the field naming it: each
        agent's as its cells see it (``target``, then every ``spec.targets`` agent expanded
        by :meth:`for_agent`), then the peers'. What checks one agent's env checks them all."""
        found = [("spec.target.env", list(self.spec.target.env))]
        for named in self.spec.targets:
            expanded = self.for_agent(named.name).spec.target
            found.append((f"spec.targets[{named.name}].env", list(expanded.env)))
        found += [(f"spec.peers[{p.name}].env", list(p.env)) for p in self.spec.peers]
        return found

    def for_agent(self, agent: str | None) -> RunSpec:
        """This RunSpec as a cell of ``agent`` sees it: that named target as its ``target``
        (itself for ``None``). Raises ``KeyError`` for a name it does not declare."""
        if agent is None:
            return self
        named = next((t for t in self.spec.targets if t.name == agent), None)
        if named is None:
            raise KeyError(agent)
        return self.model_copy(
            update={"spec": self.spec.model_copy(update={"target": named.target()})}
        )
