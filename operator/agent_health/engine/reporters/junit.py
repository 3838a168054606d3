"""JUnit XML, the format CI systems read (one testsuite per file).

A flaky test (passed on a retry) is a passing testcase with one ``flakyFailure`` or
``flakyError`` per earlier try, as Maven Surefire writes them; what a body printed is its
``system-out`` / ``system-err``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_health.engine.report import RunReport


def _case_name(test: dict[str, Any]) -> str:
    name = str(test["name"])
    return f"{name} [repeat {test['repeat']}]" if test["repeat"] else name


def _failed_signals(test: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in test["signals"] if s["role"] == "gate" and s["passed"] is False]


def render(report: RunReport) -> bytes:
    s = report.summary
    root = ET.Element(
        "testsuites",
        name="agent-health",
        tests=str(s.total),
        failures=str(s.failed),
        errors=str(s.errored),
        skipped=str(s.skipped),
        time=f"{s.duration_ms / 1000:.3f}",
    )
    by_file: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for test in report.tests:
        by_file[test["file"]].append(test)
    for file, tests in by_file.items():
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file,
            tests=str(len(tests)),
            failures=str(sum(t["status"] == "failed" for t in tests)),
            errors=str(sum(t["status"] == "errored" for t in tests)),
            skipped=str(sum(t["status"] == "skipped" for t in tests)),
            time=f"{sum(t['duration_ms'] for t in tests) / 1000:.3f}",
        )
        for test in tests:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_case_name(test),
                classname=file,
                file=file,
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
                    f"{f['name']}: {json.dumps(f['evidence'] or f['reasoning'])}" for f in failed
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
                        ET.SubElement(
                            case, kind, message=attempt["reason"] or attempt["status"]
                        ).text = attempt["reason"]
            props = ET.SubElement(case, "properties")
            for key in ("run_id", "score"):
                ET.SubElement(props, "property", name=key, value=str(test[key]))
            if test.get("cause"):
                ET.SubElement(props, "property", name="cause", value=str(test["cause"]))
            for label in test["labels"]:
                ET.SubElement(props, "property", name="label", value=label)
            if test["status"] == "flaky":
                ET.SubElement(props, "property", name="flaky", value="true")
            lines = [
                f"[{sig['role']}] {sig['name']}: "
                f"{'pass' if sig['passed'] else 'skip' if sig['passed'] is None else 'FAIL'}"
                for sig in test["signals"]
            ]
            if test.get("stdout"):
                lines.append(test["stdout"])
            if lines:
                ET.SubElement(case, "system-out").text = "\n".join(lines)
            if test.get("stderr"):
                ET.SubElement(case, "system-err").text = test["stderr"]
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data


def write(path: Path, report: RunReport) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(render(report))
    tmp.replace(path)
