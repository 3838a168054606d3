"""The documented shape of a test's entry in the JSON report (``tests[]``; README "JSON
report" lists the same fields), and a saved entry checked against it.

:func:`.entries.from_result` makes entries as plain dicts in this shape's field order; a
report is checked with :func:`check` when it is read back or written to a file
(``--reporter json``), so a run that writes none never makes these classes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health.connectors import partial as partial_mod
from agent_health.engine.reports import entries
from agent_health.sdk.results import Cause, Role, SignalKind, Status


class SignalEntry(BaseModel):
    """One signal: a matcher, a judge verdict or a derived metric, in body order."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: SignalKind
    role: Role
    name: str
    passed: bool | None = None
    score: float | None = None
    weight: float = 1.0
    evidence: dict[str, Any] | None = None
    reasoning: str | None = None
    error: str | None = None
    location: str | None = None


class PartialEntry(BaseModel):
    """What the agent had sent before its call timed out (``TestResult.partial``)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    source: partial_mod.Source = Field(
        description="body: the HTTP body received (REST, OpenAI-compatible); events: AG-UI "
        "events folded; stdout: a command's stdout"
    )
    bytes: int = Field(default=0, ge=0, description="the bytes that had arrived, in all")
    text: str = Field(default="", description="the body or stdout so far, or the folded text")
    truncated: bool = Field(default=False, description="more had arrived than text keeps")
    events: int | None = Field(default=None, ge=0, description="AG-UI: the events read")
    trajectory: list[dict[str, Any]] = Field(
        default_factory=list, description="AG-UI: the steps folded so far"
    )


class TestEntry(BaseModel):
    """One (test, repeat). ``cause`` and the fields after ``prompt`` up to ``ledger_cell``
    are new in v2."""

    __test__ = False
    model_config = ConfigDict(defer_build=True, frozen=True, extra="allow")

    id: str = Field(description="stable id: file relative to the suite root :: title")
    name: str
    file: str = ""
    line: int = 0
    labels: list[str] = Field(default_factory=list)
    repeat: int = Field(default=0, description="0-based repeat index")
    status: Status
    score: float | None = None
    error: str | None = None
    cause: Cause | None = Field(
        default=None, description="whom an errored test blames: agent, judge, test, infra"
    )
    skip_reason: str | None = None
    run_id: str = ""
    prompt: str | None = Field(default=None, description="the prompt agent.run() sent")
    context: list[dict[str, Any]] = Field(default_factory=list)
    output: str | None = Field(default=None, description="None when the agent never ran")
    trajectory: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[dict[str, Any]] = Field(
        default_factory=list,
        description="a conversation's turns: number, user, output, token_usage, duration_ms "
        "and steps (how many of the trajectory's steps, each marked with its turn); empty "
        "for a single run",
    )
    ended: dict[str, Any] | None = Field(
        default=None,
        description="why a conversation ended: reason (turns-done, user-stopped, goal-met, "
        "gave-up, max-turns) and detail; null for a single run",
    )
    partial: PartialEntry | None = Field(
        default=None,
        description="what the agent had sent before its call timed out; null otherwise",
    )
    truncated: list[str] = Field(
        default_factory=list, description="fields cut to their caps, e.g. trajectory[3].content"
    )
    ledger_cell: str | None = None
    agent: str | None = Field(
        default=None, description="the agent it ran against in an agent matrix; else null"
    )
    replayed: bool = Field(
        default=False, description="agent.run() was answered from a recording (--replay)"
    )
    quarantined: bool = Field(
        default=False,
        description="named by the run's quarantine file (run --quarantine): counted apart in "
        "summary.quarantined, never in the headline counts, pass rate or exit code",
    )
    duration_ms: float = 0.0
    content_hash: str = ""
    trace_id: str | None = Field(
        default=None,
        description="the W3C trace id agent.run() sent: the agent's spans and the OTLP export "
        "of the test share it (docs/otel.md); null when the agent never ran",
    )
    attempts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="every try of a retried test (--retries): status, reason, cause, score, "
        "duration_ms, run_id; empty when it ran once",
    )
    stdout: str | None = Field(default=None, description="what the body printed; None: nothing")
    stderr: str | None = Field(default=None, description="what the body wrote to stderr")
    signals: list[SignalEntry] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    insights: dict[str, Any] | None = None
    case: dict[str, Any] | None = Field(
        default=None,
        description="a case file's test: the case's metadata (id, subcategory, versions, "
        "expectedPPL, ...); null for a code test",
    )
    mcp_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the MCP calls the gateway read (server, method, name, arguments, "
        "is_error, error, problem); [] when the test had no MCP server",
    )


def check(entry: dict[str, Any]) -> dict[str, Any]:
    """A saved entry validated and completed with defaults (raises ``ValidationError``)."""
    checked = TestEntry.model_validate(entry)
    try:
        return checked.model_dump(mode="json")
    except ValueError:  # a lone surrogate in a key (an agent's JSON): refused in JSON mode
        done: dict[str, Any] = entries.plain(checked.model_dump())
        return done
