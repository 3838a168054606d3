"""The attribute, span and event names a run is exported with (docs/otel.md lists each).

GenAI names follow the OpenTelemetry GenAI semantic conventions (status Development) as
OpenTelemetry semantic conventions 1.44.0 publish them (``SCHEMA_URL``): the release that
moved them to ``open-telemetry/semantic-conventions-genai`` (which has published no release
of its own yet), and the one the ``opentelemetry-semantic-conventions`` package of the SDK
generates its names from. ``tests/otel/test_otel_export.py`` checks every
``gen_ai.*`` name here against that package. Names agent-health adds for what the
conventions have no name for (the test, its status and score) are under ``agent_health.``.
"""

from __future__ import annotations

from typing import Final

SEMCONV_VERSION: Final = "1.44.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE: Final = "agent-health"

# Operations (gen_ai.operation.name) and the span names built from them.
INVOKE_AGENT: Final = "invoke_agent"
EXECUTE_TOOL: Final = "execute_tool"
CHAT: Final = "chat"
EVALUATION_EVENT: Final = "gen_ai.evaluation.result"

# GenAI attributes.
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_ID: Final = "gen_ai.agent.id"
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
EVALUATION_NAME: Final = "gen_ai.evaluation.name"
EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
ERROR_TYPE: Final = "error.type"
MCP_METHOD_NAME: Final = "mcp.method.name"
"""The MCP method a tool span's call was (``tools/call``), as the GenAI conventions' MCP
spans name it, when the gateway read the call from an MCP server."""
MCP_TOOLS_CALL: Final = "tools/call"

GEN_AI: Final = (
    OPERATION_NAME,
    PROVIDER_NAME,
    AGENT_NAME,
    AGENT_ID,
    REQUEST_MODEL,
    RESPONSE_MODEL,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    TOOL_NAME,
    TOOL_TYPE,
    TOOL_CALL_ID,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_RESULT,
    EVALUATION_NAME,
    EVALUATION_SCORE_VALUE,
    EVALUATION_SCORE_LABEL,
    EVALUATION_EXPLANATION,
)

# agent-health's own.
RUN_ID: Final = "agent_health.run_id"
"""The test's run id: what ``X-Agent-Health-Run-Id`` carried and the report's ``run_id``."""
TEST_ID: Final = "agent_health.test.id"
TEST_NAME: Final = "agent_health.test.name"
TEST_FILE: Final = "agent_health.test.file"
TEST_LABELS: Final = "agent_health.test.labels"
TEST_REPEAT: Final = "agent_health.test.repeat"
TEST_RETRY: Final = "agent_health.test.retry"
TEST_STATUS: Final = "agent_health.test.status"
TEST_CAUSE: Final = "agent_health.test.cause"
TEST_SCORE: Final = "agent_health.test.score"
TEST_CONTENT_HASH: Final = "agent_health.test.content_hash"
TEST_ERROR: Final = "agent_health.test.error"
TEST_AGENT: Final = "agent_health.test.agent"
MCP_SERVER: Final = "agent_health.mcp.server"
"""The MCP server (``peer:NAME``) a tool span's call went to: the conventions name none."""
COST_USD: Final = "agent_health.cost_usd"
TIMING: Final = "agent_health.timing"
"""``estimated`` on a span the trajectory gave no time for: laid out in order inside its
parent's window, an equal share each."""
SIGNAL_KIND: Final = "agent_health.signal.kind"
SIGNAL_ROLE: Final = "agent_health.signal.role"
SIGNAL_WEIGHT: Final = "agent_health.signal.weight"
SIGNAL_LOCATION: Final = "agent_health.signal.location"
JUDGE_CACHED: Final = "agent_health.judge.cached"
RUN_TOTAL: Final = "agent_health.run.total"
RUN_PASSED: Final = "agent_health.run.passed"
RUN_FAILED: Final = "agent_health.run.failed"
RUN_ERRORED: Final = "agent_health.run.errored"
RUN_SKIPPED: Final = "agent_health.run.skipped"
RUN_PASS_RATE: Final = "agent_health.run.pass_rate"
RUN_SCORE: Final = "agent_health.run.score"
RUN_AGENT: Final = "agent_health.run.agent"
RUN_NAME: Final = "agent_health.run.name"
"""On a cell's test span: its EvaluationRun (cells export their tests, not the run's span)."""
LINK_ROLE: Final = "agent_health.link"
"""On a link: ``run`` (test → its run's span) or ``test`` (run → each test's span)."""
