# The agent's own OpenTelemetry spans as its trace: agent-health starts the instrumented
# example agent and tells it where to export (OTEL_EXPORTER_OTLP_ENDPOINT, its own OTLP
# receiver on 127.0.0.1); no collector, no OpenSearch.
from agent_health import define_config

config = define_config(
    agents={
        "otel-triage": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": ["python", "../agents/otel_agent.py", "--port", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        },
    },
    default_agent="otel-triage",
    prices={"triage-rules-1": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}},
)
