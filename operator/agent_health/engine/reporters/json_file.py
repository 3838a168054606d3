"""The versioned JSON report (docs/writing-tests.md): written by runs, read back by ``report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core

from agent_health.engine import reports

ReportFileError = reports.ReportFileError
"""A JSON report that cannot be read: missing, not JSON, another version, bad fields."""


def write(path: Path, report: reports.RunReport) -> None:
    """``report`` as ``model_dump_json(indent=2)`` writes it, a test entry at a time: a large
    run's report is never one string in memory (for 2,000 tests it was the largest thing
    the run made)."""
    tmp = path.with_name(path.name + ".tmp")
    fields = report.model_dump(mode="json", exclude={"tests"})
    try:
        with tmp.open("w", encoding="utf-8") as out:
            out.write("{")
            for i, name in enumerate(reports.RunReport.model_fields):
                out.write(f'{"," if i else ""}\n  "{name}": ')
                if name != "tests":
                    out.write(_indented(fields[name]))
                    continue
                out.write("[" if report.tests else "[]")
                for j, entry in enumerate(report.tests):
                    out.write(f"{',' if j else ''}\n    ")
                    out.write(_indented(reports.with_metric_signals(entry), "    "))
                if report.tests:
                    out.write("\n  ]")
            out.write("\n}\n")
    except BaseException:
        tmp.unlink(missing_ok=True)  # half a report is no report
        raise
    tmp.replace(path)  # readers never see half a report


def _indented(value: Any, margin: str = "  ") -> str:
    """``value`` as pydantic writes JSON (indent 2), each line after the first at ``margin``.

    A lone surrogate (an agent may send ``"\\ud800"`` in its JSON) has no UTF-8 and pydantic
    refuses it: that value is written by ``json``, which spells it ``\\ud800`` as the agent
    did (and every other character outside ASCII as its escape), so the text reads back
    unchanged and the rest of the report is still written.
    """
    try:
        text = pydantic_core.to_json(value, indent=2, inf_nan_mode="null").decode("utf-8")
    except ValueError:
        text = json.dumps(reports.plain(value), indent=2)
    return text.replace("\n", "\n" + margin)


def read(path: Path) -> reports.RunReport:
    """A saved JSON report of any readable version (its ``version`` is kept as written):
    the fields readers rely on checked first (:mod:`..savedreport`), then the whole file
    against the report's model."""
    data = reports.read_report(path)
    tests = data["tests"]
    where: tuple[Any, ...] = ()
    try:
        checked = []
        for i, entry in enumerate(tests):
            where = ("tests", i)
            checked.append(reports.check_entry(entry))
        where = ()
        return reports.RunReport.model_validate({**data, "tests": checked})
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = (*where, *first["loc"])
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        field = field or "the document"
        raise ReportFileError(f"{path}: {field}: {first['msg']}") from err
