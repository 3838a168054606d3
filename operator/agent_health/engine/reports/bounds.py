"""Bounding what a report keeps of a run: a cap per field, and a record of what was cut.

An agent can answer megabytes, or thousands of steps; a report of 6,000 results must still
open in a browser. Each long field is cut to its cap with a visible marker, and the test's
``truncated`` list names every field that was cut (``output``, ``trajectory[3].tool_output``,
``trajectory[500:]`` for steps dropped), so nobody mistakes a cut value for the whole one.
The ledger cell keeps everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

OUTPUT_CHARS = 64_000  # the agent's final answer
FIELD_CHARS = 16_000  # the prompt, each context value, each step's content, args and result
STEPS = 500  # steps of a trajectory


@dataclass(eq=False, repr=False)
class Bounded:
    """Cuts values to their caps and remembers which fields it cut."""

    field_chars: int = FIELD_CHARS
    output_chars: int = OUTPUT_CHARS
    steps: int = STEPS
    truncated: list[str] = field(default_factory=list)

    def text(self, value: str | None, path: str, cap: int | None = None) -> str | None:
        limit = self.field_chars if cap is None else cap
        if value is None or len(value) <= limit:
            return value
        self.truncated.append(path)
        return value[:limit] + f"… [{len(value) - limit} more characters cut]"

    def value(self, value: Any, path: str) -> Any:
        """Any JSON value: kept as is when its JSON text is short, else that text, cut."""
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return self.text(value, path)
        encoded = json.dumps(value, ensure_ascii=False, default=str)
        if len(encoded) <= self.field_chars:
            return value
        return self.text(encoded, path)

    def context(self, items: Sequence[BaseModel]) -> list[dict[str, Any]]:
        out = []
        for i, item in enumerate(items):
            entry = item.model_dump(mode="json")
            entry["value"] = self.text(entry.get("value"), f"context[{i}].value")
            out.append(entry)
        return out

    def trajectory(
        self, steps: Sequence[BaseModel], path: str = "trajectory"
    ) -> list[dict[str, Any]]:
        out = []
        for i, step in enumerate(steps[: self.steps]):
            entry = step.model_dump(mode="json", exclude_none=True)
            for key in ("content", "tool_args", "tool_output"):
                if key in entry:
                    entry[key] = self.value(entry[key], f"{path}[{i}].{key}")
            out.append(entry)
        if len(steps) > self.steps:
            self.truncated.append(f"{path}[{self.steps}:]")
        return out
