# The suite whose run is rendered at 80 and 140 columns in this folder (see README.md): the
# bundled triage agent, priced so that the table has a cost column.
from agent_health import define_config

config = define_config(
    agents={
        "triage": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": ["python", "../../../examples/agents/triage_agent.py", "--port", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        }
    },
    prices={"default": {"input_per_mtok": 0.15, "output_per_mtok": 0.60}},
)
