# The quickstart's config: agent-health starts the bundled example agent on a free port
# (like Playwright's webServer), runs the tests against it and stops it afterwards.
from agent_health import define_config

config = define_config(
    agents={
        "triage": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": ["python", "../agents/triage_agent.py", "--port", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        },
    },
    default_agent="triage",
)
