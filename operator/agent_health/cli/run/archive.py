"""The run and its history: opened beside the run, written after it, one line said.

:func:`warm` says where the history is; :meth:`Pending.start` opens it in a thread as the run
starts (SQLAlchemy's import, a first run's schema, the tests written ahead are paid while the
tests run, not before or after them);
:func:`keep` records the finished run — interrupted or stopped by a budget too, marked so —
in one transaction and says in one line where it went and, from the second run of an
agent, how its pass rate moved. :func:`gate` compares the run with ``--baseline`` from the
history; :func:`compared` does so for information (the markdown summary's comparison with
the agent's last run), and :func:`summary` gathers what the markdown summary adds from the
history. The history is never why a run fails: whatever goes wrong is one warning line (or
one line of the summary), and the run's reports and exit code stay what they were.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_health.cli import common

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health import history
    from agent_health.engine import comparing, reporters, reports
    from agent_health.history import location, trends

TREND_RUNS = 5
"""Pass rates shown on the history line: the agent's newest runs, oldest first."""
FLAKY_RUNS = 50
"""The window the markdown summary's flaky tests are found over (``flaky``'s default)."""


class Pending:
    """The history made ready in a thread beside the run (:meth:`start`, as its first tests
    start): SQLAlchemy and its modules imported, the history opened, the run's tests written
    and the run it will be compared with read, while the run's tests wait on their agents.
    The thread's work fills the event loop's waits; the loop takes the interpreter back
    within the command's short switch interval (``cli.app``) each time an answer wakes it.
    (Imported while the suite loaded instead, the import added its whole time to the run's:
    loading waits on nothing; begun before the preflight, it took the interpreter from the
    preflight and the HTTP client's import, which every test waits for.)"""

    def __init__(self, where: location.Location) -> None:
        self.where = where
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="history")
        self._opened: concurrent.futures.Future[history.History] | None = None
        self._known: concurrent.futures.Future[Any] | None = None

    def start(self, cases: Sequence[Any], line: Upcoming | None = None) -> None:
        """Open the history and write the run's ``cases`` ahead, after the import; with
        ``line`` (whose run it is), also read the run it will be compared with. Once: a
        second call does nothing."""
        if self._opened is not None:
            return
        self._pool.submit(_import)
        self._opened = self._pool.submit(_open, self.where)
        self._known = self._pool.submit(_prepare, self._opened, list(cases), line)
        self._pool.shutdown(wait=False)

    def opened(self) -> history.History:
        """The opened history (raises what opening it raised)."""
        if self._opened is None:
            raise RuntimeError("the history was never opened: Pending.start() first")
        return self._opened.result()

    def known(self) -> Any:
        """The run's tests as written while it ran (``None`` when that could not be done:
        recording looks them up itself)."""
        try:
            return self._known.result() if self._known is not None else None
        except Exception:  # said, if it matters, by the recording that follows
            return None

    def close(self) -> None:
        """Close the history once the work ahead is done (a run that stopped early records
        nothing; one that never started opened nothing)."""
        if self._known is None or self._opened is None:
            self._pool.shutdown(wait=False)
            return
        opened = self._opened
        self._known.add_done_callback(lambda _done: _close(opened))


def _import() -> None:
    """SQLAlchemy and the history's modules, imported (nothing is opened or made)."""
    from agent_health.history import database  # noqa: F401


def _open(where: location.Location) -> history.History:
    from agent_health import history

    return history.open_history(where)


@dataclass(frozen=True)
class Upcoming:
    """Whose run it is, for reading ahead the run it will be compared with: the agent's
    name as the report gives it (``None``: no agent), the suite's name (a future: found in
    git beside the run) and when the run started."""

    agent: str | None
    suite: concurrent.futures.Future[str]
    started_at: datetime


def _prepare(
    opened: concurrent.futures.Future[history.History], cases: list[Any], line: Upcoming | None
) -> Any:
    """The run's tests written ahead (each as the report will hold it) and the run it will
    be compared with read, while it runs; what recording it needs imported."""
    from agent_health import history
    from agent_health.engine import statistics

    statistics.pair_runs  # noqa: B018  # loaded here: the trend at its end is worked out with it
    ahead = None
    if line is not None:
        ahead = history.Upcoming(line.agent, line.suite.result(), line.started_at)
    tests = [
        {
            "id": case.id,
            "name": case.title,
            "file": case.file,
            "line": case.line,
            "labels": list(case.labels),
            "content_hash": case.content_hash,
        }
        for case in cases
    ]
    return opened.result().prepare(tests, ahead)


def _close(done: concurrent.futures.Future[Any]) -> None:
    if done.exception() is None:
        done.result().close()


def warm(where: location.Location | None) -> Pending | None:
    """The run's history, to open as the run starts (``None`` when there is no history)."""
    return Pending(where) if where is not None else None


def keep(
    pending: Pending,
    report: reports.RunReport,
    *,
    code: int,
    report_path: Path | None,
    console: Console,
    err_console: Console,
    ledger_whole: bool | None = None,
) -> None:
    """Record the run; one line on the console, or one warning line when it could not be.
    ``ledger_whole``: whether the run's ledger holds every record sealed
    (:attr:`~agent_health.engine.recording.LocalLedger.whole`). The history stays open
    (:meth:`Pending.close` closes it)."""
    from agent_health import history

    try:
        opened = pending.opened()
        ci = history.ci_from_env()
        context = history.RunContext(
            source="ci" if ci is not None else "local",
            suite=_suite(report),
            exit_code=code,
            report_path=str(report_path.resolve()) if report_path is not None else None,
            ci=ci,
            ledger_verified=ledger_whole,
        )
        recorded = opened.record(report, context, pending.known())
        line = _line(opened, recorded, context.suite)
    except history.HistoryError as err:
        err_console.print(f"warning: the run was not recorded in the history: {err}", markup=False)
        return
    except Exception as err:  # a bug of ours must not change the run's outcome either
        err_console.print(
            f"warning: the run was not recorded in the history ({type(err).__name__}: {err})",
            markup=False,
        )
        return
    console.print(line, markup=False)


@dataclass(frozen=True)
class Compared:
    """A run compared with a baseline from the history, or why it was not."""

    which: str
    run: history.Run | None = None
    result: comparing.Comparison | None = None
    why_not: str | None = None


MATRIX_NOT_COMPARED = "--baseline compares one agent's run; this agent matrix was not compared"


def compared(
    pending: Pending, report: reports.RunReport, which: str, gates: dict[str, Any]
) -> Compared:
    """The run compared with the baseline ``which`` from the history (never with itself);
    what went wrong, in one line, when it could not be."""
    from agent_health import history
    from agent_health.engine import comparing
    from agent_health.history import ingest

    data = ingest.report_data(report)
    if (data.get("matrix") or {}).get("agents"):
        return Compared(which, why_not=MATRIX_NOT_COMPARED)
    try:
        run, result = pending.opened().compare(
            which,
            data,
            agent=_agent(report),
            suite=_suite(report),
            new_file="this run",
            **gates,
        )
    except (history.HistoryError, comparing.CompareError) as err:
        return Compared(which, why_not=str(err))
    except Exception as err:  # a bug of ours must not change the run's outcome either
        return Compared(which, why_not=f"{type(err).__name__}: {err}")
    return Compared(which, run=run, result=result)


def gate(
    pending: Pending,
    report: reports.RunReport,
    which: str,
    gates: dict[str, Any],
    *,
    code: int,
    consoles: common.Consoles,
) -> tuple[int, Compared]:
    """``run --baseline``: compare the run with the baseline from the history, print what
    ``compare`` prints; the exit code (1 on a regression) and the comparison. A baseline
    that cannot be had is one warning line: the run's own exit code stands."""
    found = compared(pending, report, which, gates)
    if found.result is None or found.run is None:
        said = (
            found.why_not
            if found.why_not == MATRIX_NOT_COMPARED
            else (f"no baseline comparison: {found.why_not}")
        )
        consoles.err.print(f"warning: {said}", markup=False)
        return code, found
    consoles.out.print(common.baseline_line(found.run, which), markup=False)
    common.show_comparison(found.result, consoles, as_json=False)
    if found.result.regressed and code in (
        common.EXIT_OK,
        common.EXIT_ERRORED,
        common.EXIT_BUDGET,
    ):
        return common.EXIT_FAILED, found
    return code, found


def summary(
    pending: Pending | None, report: reports.RunReport, found: Compared | None, *, gating: bool
) -> reporters.MarkdownContext:
    """What the markdown summary adds from the history: the comparison (``found``), the flaky
    tests of the run's agent over the last runs (this one included), where the history is.
    Whatever cannot be had is a line of the summary, never an error."""
    from agent_health import history
    from agent_health.engine import reporters

    if pending is None:
        return reporters.MarkdownContext(
            comparison_note="No history for this run (--no-history or --replay): no baseline "
            "to compare with, no flaky tests to name.",
        )
    comparison = found.result if found is not None else None
    baseline = None
    if found is not None and found.run is not None:
        baseline = common.baseline_line(found.run, found.which).removeprefix("baseline: ")
    note = None
    if found is not None and found.result is None and found.why_not != MATRIX_NOT_COMPARED:
        note = f"No comparison with the history's {found.which} run: {found.why_not}"
    flaky: list[reporters.FlakyTest] | None = None
    flaky_note = None
    try:
        flaky = [
            reporters.FlakyTest(
                id=f.id,
                title=f.title,
                flips=f.flips,
                runs=f.runs,
                failure_rate=f.failure_rate,
                low=f.failure_rate_interval.low,
                high=f.failure_rate_interval.high,
                agent=f.agent.label if f.agent is not None else None,
            )
            for f in pending.opened().flaky(runs=FLAKY_RUNS, agent=_agent(report))
        ]
    except history.HistoryError as err:
        flaky_note = f"The history could not be read for flaky tests: {err}"
    except Exception as err:  # a bug of ours must not change the run's outcome either
        flaky_note = f"The history could not be read for flaky tests ({type(err).__name__})"
    return reporters.MarkdownContext(
        history=shown_path(pending.where),
        baseline=baseline,
        comparison=comparison,
        gating=gating,
        comparison_note=note,
        flaky=flaky,
        flaky_runs=FLAKY_RUNS,
        flaky_note=flaky_note,
    )


def _agent(report: reports.RunReport) -> str | None:
    provenance = report.provenance
    return provenance.agent.name if provenance is not None and provenance.agent else None


def _suite(report: reports.RunReport) -> str | None:
    provenance = report.provenance
    return provenance.suite.name if provenance is not None and provenance.suite else None


def _line(opened: history.History, recorded: list[history.Recorded], suite: str | None) -> str:
    """``history: run ID recorded in PATH; triage over its last 2 runs: pass rate 80% →
    100% ▲`` (one part per agent of a matrix)."""
    from agent_health.engine import visible

    where = shown_path(opened.location)
    uids = ", ".join(dict.fromkeys(r.uid.rsplit("/", 1)[0] for r in recorded))
    again = "" if all(r.new for r in recorded) else " (already there)"
    parts = []
    for one in recorded:
        # What the line shows of each run, not a whole history.Run of it (built, it was a
        # third of what the history cost a one-test run beyond SQLAlchemy's import).
        newest = (
            opened.rates(agent=one.agent, suite=suite, limit=TREND_RUNS)
            if one.agent
            else [r for r in opened.rates(suite=suite, limit=TREND_RUNS) if r.agentless]
        )
        parts.append(_trend(one.agent, newest))
    said = f"history: run {uids} recorded{again} in {where}; " + "; ".join(parts)
    return visible.line(said)


def _trend(agent: str | None, newest: list[trends.Rate]) -> str:
    name = agent or "the suite"
    if len(newest) < 2:
        return f"{name}: its first run here (the next one shows a trend: agent-health history)"
    rates = " → ".join(_pct(run.pass_rate) for run in reversed(newest))
    mark = ""
    last = newest[0]
    if last.mark is not None:
        mark = " ▲" if last.mark == "better" else " ▼"
        mark += f" ({last.mark}, {last.method} p = {last.p_value:.2g})"
    return f"{name} over its last {len(newest)} runs: pass rate {rates}{mark}"


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def shown_path(where: location.Location) -> str:
    """A SQLite history's file relative to here when it is below, else its URL as shown."""
    if where.path is None:
        return where.shown
    try:
        return str(where.path.relative_to(Path.cwd()))
    except ValueError:
        return str(where.path)
