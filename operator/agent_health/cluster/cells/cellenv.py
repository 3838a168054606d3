"""What each container of a cell is told through its environment: where its own token is,
the target's peers' URLs (each the gateway's listener for that call), where the ledger and
the OTLP receivers are (:mod:`.cellpod` assembles the pod)."""

from __future__ import annotations

import re
from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import cellgateway, cellsecrets, manifests

OWN_TOKEN_DIR = "/var/run/agent-health/token"


def own_token_env() -> dict[str, str]:
    """Where a principal's container finds its own token."""
    return {"name": "AGENT_HEALTH_TOKEN_FILE", "value": f"{OWN_TOKEN_DIR}/{cellsecrets.TOKEN_FILE}"}


def peer_url_env(peer: str) -> str:
    """The variable giving the target a peer's URL: ``AGENT_HEALTH_PEER_<NAME>_URL``."""
    return f"AGENT_HEALTH_PEER_{peer.upper().replace('-', '_')}_URL"


def ledger_url(spec: runspec.RunSpec, settings: manifests.Settings) -> str:
    """The ledger the cell's gateway writes: the RunSpec's, else the operator's default."""
    if spec.spec.ledger is not None:
        return spec.spec.ledger.url
    if settings.ledger_url is not None:
        return settings.ledger_url
    raise errors.SpecError(
        f"RunSpec {spec.metadata.get('name', '?')}: spec.ledger.url is unset and the operator "
        "has no default ledger; set spec.ledger.url"
    )


def otlp_env(spec: runspec.RunSpec, settings: manifests.Settings) -> list[dict[str, Any]]:
    """The controller's ``OTEL_EXPORTER_OTLP_*``: the RunSpec's ``spec.otlp``, else the
    operator's ``--otlp-endpoint``; none when neither asks for export (docs/otel.md)."""
    otlp = spec.spec.otlp
    if otlp is None:
        if settings.otlp_endpoint is None:
            return []
        otlp = runspec.Otlp(endpoint=settings.otlp_endpoint)
    env: list[dict[str, Any]] = [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": otlp.endpoint},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": otlp.protocol},
    ]
    if otlp.headers_secret_ref is not None:
        ref = otlp.headers_secret_ref
        secret = {"name": ref.name, "key": ref.key}
        env.append({"name": "OTEL_EXPORTER_OTLP_HEADERS", "valueFrom": {"secretKeyRef": secret}})
    if otlp.capture_content:
        env.append({"name": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "value": "true"})
    return env


def target_env(spec: runspec.RunSpec, plan: cellgateway.Ports) -> list[dict[str, Any]]:
    """The target's env, every literal URL of a peer pointed at that peer's listener."""
    out = []
    for var in (m.wire() for m in spec.spec.target.env):
        value = var.get("value")
        if isinstance(value, str):
            for peer in spec.spec.peers:
                hosts = "|".join(map(re.escape, ("127.0.0.1", "localhost", peer.name)))
                pattern = rf"://(?:{hosts}):{peer.port}(?![0-9])"
                value = re.sub(pattern, f"://127.0.0.1:{plan.peers[peer.name]}", value)
            var = {**var, "value": value}
        out.append(var)
    out.extend(cellgateway.otlp_env(plan, out))
    return out + [
        {"name": peer_url_env(p.name), "value": f"http://127.0.0.1:{plan.peers[p.name]}{_path(p)}"}
        for p in spec.spec.peers
    ]


MCP_PATH = "/mcp"
"""Where an MCP peer serves Streamable HTTP (``agent-health mcp bridge`` and ``mock`` do):
an MCP peer's URL names it, so an MCP client takes it as it is."""


def _path(peer: runspec.Peer) -> str:
    return MCP_PATH if peer.protocol == "mcp" else ""
