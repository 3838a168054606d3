"""The run summary's breakdowns that only some runs have: the models tokens went to with no
price (a price table), each test over its repeats (``--repeat``), how many tests each of the
insights' recommendations applies to, and the quarantined tests' results (a quarantine).

Their classes are made when a run first has one, or as the report's validator or serializer
is first built (:func:`.report._parts`): a run of one test without any of them makes none
(issue #40; ``tests/cli/test_cli_imports.py``).
"""

from pydantic import BaseModel, ConfigDict, Field


class UnpricedModel(BaseModel):
    """A model the agent spent tokens on that the price table has no price for: those runs'
    cost is unknown (not in ``cost_usd``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    model: str | None = Field(description="the model; None for tokens the agent named none for")
    runs: int = Field(description="runs that spent tokens on it")
    tokens: int | None = Field(
        description="tokens spent on it; None when a run did not report its total"
    )


class RepeatStats(BaseModel):
    """One test over its k repeats."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    runs: int
    passed: int
    failed: int
    errored: int
    errored_by_agent: int = 0
    pass_at_k: float | None
    pass_hat_k: float | None
    ended: dict[str, int] = Field(
        default_factory=dict,
        description="a conversation's repeats by why each ended ({'goal-met': 2, 'gave-up': "
        "1}; a repeat that errored before it ended is not counted); empty for a single run",
    )


class Recommendation(BaseModel):
    """One recommendation of the run-level rollup and how many tests it applies to (the
    whole rollup, with the test ids, is ``Summary.insights``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    text: str
    tests: int


class Quarantined(BaseModel):
    """The results of quarantined tests (``run --quarantine FILE``), counted apart: never in
    the headline counts, the pass rate, the score or the exit code."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    tests: list[str] = Field(default_factory=lambda: [], description="their titles")
    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0
    flaky: int = 0
