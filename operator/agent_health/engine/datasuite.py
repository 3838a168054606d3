"""Data-driven suites: JSON files of test cases in agent-health's established format.

Each case ``{name, description, category, difficulty, labels, initialPrompt, context,
expectedOutcomes, expectedTrajectory: [{step, description, requiredTools}]}`` becomes a
test whose body runs the prompt, checks every required tool, checks that the steps' tools
were called in step order, and judges every expected outcome, so existing case libraries
run unchanged. A case with none of these checks is ``skipped`` ("nothing to grade").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_health.sdk import declare, errors
from agent_health.sdk.judges import BoundJudge
from agent_health.sdk.matchers import BoundExpect


class TrajectoryStep(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="allow", populate_by_name=True)

    step: int | None = None
    description: str = ""
    required_tools: list[str] = Field(default_factory=list, alias="requiredTools")


class ContextEntry(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    description: str = ""
    value: str


class DataCase(BaseModel):
    """One case of a JSON suite (unknown keys are kept for the record but ignored)."""

    model_config = ConfigDict(defer_build=True, extra="allow", populate_by_name=True)

    name: str = Field(min_length=1)
    description: str | None = None
    category: str | None = None
    subcategory: str | None = None
    difficulty: str | None = None
    labels: list[str] | None = None
    initial_prompt: str = Field(alias="initialPrompt", min_length=1)
    context: list[ContextEntry] = Field(default_factory=list)
    expected_outcomes: list[str] = Field(default_factory=list, alias="expectedOutcomes")
    expected_trajectory: list[TrajectoryStep] = Field(
        default_factory=list, alias="expectedTrajectory"
    )
    timeout: float | None = Field(default=None, gt=0)

    def all_labels(self) -> tuple[str, ...]:
        if self.labels is not None:
            return tuple(self.labels)
        found = []
        if self.category:
            found.append(f"category:{self.category}")
        if self.subcategory:
            found.append(f"subcategory:{self.subcategory}")
        if self.difficulty:
            found.append(f"difficulty:{self.difficulty.lower()}")
        return tuple(found)

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


def is_data_file(path: Path) -> bool:
    name = path.name
    return name.endswith(".cases.json") or (name.startswith("test_") and name.endswith(".json"))


def _body(case: DataCase) -> Callable[..., Any]:
    tools = case.required_tools()
    steps = case.tool_steps()
    outcomes = list(case.expected_outcomes)

    async def data_case(agent: Any, expect: BoundExpect, judge: BoundJudge) -> None:
        result = await agent.run()
        for tool in tools:
            expect(result).to_have_called_tool(tool)
        # The order of the steps, among the tools that were called: a missing tool already
        # failed above, and one failure counts once.
        called = {s.tool_name for s in result.tool_calls()}
        present = [kept for step in steps if (kept := [t for t in step if t in called])]
        if len(present) > 1:
            expect(result).to_have_called_tools_in_steps(present)
        for outcome in outcomes:
            await judge(result, outcome)

    return data_case


def load(path: Path) -> list[declare.TestCase]:
    """The cases of one JSON suite, or a DefinitionError naming the case and field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise errors.DefinitionError(f"cannot read: {err}") from err
    except json.JSONDecodeError as err:
        raise errors.DefinitionError(f"line {err.lineno}: invalid JSON: {err.msg}") from err
    if isinstance(data, dict) and isinstance(data.get("testCases"), list):
        data = data["testCases"]
    if not isinstance(data, list):
        raise errors.DefinitionError("a JSON suite is a list of test cases [{name, ...}]")
    cases: list[declare.TestCase] = []
    seen: set[str] = set()
    for index, raw in enumerate(data):
        try:
            case = DataCase.model_validate(raw)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            label = raw.get("name") if isinstance(raw, dict) else None
            raise errors.DefinitionError(
                f"case [{index}]{f' {label!r}' if label else ''}: {where}: {first['msg']}"
            ) from err
        if case.name in seen:
            raise errors.DefinitionError(f"case [{index}]: duplicate test name {case.name!r}")
        seen.add(case.name)
        cases.append(_declare(case, path, raw))
    return cases


def _declare(case: DataCase, path: Path, raw: Any) -> declare.TestCase:
    # A case with no check would pass whatever the agent did: it is reported skipped, with
    # the reason, and the agent is not called (and not paid for). Not errored: the case is
    # valid in the established format, and a library with placeholder cases must still run.
    empty = case.nothing_to_grade()
    return declare.TestCase(
        mode="skip" if empty else "run",
        skip_reason=empty,
        name=case.name,
        describe_path=(),
        fn=_body(case),
        params=("agent", "expect", "judge"),
        fixtures={},
        file=str(path),
        line=0,  # a JSON case has no line of its own
        labels=case.all_labels(),
        description=case.description,
        timeout=case.timeout,
        default_prompt=case.initial_prompt,
        context=tuple(c.model_dump() for c in case.context),
        expected_outcomes=tuple(case.expected_outcomes),
        expected_trajectory=tuple(s.model_dump(by_alias=True) for s in case.expected_trajectory),
        source=json.dumps(raw, sort_keys=True),
    )
