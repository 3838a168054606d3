"""The run report and what it holds: every TestResult and the aggregates (:mod:`.report`),
the summary's breakdowns only some runs have (:mod:`.breakdowns`), one test's entry
(:mod:`.entries`, within the caps of :mod:`.bounds`), where a conversation went wrong
(:mod:`.offtrack`), what ran (:mod:`.provenance`), per-test insights and their run-level
rollup (:mod:`.insights`, :mod:`.rollup`), and a saved report read back checked
(:mod:`.savedreport`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.reports.bounds import Bounded
    from agent_health.engine.reports.breakdowns import UnpricedModel
    from agent_health.engine.reports.entries import (
        plain,
        received,
        repeat_label,
        with_metric_signals,
    )
    from agent_health.engine.reports.entryshape import check as check_entry
    from agent_health.engine.reports.insights import LLM as InsightsLLM
    from agent_health.engine.reports.insights import explain
    from agent_health.engine.reports.insights import tools_for as insights_tools
    from agent_health.engine.reports.offtrack import ENDED_BADLY, failing_turn
    from agent_health.engine.reports.offtrack import find as find_offtrack
    from agent_health.engine.reports.offtrack import said as offtrack_said
    from agent_health.engine.reports.offtrack import summary as conversation_summary
    from agent_health.engine.reports.provenance import (
        AgentInfo,
        JudgeInfo,
        Provenance,
        Selection,
        SuiteInfo,
        git_state,
        redact_argv,
        redact_url,
        suite_name,
    )
    from agent_health.engine.reports.provenance import collect as collect_provenance
    from agent_health.engine.reports.provenance import run_id as new_run_id
    from agent_health.engine.reports.provenance import version as agent_health_version
    from agent_health.engine.reports.report import (
        LEGEND,
        MAX_REPEATS,
        RunReport,
        Summary,
        pass_rate,
    )
    from agent_health.engine.reports.rollup import Rollup
    from agent_health.engine.reports.rollup import synthesise as synthesise_rollup
    from agent_health.engine.reports.savedreport import ReportFileError
    from agent_health.engine.reports.savedreport import read as read_report
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "Bounded": "bounds",
            "check_entry": "entryshape:check",
            "plain": "entries",
            "received": "entries",
            "repeat_label": "entries",
            "with_metric_signals": "entries",
            "InsightsLLM": "insights:LLM",
            "explain": "insights",
            "insights_tools": "insights:tools_for",
            "ENDED_BADLY": "offtrack",
            "conversation_summary": "offtrack:summary",
            "failing_turn": "offtrack",
            "find_offtrack": "offtrack:find",
            "offtrack_said": "offtrack:said",
            "AgentInfo": "provenance",
            "JudgeInfo": "provenance",
            "Provenance": "provenance",
            "Selection": "provenance",
            "SuiteInfo": "provenance",
            "agent_health_version": "provenance:version",
            "collect_provenance": "provenance:collect",
            "new_run_id": "provenance:run_id",
            "git_state": "provenance",
            "redact_argv": "provenance",
            "redact_url": "provenance",
            "suite_name": "provenance",
            "LEGEND": "report",
            "RunReport": "report",
            "Summary": "report",
            "UnpricedModel": "breakdowns",
            "pass_rate": "report",
            "MAX_REPEATS": "report",
            "Rollup": "rollup",
            "synthesise_rollup": "rollup:synthesise",
            "ReportFileError": "savedreport",
            "read_report": "savedreport:read",
        },
    )

__all__ = [
    "ENDED_BADLY",
    "LEGEND",
    "MAX_REPEATS",
    "AgentInfo",
    "Bounded",
    "InsightsLLM",
    "JudgeInfo",
    "Provenance",
    "ReportFileError",
    "Rollup",
    "RunReport",
    "Selection",
    "SuiteInfo",
    "Summary",
    "UnpricedModel",
    "agent_health_version",
    "check_entry",
    "collect_provenance",
    "conversation_summary",
    "explain",
    "failing_turn",
    "find_offtrack",
    "git_state",
    "insights_tools",
    "new_run_id",
    "offtrack_said",
    "pass_rate",
    "plain",
    "read_report",
    "received",
    "redact_argv",
    "redact_url",
    "repeat_label",
    "suite_name",
    "synthesise_rollup",
    "with_metric_signals",
]
