# A judge on any OpenAI-compatible endpoint. The key is read from the environment variable
# named here, never from this file. CI (or you) can point the same suite at another model
# without editing it:
#
#   AGENT_HEALTH_JUDGE_BASE_URL=http://127.0.0.1:11434/v1   # e.g. Ollama, vLLM, LiteLLM
#   AGENT_HEALTH_JUDGE_MODEL=llama3.1
#   AGENT_HEALTH_JUDGE_API_KEY_ENV=MY_PROXY_KEY              # the variable holding the key
from agent_health import define_config


async def names_the_host(result, criteria, tools):
    """A custom evaluator: plain code, with this run's read-only trace tools."""
    calls = await tools.get_spans(kind="tool_call")
    ok = "db-primary" in result.output and len(calls) >= 1
    return {"passed": ok, "score": 1.0 if ok else 0.0, "reasoning": f"{len(calls)} tool calls"}


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
    judge={
        "provider": "openai",
        "model": "gpt-4o-mini",
        "api_key_env": "OPENAI_API_KEY",
        "max_concurrency": 4,
        "retry": {"max_attempts": 3, "initial_wait": 0.5, "max_wait": 5.0, "max_time": 60.0},
        "input_cost_per_mtok": 0.15,
        "output_cost_per_mtok": 0.60,
    },
    evaluators={"names_the_host": names_the_host},
)
