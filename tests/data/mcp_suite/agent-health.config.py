import sys

from agent_health import define_config

config = define_config(
    agents={
        "mcp-agent": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": [sys.executable, "agent.py", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        }
    },
    peers={
        "time": {"command": [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]}
    },
)
