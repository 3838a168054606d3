"""A judge's answer, handed back to the body: :class:`Verdict`.

Made with the first ``judge()`` (or evaluator) a run calls: a run that judges nothing never
makes it (issue #40; ``tests/cli/test_cli_imports.py``).
"""

from pydantic import BaseModel, ConfigDict

from agent_health.sdk import errors, results


class Verdict(BaseModel):
    """A judge's answer, handed back to the body."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    criteria: str
    passed: bool | None
    score: float | None = None
    reasoning: str = ""
    role: results.Role = "gate"
    cached: bool = False
    skipped: bool = False
    errored: bool = False
    error: str | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    def to_pass(self) -> "Verdict":
        """Assert that the verdict passed (a failed test otherwise; skipped passes).

        A failed gate verdict already fails the test through its own signal, so asserting
        it stops the body without counting the failure again; asserting a failed
        ``observe`` verdict makes it count once, as a gate.
        """
        if self.errored:
            raise errors.JudgeError(
                f"judge errored on {self.criteria!r}: {self.error}", cause="judge"
            )
        if self.passed is False:
            raise errors.JudgeFailed(
                f"judge: {self.criteria!r} not met: {self.reasoning}",
                recorded=self.role == "gate",
            )
        return self

    def or_throw(self) -> "Verdict":
        """Stop the body here unless the verdict passed (skipped lets the body go on)."""
        return self.to_pass()
