# One agent, four ways to reach it. Each entry starts the bundled triage agent for the run
# (or, for the subprocess connector, once per agent.run()). Pick one with --agent NAME.
from agent_health import define_config

SERVE = ["python", "../agents/triage_agent.py", "--port", "{port}"]
READY = "http://127.0.0.1:{port}/healthz"

config = define_config(
    agents={
        # REST agent protocol v1: one JSON request, one JSON answer.
        "rest": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": SERVE,
            "ready_url": READY,
        },
        # AG-UI: a RunAgentInput posted, the agent's events read from an SSE stream.
        "agui": {
            "connector": "agui",
            "url": "http://127.0.0.1:{port}/agui",
            "command": SERVE,
            "ready_url": READY,
        },
        # An agent behind an OpenAI-compatible chat-completions endpoint.
        "openai": {
            "connector": "openai",
            "url": "http://127.0.0.1:{port}/v1",
            "command": SERVE,
            "ready_url": READY,
            "options": {"model": "triage"},
        },
        # A command run once per test: the request on stdin, JSON lines on stdout.
        "cli": {"connector": "subprocess", "command": ["python", "../agents/triage_cli.py"]},
    },
    default_agent="rest",
)
