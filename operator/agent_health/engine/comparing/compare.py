"""``agent-health compare BASE.json NEW.json``: what changed between two runs, for CI gates.

Tests are matched by id and repeat. A test whose ``content_hash`` differs was edited between
the runs, and is marked ``changed`` so a new failure can be told from a changed test. A test
that passed and now failed *or errored* (whatever the cause) is newly failing. The
comparison is a regression when:

* tests are newly failing: more than ``max_pass_rate_drop`` of the compared tests (default
  0: any one) — an error is never a way out of the gate;
* the pass rate dropped by more than ``max_pass_rate_drop``;
* the mean score dropped by more than ``max_score_drop`` (when given);
* the errored count rose by more than ``max_errored_rise`` (default 0);
* more than ``max_conversations_worse`` conversations got worse (only when given): took more
  turns, lost ``goal-met``, or now end ``gave-up`` / ``max-turns``.

Every conversation that moved turn by turn (:mod:`.turns`) is named either way.

Beside the deltas, the tests paired by id go through a paired test of "no change"
(:mod:`.pairing`): its p-value, the effect's interval and whether the change can be told from
noise at this sample size. With ``gate="significant"`` the comparison is a regression only
when that test finds a significant drop: of the pass rate (by more than
``max_pass_rate_drop``), or of the score when ``max_score_drop`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health import statuses
from agent_health.engine import reports, statistics
from agent_health.engine.comparing import replayed, turns
from agent_health.sdk import errors

TOP_DELTAS = 20
Gate = Literal["thresholds", "significant"]
GATES: tuple[Gate, ...] = ("thresholds", "significant")


class CompareError(errors.AgentHealthError):
    """A report file cannot be compared (missing, not JSON, wrong version or shape)."""


class Delta(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    base: float | None
    new: float | None
    delta: float | None


class Change(BaseModel):
    """One test whose status or score moved."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    name: str
    repeat: int
    base: str
    new: str
    changed: bool = False
    base_score: float | None = None
    new_score: float | None = None
    error: str | None = None
    cause: str | None = None


class Comparison(BaseModel):
    """Everything ``compare`` found; ``regressions`` says why it fails the gate."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    base_file: str
    new_file: str
    repeats: int = Field(default=1, description="repeats per test in the new run (labels)")
    newly_failing: list[Change] = Field(default_factory=list)
    newly_passing: list[Change] = Field(default_factory=list)
    score_changes: list[Change] = Field(default_factory=list)
    changed_tests: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    conversation_changes: list[turns.TurnChange] = Field(
        default_factory=list,
        description="conversations that took other turns, ended otherwise or called other "
        "tools in a turn",
    )
    compared: int = 0
    pass_rate: Delta
    score: Delta
    errored: Delta
    tokens: Delta
    cost_usd: Delta
    paired: statistics.Paired = Field(default_factory=statistics.Paired)
    base_replay: replayed.Replay | None = Field(
        default=None, description="BASE was made by --replay"
    )
    new_replay: replayed.Replay | None = Field(default=None, description="NEW was made by --replay")
    gate: Gate = "thresholds"
    regressions: list[str] = Field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)


def load(path: Path) -> dict[str, Any]:
    """A JSON report, checked for the version and the fields compare relies on
    (:mod:`.savedreport`: finite numbers, counts at least 0, unique test ids, ...)."""
    try:
        return reports.read_report(path)
    except reports.ReportFileError as err:
        raise CompareError(str(err)) from err


def compare(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    base_file: str = "BASE",
    new_file: str = "NEW",
    max_pass_rate_drop: float = 0.0,
    max_score_drop: float | None = None,
    max_errored_rise: int = 0,
    alpha: float = statistics.ALPHA,
    gate: Gate = "thresholds",
    allow_replayed: bool = False,
    max_conversations_worse: int | None = None,
) -> Comparison:
    """Compare two loaded reports (see :func:`load`). A replayed NEW gates nothing unless
    ``allow_replayed``: raises :class:`CompareError` saying why."""
    new_replay = replayed.replay_of(new)
    if new_replay is not None and not allow_replayed:
        raise CompareError(
            f"{new_replay.said(f'NEW {new_file}')}; its results say how the current tests grade "
            "recorded answers, not how the agent answers now, so it cannot gate the agent: "
            "run NEW against the agent, or pass --allow-replayed to compare it anyway (e.g. "
            "to gate a change of the tests' own checks)"
        )
    before = {(t["id"], t.get("repeat", 0)): t for t in base["tests"]}
    after = {(t["id"], t.get("repeat", 0)): t for t in new["tests"]}
    failing: list[Change] = []
    passing: list[Change] = []
    moved: list[Change] = []
    edited: set[str] = set()
    for key, now in after.items():
        was = before.get(key)
        if was is None:
            continue
        changed = bool(was.get("content_hash")) and was.get("content_hash") != now.get(
            "content_hash"
        )
        if changed:
            edited.add(now["id"])
        change = Change(
            id=now["id"],
            name=str(now.get("name", now["id"])),
            repeat=key[1],
            base=was["status"],
            new=now["status"],
            changed=changed,
            base_score=was.get("score"),
            new_score=now.get("score"),
            error=now.get("error"),
            cause=now.get("cause"),
        )
        if was["status"] == "passed" and now["status"] in statuses.NOT_PASSED:
            failing.append(change)
        elif was["status"] in statuses.NOT_PASSED and now["status"] == "passed":
            passing.append(change)
        scored = change.base_score is not None and change.new_score is not None
        if scored and change.new_score != change.base_score:
            moved.append(change)
    moved.sort(key=lambda c: (c.new_score or 0.0) - (c.base_score or 0.0))
    s0, s1 = base["summary"], new["summary"]
    result = Comparison(
        base_file=base_file,
        new_file=new_file,
        repeats=max(int(new["summary"].get("repeats") or 1), 1),
        newly_failing=failing,
        newly_passing=passing,
        score_changes=moved[:TOP_DELTAS],
        changed_tests=sorted(edited),
        added=sorted({k[0] for k in after} - {k[0] for k in before}),
        removed=sorted({k[0] for k in before} - {k[0] for k in after}),
        conversation_changes=turns.changes(before, after),
        compared=sum(1 for key in after if key in before),
        pass_rate=_delta(s0.get("pass_rate"), s1.get("pass_rate")),
        score=_delta(s0.get("score"), s1.get("score")),
        errored=_delta(s0.get("errored"), s1.get("errored")),
        tokens=_delta(s0.get("tokens"), s1.get("tokens")),
        cost_usd=_delta(s0.get("cost_usd"), s1.get("cost_usd")),
        paired=statistics.pair_runs(base["tests"], new["tests"], alpha=alpha),
        base_replay=replayed.replay_of(base),
        new_replay=new_replay,
        gate=gate,
    )
    talks = _conversations_worse(result, max_conversations_worse)
    if gate == "significant":
        reasons = _significant(result.paired, max_pass_rate_drop, max_score_drop)
        return result.model_copy(update={"regressions": reasons + talks})
    reasons = []
    if failing and len(failing) > max_pass_rate_drop * result.compared + 1e-9:
        errored = sum(1 for c in failing if c.new == "errored")
        reasons.append(
            f"{len(failing)} of {result.compared} tests newly failing ({errored} of them "
            f"errored), more than --max-pass-rate-drop {max_pass_rate_drop:g} allows"
        )
    drop = result.pass_rate.delta
    if drop is not None and -drop > max_pass_rate_drop + 1e-9:
        reasons.append(
            f"pass rate dropped {_points(-drop)} ({pct(result.pass_rate.base)} → "
            f"{pct(result.pass_rate.new)}), more than --max-pass-rate-drop "
            f"{_allowed(max_pass_rate_drop)}"
        )
    sdrop = result.score.delta
    if max_score_drop is not None and sdrop is not None and -sdrop > max_score_drop + 1e-9:
        reasons.append(
            f"score dropped {-sdrop:.3f} ({result.score.base:.3f} → {result.score.new:.3f}), "
            f"more than --max-score-drop {max_score_drop:g}"
        )
    rise = result.errored.delta
    if rise is not None and rise > max_errored_rise:
        reasons.append(
            f"errored tests rose by {rise:.0f} ({result.errored.base:.0f} → "
            f"{result.errored.new:.0f}), more than --max-errored-rise {max_errored_rise}"
        )
    return result.model_copy(update={"regressions": reasons + talks})


def without(report: Mapping[str, Any], ids: set[str]) -> dict[str, Any]:
    """``report`` without the tests ``ids`` names, its summary counted again from the tests
    left (counts, errored by cause, pass rate, score, tokens, cost): what ``compare`` reads
    of both sides when a run quarantines tests."""
    from agent_health.engine import reports

    tests = [t for t in report["tests"] if str(t["id"]) not in ids]
    counts: dict[str, int] = dict.fromkeys(statuses.STATUSES, 0)
    causes = dict.fromkeys(("agent", "judge", "test", "infra"), 0)
    for t in tests:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
        if t["status"] == "errored" and t.get("cause") in causes:
            causes[t["cause"]] += 1
    scores = [t["score"] for t in tests if isinstance(t.get("score"), int | float)]
    metrics = [t.get("metrics") or {} for t in tests]
    tokens = [m["total_tokens"] for m in metrics if isinstance(m.get("total_tokens"), int)]
    costs = [m["cost_usd"] for m in metrics if isinstance(m.get("cost_usd"), int | float)]
    summary = {
        **report["summary"],
        "total": len(tests),
        **{k: v for k, v in counts.items() if k != "flaky"},
        "flaky_count": counts["flaky"],
        "errored_by_cause": causes,
        "pass_rate": reports.pass_rate(
            counts["passed"], counts["failed"], causes["agent"], counts["flaky"]
        ),
        "score": round(sum(scores) / len(scores), 6) if scores else None,
        "tokens": sum(tokens) if tokens else None,
        "cost_usd": round(sum(costs), 8) if costs else None,
    }
    return {**report, "summary": summary, "tests": tests}


def _conversations_worse(result: Comparison, allowed: int | None) -> list[str]:
    """The regression of ``--max-conversations-worse``, if it is given and exceeded."""
    worse = {(c.id, c.repeat) for c in result.conversation_changes if c.worse}
    if allowed is None or len(worse) <= allowed:
        return []
    return [
        f"{len(worse)} conversations got worse (more turns, goal no longer met, or gave up), "
        f"more than --max-conversations-worse {allowed}"
    ]


def _significant(
    found: statistics.Paired, max_pass_rate_drop: float, max_score_drop: float | None
) -> list[str]:
    """The regressions of ``--gate significant``: significant drops beyond the thresholds."""
    reasons = []
    rate = found.pass_rate
    if rate is not None and rate.regressed and -rate.effect > max_pass_rate_drop + 1e-9:
        allowed = f", more than --max-pass-rate-drop {_allowed(max_pass_rate_drop)}"
        reasons.append(
            f"pass rate dropped {_points(-rate.effect)} over {rate.tests} paired tests, "
            "significant "
            f"at α = {found.alpha:g} ({rate.method} p = {rate.p_value:.3g})"
            + (allowed if max_pass_rate_drop else "")
        )
    score = found.score
    if (
        max_score_drop is not None
        and score is not None
        and score.regressed
        and -score.effect > max_score_drop + 1e-9
    ):
        reasons.append(
            f"score dropped {-score.effect:.3f} over {score.tests} paired tests, significant at "
            f"α = {found.alpha:g} ({score.method} p = {score.p_value:.3g}), more than "
            f"--max-score-drop {max_score_drop:g}"
        )
    return reasons


def compare_files(
    base: Path,
    new: Path,
    *,
    max_pass_rate_drop: float = 0.0,
    max_score_drop: float | None = None,
    max_errored_rise: int = 0,
    alpha: float = statistics.ALPHA,
    gate: Gate = "thresholds",
    allow_replayed: bool = False,
    max_conversations_worse: int | None = None,
) -> Comparison:
    return compare(
        load(base),
        load(new),
        base_file=str(base),
        new_file=str(new),
        allow_replayed=allow_replayed,
        max_pass_rate_drop=max_pass_rate_drop,
        max_score_drop=max_score_drop,
        max_errored_rise=max_errored_rise,
        alpha=alpha,
        gate=gate,
        max_conversations_worse=max_conversations_worse,
    )


def _delta(base: Any, new: Any) -> Delta:
    b = float(base) if isinstance(base, (int, float)) else None
    n = float(new) if isinstance(new, (int, float)) else None
    return Delta(base=b, new=n, delta=None if b is None or n is None else round(n - b, 8))


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _points(difference: float) -> str:
    """A difference of two pass rates, in percentage points (39% → 22% is 16.7 points, not
    16.7%: that would be a relative change)."""
    return f"{difference * 100:.1f} points"


def _allowed(drop: float) -> str:
    """A ``--max-pass-rate-drop`` as given and in points: ``0.05 (5 points)``."""
    return f"{drop:g} ({drop * 100:g} points)" if drop else f"{drop:g}"
