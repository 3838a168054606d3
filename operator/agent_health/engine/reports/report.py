"""The run report: every TestResult plus aggregates, in its versioned JSON shape
(docs/writing-tests.md).

Aggregates: counts, errored counts by cause, the pass rate, mean score, tokens and cost, a
per-label breakdown, and with ``--repeat k``: pass@k (a test passes at least once in k) and
pass^k (all k pass) per test and overall, and flaky tests; for a conversation, per test, how
its repeats ended (``per_test[id].ended``: ``{"goal-met": 2, "gave-up": 1}``). Every pass
rate, score, pass@k and pass^k carries a 95% interval (:mod:`.uncertainty`); pass@k and
pass^k are the unbiased estimators over each test's decided repeats, for k = the repeats and
every k of ``--pass-at``.

The pass rate is ``passed / (passed + failed + errored[agent])``: an error the agent under
test caused (refused, error status, malformed reply, timeout, crash) counts against it like a
failure; errors of the judge, the test or the infrastructure, and skipped tests, are left out
(they say nothing about the agent). pass@k and pass^k count an agent-caused error the same way.

A ``flaky`` result (it failed or errored, then passed on a retry, ``--retries``) counts as not
passed: in the denominator, not the numerator. Retries keep a run green; they never raise the
grade. ``summary.flaky`` names the flaky tests, and only those: a test that passed in some
repeats and not in others (``--repeat``) is listed in ``summary.mixed`` instead.

Version 2 adds, per test, what the agent was asked and did (``context``, ``output``,
``trajectory``, cut to caps with a ``truncated`` list, see :mod:`.bounds`) and its
``ledger_cell``, and per run the ``provenance`` (what ran). Version 1 files still load:
their tests lack those fields (readers such as ``compare`` and the HTML report accept both).

:meth:`RunReport.build` fills the report's models from values it computed itself, each of the
type its field declares, without validating them (``model_construct``): a run that writes no
report file builds none of their validators (about a tenth of a one-test run's start-up);
reading a saved report validates it. ``tests/engine/test_engine_report_unvalidated.py``
holds what it makes to what validation would make. An empty list's default is a lambda's, not
``list``: pydantic reads each default factory's signature as ``model_construct`` fills a
field, and a builtin's is parsed from its text by the tokenizer (its regular expressions
compiled on the first read: 18.6 M instructions of a one-test run, issue #40).

One concept: the report's shape and how a run's results fill it — each aggregate is computed
for the field that holds it, so the two are read together.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from agent_health import statuses
from agent_health.engine import outcome, statistics
from agent_health.engine.reports import entries
from agent_health.engine.reports.provenance import Provenance
from agent_health.sdk import deferred
from agent_health.sdk.results import CAUSES, Cause, TestResult

if TYPE_CHECKING:  # the optional parts' models: loaded by _parts(), not by every run
    from agent_health.engine import budget as budget_mod
    from agent_health.engine.reports import breakdowns
    from agent_health.engine.reports import rollup as rollup_mod
    from agent_health.engine.statistics import Matrix

REPORT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_REPEATS = 100_000  # the most repeats a report may say it ran (`run --repeat` as many)

# What the headline numbers mean, in one place: the terminal's legend and the HTML report
# both print these.
LEGEND = {
    "pass_rate": "passed / (passed + failed + errored by the agent + flaky); other errors and "
    "skipped left out",
    "score": "mean test score over the scored tests only, 0-1 (errored and skipped tests have "
    "none; a test's: weighted mean of its judge scores and checks, 1 pass 0 fail)",
    "pass_at_k": "tests passing in at least 1 of k repeats",
    "pass_hat_k": "tests passing in all k repeats",
    "interval": "[low, high]: 95% interval (Wilson for rates, bootstrap over tests for scores)",
}


def decided(passed: int, failed: int, errored_by_agent: int, flaky: int = 0) -> int:
    """The pass rate's denominator: the results that say something about the agent."""
    return passed + failed + errored_by_agent + flaky


def pass_rate(passed: int, failed: int, errored_by_agent: int, flaky: int = 0) -> float | None:
    """``passed / (passed + failed + errored[agent] + flaky)``, or ``None`` when nothing was
    decided."""
    total = decided(passed, failed, errored_by_agent, flaky)
    return round(passed / total, 6) if total else None


def by_cause(results: Sequence[TestResult]) -> dict[Cause, int]:
    """How many of ``results`` errored, per cause (every cause present, zeros included)."""
    counts: dict[Cause, int] = dict.fromkeys(CAUSES, 0)
    for r in results:
        if r.status == "errored" and r.cause is not None:
            counts[r.cause] += 1
    return counts


def _parts() -> None:
    """The modules of the report's optional parts — a budget's, the insights rollup's, an
    agent matrix's, the summary's :mod:`.breakdowns` — put where pydantic reads the
    report's field types (this module's namespace), as it first builds a validator or a
    serializer of :class:`Summary` or :class:`RunReport` (:class:`_WithParts`).

    A run fills its report without validating it (:meth:`RunReport.build`), so a run with
    none of these parts — one agent, no budget, no insights, no repeats, no price table, no
    quarantine — never imports their modules or makes their classes
    (``tests/cli/test_cli_imports.py``)."""
    from agent_health.engine import budget
    from agent_health.engine.reports import breakdowns, rollup

    globals().update(
        budget_mod=budget, rollup_mod=rollup, Matrix=statistics.Matrix, breakdowns=breakdowns
    )


class _WithParts(deferred.PartsFirst, BaseModel):
    """A report model whose fields name the optional parts' models, left unresolved when the
    class is made: pydantic resolves them, :func:`_parts` first, when it first builds the
    model's validator, serializer or JSON schema (:class:`~agent_health.sdk.deferred.PartsFirst`).
    A model or ``TypeAdapter`` of another module holding :class:`Summary` or
    :class:`RunReport` (none does) would call ``RunReport.model_rebuild()`` first."""

    model_config = ConfigDict(defer_build=True)

    @classmethod
    def load_parts(cls) -> None:
        _parts()


class LabelStats(BaseModel):
    """How the tests carrying one label did."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0
    flaky: int = 0
    errored_by_agent: int = 0
    pass_rate: float | None = None
    score: float | None = None
    scored: int = Field(default=0, description="results with a score, which `score` is the mean of")
    pass_rate_interval: statistics.Interval | None = None
    score_interval: statistics.Interval | None = None


class Summary(_WithParts):
    model_config = ConfigDict(defer_build=True, frozen=True)

    total: int
    passed: int
    failed: int
    errored: int
    skipped: int
    pass_rate: float | None
    score: float | None
    duration_ms: float
    tokens: int | None = Field(
        description="agent tokens summed over the runs that reported them; None if none did"
    )
    errored_by_cause: dict[Cause, int] = Field(
        default_factory=lambda: dict.fromkeys(CAUSES, 0),
        description="errored tests by cause: agent, judge, test, infra",
    )
    repeats: int = 1
    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    flaky: list[str] = Field(
        default_factory=lambda: [],
        description="titles of the tests that passed only on a retry (status flaky)",
    )
    flaky_count: int = Field(
        default=0, description="results that passed only on a retry (status flaky)"
    )
    judge_only: int = Field(
        default=0,
        description="skipped results whose only gates were judge calls that were skipped "
        "(--no-judge, no judge configured): nothing else was checked",
    )
    mixed: list[str] = Field(
        default_factory=lambda: [],
        description="titles of the tests that passed in some repeats and not in others "
        "(--repeat); not flaky, which means passed only on a retry",
    )
    scored: int = Field(default=0, description="results with a score, which `score` is the mean of")
    load_errors: list[str] = Field(default_factory=lambda: [])
    interrupted: bool = False
    not_run: int = 0
    stopped: str | None = Field(
        default=None, description="why no more tests started (e.g. --max-failures), if so"
    )
    judge_tokens: dict[str, Any] | None = None
    budget: "budget_mod.Report | None" = Field(
        default=None,
        description="the run's budget (--max-cost/--max-tokens/--max-duration), what it spent "
        "and which limit stopped it; None without a budget",
    )
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens_unreported: int = Field(
        default=0, description="runs of the agent that reported no token usage (not counted)"
    )
    cost_usd: float | None = None
    unpriced: int = 0
    unpriced_models: "list[breakdowns.UnpricedModel]" = Field(
        default_factory=lambda: [],
        description="with a price table, the models tokens were spent on that it has no price "
        "for, most tokens first: their runs' cost is unknown, not in cost_usd",
    )
    labels: dict[str, LabelStats] = Field(default_factory=dict)
    per_test: "dict[str, breakdowns.RepeatStats]" = Field(default_factory=dict)
    recommendations: "list[breakdowns.Recommendation]" = Field(default_factory=lambda: [])
    insights: "rollup_mod.Rollup | None" = Field(
        default=None,
        description="the run-level insights rollup: synthesised by the judge model (source "
        "llm) or grouped deterministically (source grouped); None without insights",
    )
    confidence: float = Field(default=statistics.CONFIDENCE, description="of every interval")
    pass_rate_interval: statistics.Interval | None = None
    score_interval: statistics.Interval | None = None
    pass_at_k_interval: statistics.Interval | None = None
    pass_hat_k_interval: statistics.Interval | None = None
    pass_at: list[statistics.PassAtK] = Field(
        default_factory=lambda: [],
        description="pass@k and pass^k for k = the repeats and --pass-at",
    )
    quarantined: "breakdowns.Quarantined | None" = Field(
        default=None,
        description="the quarantined tests' results, counted apart (run --quarantine); None "
        "without a quarantine",
    )
    not_loaded: list[str] = Field(
        default_factory=lambda: [],
        description="the files that did not load (a syntax error, a case file that does not "
        "validate, a path that is not there): none of their tests ran; load_errors says why",
    )
    did_not_run: list[str] = Field(
        default_factory=lambda: [],
        description="what of the run did not run or did not finish, in words, as the "
        "terminal's closing line begins ('1 file not loaded', 'interrupted, 12 never "
        "started'); empty when every selected test ran",
    )


class _Written:
    """Marks the report's ``tests``: each entry is written with its derived metrics' signals
    added (:func:`.entries.with_metric_signals`; not held in memory) — the serializer
    ``@field_serializer`` would make, given as the field's own schema: that decorator's
    module (``pydantic.functional_serializers``, with its classes: 8 M instructions, issue
    #40) is one a run that writes no report never needs. The JSON schemas are the same."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = handler(source)
        written = core_schema.plain_serializer_function_ser_schema(
            _written, return_schema=handler(source)
        )
        return {**schema, "serialization": written}


def _written(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each entry as written, its derived metrics' signals added (not held in memory)."""
    return [entries.with_metric_signals(t) for t in tests]


_WRITTEN = _Written()


class RunReport(_WithParts):
    """All results of one run. Field order is part of the file format."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    version: int = REPORT_VERSION
    summary: Summary
    provenance: Provenance | None = None
    tests: Annotated[list[dict[str, Any]], _WRITTEN]
    matrix: "Matrix | None" = Field(
        default=None,
        description="an agent matrix (--agent a --agent b): each agent's summary, the tests "
        "side by side and the paired statistics of each pair; None for one agent",
    )

    @classmethod
    def build(
        cls,
        results: Sequence[TestResult],
        *,
        duration_ms: float,
        repeats: int = 1,
        load_errors: Sequence[str] = (),
        not_loaded: Sequence[str] = (),
        hook_errors: Sequence[str] = (),
        interrupted: bool = False,
        not_run: int = 0,
        judge_tokens: dict[str, Any] | None = None,
        stopped: str | None = None,
        rollup: "rollup_mod.Rollup | None" = None,
        provenance: Provenance | None = None,
        budget: "budget_mod.Report | None" = None,
        # a string: read as `build` is defined, the face's name would load the matrix module
        pairing: "statistics.Pairing | None" = None,
        pass_at: Sequence[int] | None = None,
        bootstrap: bool = True,
    ) -> "RunReport":
        """The report of ``results``. ``rollup``: the run's insights rollup when it was
        synthesised (an async step, :func:`~agent_health.engine.reports.rollup.synthesise`); else
        grouped here. ``pass_at`` lists the k of pass@k (default: the repeats, when more than
        one); ``bootstrap=False`` leaves out the scores' bootstrap intervals, which cost a
        resampling each, for a tally rebuilt often. ``load_errors`` say why each file of
        ``not_loaded`` did not load; ``hook_errors`` (an ``after_all`` hook that failed) are
        listed with them."""
        every = results
        apart = [r for r in every if r.quarantined]
        if apart:  # reported apart: every aggregate below is over the others
            results = [r for r in every if not r.quarantined]
        if rollup is None and any(r.insights for r in results):  # else none to group
            from agent_health.engine.reports import rollup as rollup_mod

            rollup = rollup_mod.group(results)
        counts = {"passed": 0, "failed": 0, "errored": 0, "skipped": 0}
        flaky = 0
        for r in results:
            if r.status == "flaky":
                flaky += 1
            else:
                counts[r.status] += 1
        causes = by_cause(results)
        scores = [r.score for r in results if r.score is not None]
        summary: dict[str, Any] = dict(
            total=len(results),
            **counts,
            flaky_count=flaky,
            judge_only=sum(
                r.status == "skipped" and r.skip_reason == outcome.JUDGE_ONLY for r in results
            ),
            errored_by_cause=causes,
            pass_rate=pass_rate(counts["passed"], counts["failed"], causes["agent"], flaky),
            score=round(sum(scores) / len(scores), 6) if scores else None,
            scored=len(scores),
            duration_ms=float(round(duration_ms, 3)),
            tokens=_known_sum(r.token_usage.total for r in results),
            repeats=repeats,
            load_errors=[*load_errors, *hook_errors],
            not_loaded=sorted(set(not_loaded)),
            did_not_run=did_not_run(
                not_loaded=len(set(not_loaded)),
                hooks=len(hook_errors),
                interrupted=interrupted,
                stopped=stopped,
                not_run=not_run,
                budget=budget,
            ),
            interrupted=interrupted,
            not_run=not_run,
            stopped=stopped,
            judge_tokens=judge_tokens,
            budget=budget,
            input_tokens=_known_sum(r.token_usage.prompt for r in results),
            output_tokens=_known_sum(r.token_usage.completion for r in results),
            tokens_unreported=sum(1 for r in results if r.metrics and r.token_usage.total is None),
            labels=_labels(results, bootstrap),
            recommendations=_recommendations(rollup),
            insights=rollup,
            **_cost(results),
        )
        tallies = statistics.tallies(results)
        summary["pass_rate_interval"] = statistics.proportion(list(tallies.values()))
        if bootstrap:
            summary["score_interval"] = statistics.score_interval(list(tallies.values()))
        ks = list(pass_at) if pass_at is not None else ([repeats] if repeats > 1 else [])
        if repeats > 1:
            summary.update(_pass_at_k(results, tallies, repeats))
        if ks:
            summary["pass_at"] = statistics.pass_at(tallies, ks)
            own = next((p for p in summary["pass_at"] if p.k == repeats), None)
            if own is not None:
                summary["pass_at_k_interval"] = own.pass_at_k_interval
                summary["pass_hat_k_interval"] = own.pass_hat_k_interval
        summary["flaky"] = sorted({r.title for r in results if r.status == "flaky"})
        if apart:
            from agent_health.engine.reports import breakdowns

            summary["quarantined"] = breakdowns.Quarantined.model_construct(
                None,
                tests=sorted({r.title for r in apart}),
                **{s: sum(r.status == s for r in apart) for s in statuses.STATUSES},
            )
        tests = [entries.from_result(r) for r in every]

        def alone(of_agent: Sequence[TestResult]) -> dict[str, Any]:
            built = cls.build(
                of_agent,
                duration_ms=duration_ms,
                repeats=repeats,
                pass_at=pass_at,
                bootstrap=bootstrap,
            )
            return built.summary.model_dump(mode="json")

        return cls.model_construct(
            summary=Summary.model_construct(**summary),
            provenance=provenance,
            tests=tests,
            # each pair of agents gets the paired test `compare` runs on two reports; a
            # run of one agent (whose results name none) loads no matrix
            matrix=statistics.build_matrix(
                results,
                [t for t in tests if not t["quarantined"]] if apart else tests,
                alone,
                pairing or _paired,
            )
            if any(r.agent is not None for r in results)
            else None,
        )


def _paired(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> Any:
    """The paired test of two agents' entries (:func:`.statistics.pair_runs`), its module
    loaded when a matrix has a pair (one agent's run never does)."""
    return statistics.pair_runs(base, new)


def did_not_run(
    *,
    not_loaded: int,
    hooks: int,
    interrupted: bool,
    stopped: str | None,
    not_run: int,
    budget: "budget_mod.Report | None",
) -> list[str]:
    """What of a run did not run, each in a few words: the files not loaded, the
    ``after_all`` hooks that failed, the tests an interruption, ``-x`` or a misdirected agent
    left unstarted, the tests a budget skipped (why is said on the lines above)."""
    said = []
    if not_loaded:
        said.append(f"{not_loaded} file{'s' if not_loaded != 1 else ''} not loaded")
    if hooks:
        said.append(f"{hooks} after_all hook{'s' if hooks != 1 else ''} failed")
    never = f", {not_run} never started" if not_run else ""
    if interrupted:
        said.append(f"interrupted{never}")
    elif budget is not None and budget.exhausted is not None:
        said.append(f"stopped by the budget, {budget.skipped} skipped{never}")
    elif stopped:
        said.append(f"stopped early{never}")
    return said


def _recommendations(rollup: "rollup_mod.Rollup | None") -> list[Any]:
    """How many tests each of the rollup's recommendations applies to (none without one)."""
    if rollup is None or not rollup.recommendations:
        return []
    from agent_health.engine.reports import breakdowns

    return [
        breakdowns.Recommendation.model_construct(text=item.text, tests=len(item.tests))
        for item in rollup.recommendations
    ]


def _known_sum(values: Iterable[int | None]) -> int | None:
    """The sum of the known values; ``None`` when none is known (never a made-up zero)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _labels(results: Sequence[TestResult], bootstrap: bool = True) -> dict[str, LabelStats]:
    keys = (*statuses.STATUSES, "errored_by_agent")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(keys, 0))
    scores: dict[str, list[float]] = defaultdict(list)
    members: dict[str, list[TestResult]] = defaultdict(list)
    for r in results:
        for label in r.labels:
            counts[label][r.status] += 1
            counts[label]["errored_by_agent"] += _agent_errored(r)
            members[label].append(r)
            if r.score is not None:
                scores[label].append(r.score)
    out = {}
    for label in sorted(counts):
        c = counts[label]
        tallies = list(statistics.tallies(members[label]).values())
        out[label] = LabelStats.model_construct(
            None,
            **c,
            pass_rate=pass_rate(c["passed"], c["failed"], c["errored_by_agent"], c["flaky"]),
            score=_mean(scores[label]),
            scored=len(scores[label]),
            pass_rate_interval=statistics.proportion(tallies),
            score_interval=statistics.score_interval(tallies) if bootstrap else None,
        )
    return out


def _agent_errored(r: TestResult) -> int:
    return 1 if r.status == "errored" and r.cause == "agent" else 0


def _cost(results: Sequence[TestResult]) -> dict[str, Any]:
    """Total cost of the runs that have one; ``unpriced`` counts runs without a price and
    ``unpriced_models`` names the models their tokens went to that have no price."""
    ran = [r for r in results if r.metrics]
    priced = [r.metrics["cost_usd"] for r in ran if r.metrics.get("cost_usd") is not None]
    runs: Counter[str | None] = Counter()
    tokens: dict[str | None, int | None] = {}
    for r in ran:
        for entry in r.metrics.get("unpriced_models") or ():
            model, spent = entry.get("model"), entry.get("tokens")
            runs[model] += 1
            before = tokens.get(model, 0)
            tokens[model] = None if before is None or spent is None else before + spent
    unpriced_models: list[Any] = []
    if runs:
        from agent_health.engine.reports import breakdowns

        unpriced_models = [
            breakdowns.UnpricedModel.model_construct(model=model, runs=n, tokens=tokens[model])
            for model, n in runs.items()
        ]
    unpriced_models.sort(key=lambda u: -1 if u.tokens is None else u.tokens, reverse=True)
    return {
        "cost_usd": float(round(sum(priced), 8)) if priced else None,
        "unpriced": len(ran) - len(priced),
        "unpriced_models": unpriced_models,
    }


def _pass_at_k(
    results: Sequence[TestResult], tallies: dict[str, statistics.Tally], k: int
) -> dict[str, Any]:
    """pass@k and pass^k for k = the repeats, per test and overall (the unbiased estimators
    over each test's decided repeats: passed, failed, flaky and errored by the agent, which
    are not passes; other errored repeats are left out, and a test with fewer than k decided
    repeats has no pass@k), and the tests that passed in some repeats and not in others."""
    seen_by_test: dict[str, list[str]] = defaultdict(list)
    titles: dict[str, str] = {}
    ended: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        key = statistics.matrix_key(r)  # a matrix: per agent and test
        seen_by_test[key].append(r.status)
        if r.ended is not None:
            ended[key][r.ended.reason] += 1
        titles[key] = r.title if r.agent is None else f"{r.title} [{r.agent}]"
    from agent_health.engine.reports import breakdowns  # a run with repeats

    (overall,) = statistics.pass_at(tallies, [k], intervals=False)
    per_test = {}
    for test_id, seen in seen_by_test.items():
        t = tallies[test_id]
        enough = t.decided >= k
        per_test[test_id] = breakdowns.RepeatStats.model_construct(
            runs=len(seen),
            passed=seen.count("passed"),
            failed=seen.count("failed"),
            errored=seen.count("errored"),
            errored_by_agent=t.decided - len([s for s in seen if s in statuses.DECIDED]),
            pass_at_k=round(statistics.pass_at_k(t.decided, t.passed, k), 6) if enough else None,
            pass_hat_k=round(statistics.pass_hat_k(t.decided, t.passed, k), 6) if enough else None,
            ended=dict(sorted(ended[test_id].items())),
        )
    mixed = sorted(
        titles[t] for t, s in per_test.items() if s.passed and (s.failed or s.errored_by_agent)
    )
    return {
        "pass_at_k": overall.pass_at_k,
        "pass_hat_k": overall.pass_hat_k,
        "mixed": mixed,
        "per_test": per_test,
    }
