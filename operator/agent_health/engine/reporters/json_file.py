"""The versioned JSON report (docs/writing-tests.md)."""

from __future__ import annotations

from pathlib import Path

from agent_health.engine.report import RunReport


def write(path: Path, report: RunReport) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)  # readers never see half a report
