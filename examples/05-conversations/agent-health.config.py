# Conversations: the bundled support agent (it asks for the order number before it answers)
# and a simulated user. The simulated user is played by the judge's model; here that is the
# bundled deterministic simulator (no LLM, no keys), which you start first:
#
#   python ../agents/simulated_user_server.py --port 8092 &
#   agent-health run
#
# Point the judge at a real model to have an LLM play the user (AGENT_HEALTH_JUDGE_BASE_URL,
# AGENT_HEALTH_JUDGE_MODEL, AGENT_HEALTH_JUDGE_API_KEY_ENV override this file). This suite
# makes no other judge call: the simulator only knows how to play a user.
from agent_health import define_config

config = define_config(
    agents={
        "support": {
            "connector": "rest",
            "url": "http://127.0.0.1:{port}/run",
            "command": ["python", "../agents/support_agent.py", "--port", "{port}"],
            "ready_url": "http://127.0.0.1:{port}/healthz",
        },
    },
    default_agent="support",
    judge={
        "provider": "openai",
        "model": "simulated-user",
        "base_url": "http://127.0.0.1:8092/v1",
    },
)
