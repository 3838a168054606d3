"""JUnit XML, the format CI systems read (one testsuite per file).

Honest counts: a file that failed to load is an ``<error>`` testcase (CI shows red, as the
run's exit code 2 says), every repeat is its own testcase named with its ``[2/3]`` label,
and each derived metric is a ``metric.NAME`` property with its value.

A flaky test (passed on a retry) is a passing testcase with one ``flakyFailure`` or
``flakyError`` per earlier try, as Maven Surefire writes them; what a body printed is its
``system-out`` / ``system-err``. A replayed result (``--replay``: the agent was not called)
has the property ``replayed=true``, and its suites ``replayed_from`` the recording.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_health.engine import entries
from agent_health.engine.report import RunReport

LOAD_ERROR = "load error"


def _failed_signals(test: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in test["signals"] if s["role"] == "gate" and s["passed"] is False]


def _load_error_file(text: str) -> str:
    """The file a load error names (``FILE[:LINE]: message``)."""
    where = text.partition(": ")[0]
    return where.rsplit(":", 1)[0] if where.rsplit(":", 1)[-1].isdigit() else where


def _at(sig: dict[str, Any]) -> str:
    """`` (file:line)`` where the check was made (a case file's: the case), when known."""
    return f" ({sig['location']})" if sig.get("location") else ""


def _signal_line(sig: dict[str, Any]) -> str:
    if sig["kind"] == "metric":
        value = (sig["evidence"] or {}).get("value")
        return f"[metric] {sig['name']} = {json.dumps(value, default=str)}"
    verdict = "pass" if sig["passed"] else "skip" if sig["passed"] is None else "FAIL"
    score = f" (score {sig['score']:g})" if isinstance(sig["score"], (int, float)) else ""
    return f"[{sig['role']}] {sig['name']}: {verdict}{score}"


def _case(suite: ET.Element, test: dict[str, Any], repeats: int) -> None:
    label = entries.repeat_label(test["repeat"], repeats)
    agent = f" [{test['agent']}]" if test.get("agent") else ""  # an agent matrix
    case = ET.SubElement(
        suite,
        "testcase",
        name=(f"{test['name']} {label}" if label else str(test["name"])) + agent,
        classname=test["file"],
        file=test["file"],
        line=str(test["line"]),
        time=f"{test['duration_ms'] / 1000:.3f}",
    )
    if test["status"] == "failed":
        failed = _failed_signals(test)
        node = ET.SubElement(
            case,
            "failure",
            message="; ".join(f["name"] for f in failed) or "failed",
            type="AgentHealthFailure",
        )
        node.text = "\n".join(
            f"{f['name']}{_at(f)}: {json.dumps(f['evidence'] or f['reasoning'])}" for f in failed
        )
    elif test["status"] == "errored":
        cause = test.get("cause") or "test"
        node = ET.SubElement(
            case,
            "error",
            message=f"{cause} error: {test['error'] or 'errored'}",
            type=f"AgentHealthError.{cause}",
        )
        node.text = test["error"]
    elif test["status"] == "skipped":
        ET.SubElement(case, "skipped", message=test["skip_reason"] or "skipped")
    elif test["status"] == "flaky":
        for attempt in test.get("attempts") or []:
            if attempt["status"] in ("failed", "errored"):
                kind = "flakyFailure" if attempt["status"] == "failed" else "flakyError"
                node = ET.SubElement(case, kind, message=attempt["reason"] or attempt["status"])
                node.text = attempt["reason"]
    props = ET.SubElement(case, "properties")
    for key in ("run_id", "score"):
        ET.SubElement(props, "property", name=key, value=str(test[key]))
    if test.get("cause"):
        ET.SubElement(props, "property", name="cause", value=str(test["cause"]))
    if test.get("ledger_cell"):
        ET.SubElement(props, "property", name="ledger_cell", value=test["ledger_cell"])
    for label_name in test["labels"]:
        ET.SubElement(props, "property", name="label", value=label_name)
    for key, value in (test.get("case") or {}).items():  # a case file's: id, expectedPPL, ...
        if isinstance(value, str | int | float | bool):
            ET.SubElement(props, "property", name=f"case.{key}", value=str(value))
    for key, value in (test["metrics"] or {}).items():
        shown = value if isinstance(value, (str, int, float)) else json.dumps(value)
        ET.SubElement(props, "property", name=f"metric.{key}", value=str(shown))
    if test["status"] == "flaky":
        ET.SubElement(props, "property", name="flaky", value="true")
    if test.get("replayed"):
        ET.SubElement(props, "property", name="replayed", value="true")
    lines = [_signal_line(sig) for sig in entries.with_metric_signals(test)["signals"]]
    if test.get("stdout"):
        lines.append(test["stdout"])
    if lines:
        ET.SubElement(case, "system-out").text = "\n".join(lines)
    if test.get("stderr"):
        ET.SubElement(case, "system-err").text = test["stderr"]


def render(report: RunReport) -> bytes:
    s = report.summary
    load_errors = list(s.load_errors)
    root = ET.Element(
        "testsuites",
        name="agent-health",
        tests=str(s.total + len(load_errors)),
        failures=str(s.failed),
        errors=str(s.errored + len(load_errors)),
        skipped=str(s.skipped),
        time=f"{s.duration_ms / 1000:.3f}",
    )
    by_file: dict[str, list[dict[str, Any]]] = defaultdict(list)
    errors_by_file: dict[str, list[str]] = defaultdict(list)
    for text in load_errors:
        errors_by_file[_load_error_file(text)].append(text)
    for test in report.tests:
        by_file[test["file"]].append(test)
    for file in [*by_file, *(f for f in errors_by_file if f not in by_file)]:
        tests, errors = by_file.get(file, []), errors_by_file.get(file, [])
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file,
            tests=str(len(tests) + len(errors)),
            failures=str(sum(t["status"] == "failed" for t in tests)),
            errors=str(sum(t["status"] == "errored" for t in tests) + len(errors)),
            skipped=str(sum(t["status"] == "skipped" for t in tests)),
            time=f"{sum(t['duration_ms'] for t in tests) / 1000:.3f}",
        )
        replayed = report.provenance.replay if report.provenance else None
        if replayed:
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="replayed_from", value=replayed)
        for text in errors:
            name = "hook error" if " hook " in text else LOAD_ERROR
            case = ET.SubElement(suite, "testcase", name=name, classname=file, file=file)
            node = ET.SubElement(case, "error", message=text, type="AgentHealthLoadError")
            node.text = text
        for test in tests:
            _case(suite, test, s.repeats)
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data


def write(path: Path, report: RunReport) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(render(report))
    tmp.replace(path)
