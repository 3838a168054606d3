# An agent on a real framework (Pydantic AI, with a scripted model: no API key) whose tools are
# MCP servers: the real mcp-server-time from PyPI, run over stdio behind agent-health's bridge
# (peers below), and a mock ticket server each test starts (tickets.py).
from agent_health import define_config

config = define_config(
    agents={
        "mcp-agent": {
            "connector": "agui",
            "url": "http://127.0.0.1:{port}/agent",
            "command": ["python", "../agents/mcp_agent.py", "--port", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        },
    },
    default_agent="mcp-agent",
    # The agent's MCP servers: each behind the run's gateway, every call recorded in the
    # calling test's ledger cell; the agent finds it in AGENT_HEALTH_PEER_TIME_URL.
    peers={"time": {"command": ["python", "-m", "mcp_server_time", "--local-timezone", "UTC"]}},
)
