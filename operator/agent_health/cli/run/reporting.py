"""What the ``run`` handler adds to the report after the session, and the ledger line it
prints last: each result's ledger cell, the agents the run called, the judge's usage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_health.cli import common

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health import connectors, judging
    from agent_health.engine import recording, reports, running
    from agent_health.sdk import config as config_mod
    from agent_health.sdk.results import TestResult


def print_ledger(recorded: recording.LocalLedger, console: Console, err_console: Console) -> None:
    from agent_health.engine import visible

    for failure in recorded.failures:
        err_console.print("ledger error: " + visible.line(str(failure)), markup=False)
    if not recorded.cells and not recorded.refused:
        console.print(
            f"ledger: {recorded.url} (0 cells): no test called agent.run(), nothing recorded",
            markup=False,
        )
        return
    lost = f", {len(recorded.refused)} not recorded" if recorded.refused else ""
    # The key sits beside the ledger, where `ledger verify` looks for it: the command needs
    # no --key-file, and runs as printed from the directory the run was started in.
    console.print(
        f"ledger: {recorded.url} ({len(recorded.cells)} cells{lost}, key {recorded.key_file}); "
        f"check it with: {common.invocation()} ledger verify {recorded.url}",
        markup=False,
    )


def agent_info(
    config: config_mod.Config, chosen: str | None, spec: connectors.ConnectorSpec
) -> reports.AgentInfo:
    from agent_health.engine import reports

    name = config.agent_name(chosen)
    return reports.AgentInfo.model_construct(
        name=reports.redact_argv([name])[0] if name else None,
        connector=spec.connector,
        url=reports.redact_url(spec.url),
        command=list(spec.command) if spec.command else None,
    )


def with_cells(
    results: list[TestResult], recorded: recording.LocalLedger | None
) -> list[TestResult]:
    """Each result with the name of the ledger cell that recorded it (when one did), in
    place: copies kept beside their originals took 31 MiB of a 20,000-test run's 464."""
    if recorded is None:
        return results
    from agent_health.engine import recording

    cells = set(recorded.cells)
    names = recorded.names
    for i, r in enumerate(results):
        cell = names.get((r.id, r.repeat, r.agent)) or recording.cell_name(
            r.id, r.repeat, agent=r.agent
        )
        if cell in cells:
            results[i] = r.model_copy(update={"ledger_cell": cell})
        elif cell in recorded.refused:  # a result nothing evidences is never a pass
            results[i] = recording.unrecorded(r, recorded.refused[cell])
    return results


def judge_usage(
    outcome: running.Outcome,
    judge_config: config_mod.JudgeConfig | None,
    asked: judging.Asked | None,
) -> Any:
    """The judge's calls and tokens, when any judge() call ran or insights asked it."""
    judged = any(s.kind == "judge" for r in outcome.results for s in r.signals)
    if not judged and not (asked and asked.calls):
        return None
    from agent_health import judging

    return judging.summarize(outcome.results, judge_config, asked)
