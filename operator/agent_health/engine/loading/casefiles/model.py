"""Upstream's ``TestCase`` (types/index.ts of the TypeScript agent-health) as pydantic models.

Every field upstream defines has a place here, and :data:`CASE_FIELDS` says what
agent-health does with each (docs/writing-tests.md, "Case files", lists the same). The
models take the *lenient* shape: what only upstream's validation refuses (no category, a
difficulty outside Easy/Medium/Hard, a context item without a description, blank outcomes)
passes here and is judged by :mod:`.checks`, which knows whether the file is read leniently.
Values are strict, as upstream's schema is: a number is not a string.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health import timeouts

DIFFICULTIES = ("Easy", "Medium", "Hard")
TRIGGERS = ("results_available", "error", "always")


class _Model(BaseModel):
    # Unknown keys are found (and warned about) by checks.unknown_fields, not by pydantic.
    model_config = ConfigDict(defer_build=True, extra="ignore", strict=True, populate_by_name=True)


class ContextItem(_Model):
    """``{description, value}``: a piece of context sent with the prompt."""

    description: str | None = None
    value: str


class TrajectoryStep(_Model):
    """``{step, description, requiredTools}``: one step the agent is expected to take."""

    step: int | None = None
    description: str = ""
    required_tools: list[str] = Field(default_factory=list, alias="requiredTools")


class ToolDefinition(_Model):
    """A tool the client offers the agent (AG-UI / CopilotKit shape)."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class FollowUp(_Model):
    """``{trigger, question, businessValue}``: a later turn of the conversation."""

    trigger: Literal["results_available", "error", "always"]
    question: str = Field(min_length=1)
    business_value: str = Field(default="", alias="businessValue")


class Case(_Model):
    """One test case, as upstream stores, exports and imports it (plus ``timeout``)."""

    id: str | None = Field(default=None, min_length=1)
    name: str = Field(min_length=1)
    description: str | None = None
    labels: list[str] | None = None
    category: str | None = None
    subcategory: str | None = None
    difficulty: str | None = None
    current_version: int | None = Field(default=None, ge=1, alias="currentVersion")
    versions: list[dict[str, Any]] | None = None
    is_promoted: bool | None = Field(default=None, alias="isPromoted")
    created_at: str | None = Field(default=None, alias="createdAt")
    updated_at: str | None = Field(default=None, alias="updatedAt")
    tags: list[str] | None = None
    author: str | None = None
    initial_prompt: str = Field(alias="initialPrompt", min_length=1)
    context: list[ContextItem] = Field(default_factory=list)
    tools: list[ToolDefinition] = Field(default_factory=list)
    expected_ppl: str | None = Field(default=None, alias="expectedPPL")
    expected_outcomes: list[str] = Field(default_factory=list, alias="expectedOutcomes")
    expected_trajectory: list[TrajectoryStep] = Field(
        default_factory=list, alias="expectedTrajectory"
    )
    follow_up_questions: list[FollowUp] = Field(default_factory=list, alias="followUpQuestions")
    describe_path: list[str] | None = Field(default=None, alias="describePath")
    timeout: timeouts.Seconds | None = None

    def all_labels(self) -> tuple[str, ...]:
        """Upstream's labels: ``labels`` as written when there are any, else built from the
        legacy fields in upstream's order (``difficulty:``, ``category:``, ``subcategory:``),
        each value as written (``difficulty:Easy``)."""
        if self.labels:
            return tuple(self.labels)
        built = []
        if self.difficulty:
            built.append(f"difficulty:{self.difficulty}")
        if self.category:
            built.append(f"category:{self.category}")
        if self.subcategory:
            built.append(f"subcategory:{self.subcategory}")
        return tuple(built)

    def label_value(self, prefix: str) -> str | None:
        """The value of the first ``prefix:`` label (``labels`` replace the legacy fields)."""
        for label in self.labels or ():
            if label.startswith(f"{prefix}:"):
                return label[len(prefix) + 1 :]
        return None

    def required_tools(self) -> list[str]:
        tools: list[str] = []
        for step in self.expected_trajectory:
            tools.extend(t for t in step.required_tools if t not in tools)
        return tools

    def tool_steps(self) -> list[list[str]]:
        """The required tools of each expected step, in step order (by ``step`` when every
        step is numbered, else as listed); steps that require no tool are left out."""
        ordered = list(self.expected_trajectory)
        if ordered and all(s.step is not None for s in ordered):
            ordered.sort(key=lambda s: s.step or 0)
        return [list(s.required_tools) for s in ordered if s.required_tools]

    def nothing_to_grade(self) -> str | None:
        """Why the case cannot be graded, when it has no check at all (else ``None``)."""
        if self.expected_outcomes or self.required_tools():
            return None
        return (
            f"nothing to grade: case {self.name!r} has no expectedOutcomes and no "
            "requiredTools in its expectedTrajectory; add one so the run can pass or fail"
        )


Use = Literal["runs", "checks", "metadata", "refused"]

CASE_FIELDS: dict[str, tuple[Use, str]] = {
    "id": (
        "runs",
        "the test's identity: its id is FILE::ID, so renaming the case keeps its history",
    ),
    "name": ("runs", "the test's name (unique in the file unless the cases have ids)"),
    "description": ("metadata", "shown by list and in the reports"),
    "labels": ("runs", "the test's labels, as written"),
    "category": ("runs", "the label category:X (when there are no labels)"),
    "subcategory": ("runs", "the label subcategory:X (when there are no labels); kept"),
    "difficulty": ("runs", "the label difficulty:X (when there are no labels)"),
    "currentVersion": ("metadata", "kept as the case's metadata"),
    "versions": ("metadata", "kept as the case's metadata"),
    "isPromoted": ("metadata", "kept as the case's metadata"),
    "createdAt": ("metadata", "kept as the case's metadata"),
    "updatedAt": ("metadata", "kept as the case's metadata"),
    "tags": ("metadata", "kept as the case's metadata"),
    "author": ("metadata", "kept as the case's metadata"),
    "initialPrompt": ("runs", "the prompt agent.run() sends"),
    "context": ("runs", "the context items sent with the prompt"),
    "tools": ("runs", "the tool definitions sent to the agent by its connector"),
    "expectedPPL": ("checks", "the reference answer every judge call of the case is given"),
    "expectedOutcomes": ("checks", "each is judged"),
    "expectedTrajectory": ("checks", "every required tool is checked, and their step order"),
    "followUpQuestions": (
        "runs",
        "the later turns of the same run: each question is asked in order when its trigger "
        "holds for the turn before it",
    ),
    "describePath": ("metadata", "kept as the case's metadata"),
    "timeout": (
        "runs",
        "agent-health's own: seconds for the whole test (finite, at most a day: 86,400)",
    ),
}
"""Each field of a case, what agent-health does with it, and how (for docs and tests)."""

WRAPPER_FIELDS = ("id", "name", "description", "testCases", "createdAt", "updatedAt", "total")
"""The keys of ``{name, testCases}`` (an exported benchmark or a list response)."""

BENCHMARK_FIELDS = (
    "id",
    "name",
    "description",
    "createdAt",
    "updatedAt",
    "currentVersion",
    "versions",
    "testCaseIds",
    "testCases",
    "runs",
)
"""The keys of a benchmark (types/index.ts ``Benchmark``), plus inline ``testCases``."""

NESTED_FIELDS: dict[str, tuple[str, ...]] = {
    "context": ("description", "value"),
    "expectedTrajectory": ("step", "description", "requiredTools"),
    "tools": ("name", "description", "parameters"),
    "followUpQuestions": ("trigger", "question", "businessValue"),
}
"""The keys of each list-of-objects field of a case."""
