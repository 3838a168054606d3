"""JUnit XML, the format CI systems read (one testsuite per file).

Honest counts: a file that failed to load is an ``<error>`` testcase (CI shows red, as the
run's exit code 2 says), the tests a run never started (interrupted, ``-x``) are one testcase
of a ``not run`` suite (an ``<error>`` when interrupted, else ``<skipped>``, saying why),
every repeat is its own testcase named with its ``[2/3]`` label, and each derived metric is
a ``metric.NAME`` property with its value.

A flaky test (passed on a retry) is a passing testcase with one ``flakyFailure`` or
``flakyError`` per earlier try, as Maven Surefire writes them; what a body printed is its
``system-out`` / ``system-err``, and what a timed-out agent had sent is in ``system-out``.
A conversation has the properties ``turns`` and ``ended`` (its reason), and its
``system-out`` reads it turn by turn: ``[turn 2] user: ...``, the tool calls and results of
that turn, ``[turn 2] agent: ...``.
A replayed result (``--replay``: the agent was not called) has the property
``replayed=true``, and its suites ``replayed_from`` the recording and ``replay_verified``
(``false``: no key checked it).

The file is well-formed XML 1.0 whatever an agent sends: every text and attribute goes
through :func:`agent_health.engine.visible.block`, which writes out the characters XML
forbids (NUL, ESC, ...) as escapes (``\\x1b``). Its elements follow the schema in
``tests/data/junit.xsd`` (the Jenkins xUnit plugin's ``junit-10.xsd`` shape), which the tests
validate every JUnit file against.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from agent_health import statuses
from agent_health.engine import reports, visible

LOAD_ERROR = "load error"
QUARANTINED = ("failed", "errored", "flaky")
"""Outcomes of a quarantined test that JUnit shows as skipped (with why), never as failing."""
NOT_RUN = "not run"
"""The suite of the one testcase that stands for the tests a run never started."""


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
    """One testcase, its children in the schema's order: properties, the outcome, then
    what was printed (``tests/data/junit.xsd``)."""
    label = reports.repeat_label(test["repeat"], repeats)
    agent = f" [{test['agent']}]" if test.get("agent") else ""  # an agent matrix
    case = _add(
        suite,
        "testcase",
        name=(f"{test['name']} {label}" if label else str(test["name"])) + agent,
        classname=test["file"],
        file=test["file"],
        **({"line": str(test["line"])} if test.get("line") is not None else {}),
        time=f"{test['duration_ms'] / 1000:.3f}",
    )
    _properties(case, test)
    if test.get("quarantined") and test["status"] in QUARANTINED:
        # Shown, not gating: a CI system reading JUnit must not fail the build on it.
        reason = test.get("error") or "; ".join(f["name"] for f in _failed_signals(test))
        _add(
            case,
            "skipped",
            message=f"quarantined ({test['status']}): {reason or test['status']}",
        )
    elif test["status"] == "failed":
        failed = _failed_signals(test)
        # An error after the failed checks (the body raised, the agent failed) is the test's
        # too: a failure, with that error said after the checks it came after.
        then = [f"then: {test['error']}"] if test.get("error") else []
        node = _add(
            case,
            "failure",
            message="; ".join([*(f["name"] for f in failed), *then]) or "failed",
            type="AgentHealthFailure",
        )
        node.text = _shown(
            "\n".join(
                [
                    *(
                        f"{f['name']}{_at(f)}: {json.dumps(f['evidence'] or f['reasoning'])}"
                        for f in failed
                    ),
                    *then,
                ]
            )
        )
    elif test["status"] == "errored":
        cause = test.get("cause") or "test"
        node = _add(
            case,
            "error",
            message=f"{cause} error: {test['error'] or 'errored'}",
            type=f"AgentHealthError.{cause}",
        )
        node.text = _shown(test["error"])
    elif test["status"] == "skipped":
        _add(case, "skipped", message=test["skip_reason"] or "skipped")
    elif test["status"] == "flaky":
        # As Maven Surefire writes a test that passed on a rerun: one element per earlier
        # try, its reason in ``stackTrace``.
        for attempt in test.get("attempts") or []:
            if attempt["status"] in statuses.NOT_PASSED:
                failed_try = attempt["status"] == "failed"
                node = _add(
                    case,
                    "flakyFailure" if failed_try else "flakyError",
                    message=attempt["reason"] or attempt["status"],
                    type="AgentHealthFailure"
                    if failed_try
                    else f"AgentHealthError.{attempt.get('cause') or 'test'}",
                )
                if attempt["reason"]:
                    _add(node, "stackTrace").text = _shown(attempt["reason"])
    lines = [_signal_line(sig) for sig in reports.with_metric_signals(test)["signals"]]
    lines += _conversation(test)
    partial = test.get("partial")
    if partial:  # what a timed-out agent had sent (escaped like every text here)
        lines.append(f"[partial] {reports.received(partial)}:")
        if partial.get("text"):
            lines.append(partial["text"])
    if test.get("stdout"):
        lines.append(test["stdout"])
    if lines:
        _add(case, "system-out").text = _shown("\n".join(lines))
    if test.get("stderr"):
        _add(case, "system-err").text = _shown(test["stderr"])


def _conversation(test: dict[str, Any]) -> list[str]:
    """A conversation as ``system-out`` lines: its end, then turn by turn the user's
    message, the tool calls made answering it and the agent's answer."""
    turns = test.get("turns") or []
    if not turns:
        return []
    ended = test.get("ended") or {}
    detail = f" ({ended['detail']})" if ended.get("detail") else ""
    lines = [f"[conversation] {reports.conversation_summary(test)}{detail}"]
    wrong = reports.find_offtrack(test)
    if wrong is not None:
        lines.append(f"[conversation] {reports.offtrack_said(wrong)}")
    steps = test.get("trajectory") or []
    for turn in turns:
        number = turn.get("number")
        lines.append(f"[turn {number}] user: {turn.get('user', '')}")
        for step in steps:
            if step.get("turn") == number and step.get("type") in ("tool_call", "tool_result"):
                lines.append(f"[turn {number}] {_step_line(step)}")
        lines.append(f"[turn {number}] agent: {turn.get('output', '')}")
    return lines


def _step_line(step: dict[str, Any]) -> str:
    name = step.get("tool_name") or "?"
    if step["type"] == "tool_call":
        return f"tool call {name} {json.dumps(step.get('tool_args') or {}, default=str)}"
    status = step.get("status") or "ok"
    return f"tool result {name} ({status}): {json.dumps(step.get('tool_output'), default=str)}"


def _properties(case: ET.Element, test: dict[str, Any]) -> None:
    """What a testcase is besides its outcome: run id, score (only when it has one), cause,
    ledger cell, labels, a case file's metadata, each derived metric, flaky, replayed."""
    found: list[tuple[str, str]] = []
    for key in ("run_id", "score", "cause", "ledger_cell"):
        if test.get(key) is not None:
            found.append((key, str(test[key])))
    found += [("label", label_name) for label_name in test["labels"]]
    for key, value in (test.get("case") or {}).items():  # a case file's: id, expectedPPL, ...
        if isinstance(value, str | int | float | bool):
            found.append((f"case.{key}", str(value)))
    for key, value in (test["metrics"] or {}).items():
        plain = isinstance(value, (str, int, float)) and not isinstance(value, bool)
        found.append((f"metric.{key}", str(value) if plain else json.dumps(value)))
    if test.get("turns"):  # a conversation: how long it went and why it ended
        found.append(("turns", str(len(test["turns"]))))
        ended = test.get("ended") or {}
        if ended.get("reason"):
            found.append(("ended", str(ended["reason"])))
    if test["status"] == "flaky":
        found.append(("flaky", "true"))
    if test.get("replayed"):
        found.append(("replayed", "true"))
    if test.get("quarantined"):
        found.append(("quarantined", "true"))
    if found:
        props = _add(case, "properties")
        for name, value in found:
            _add(props, "property", name=name, value=value)


def _shown(text: str | None) -> str | None:
    """Text as it goes into the file: what XML 1.0 forbids (and what would act on a reader:
    ANSI and OSC sequences, bidirectional overrides) written out as its escape, ``\\x1b``."""
    return None if text is None else visible.block(text)


def _add(parent: ET.Element, tag: str, **attributes: str) -> ET.Element:
    """A child element whose attribute values are :func:`_shown`."""
    return ET.SubElement(parent, tag, {k: visible.block(v) for k, v in attributes.items()})


def _tally(tests: list[dict[str, Any]]) -> dict[str, int]:
    """The testcases' outcomes as written: a quarantined test that did not pass is skipped."""
    apart = [t for t in tests if t.get("quarantined") and t["status"] in QUARANTINED]
    kept = [t for t in tests if not (t.get("quarantined") and t["status"] in QUARANTINED)]
    return {
        "failures": sum(t["status"] == "failed" for t in kept),
        "errors": sum(t["status"] == "errored" for t in kept),
        "skipped": sum(t["status"] == "skipped" for t in kept) + len(apart),
    }


def render(report: reports.RunReport) -> bytes:
    s = report.summary
    load_errors = list(s.load_errors)
    tally = _tally(report.tests)
    never = 1 if s.not_run else 0  # one testcase stands for the tests that never started
    root = ET.Element(
        "testsuites",
        name="agent-health",
        tests=str(len(report.tests) + len(load_errors) + never),
        failures=str(tally["failures"]),
        errors=str(tally["errors"] + len(load_errors) + (never if s.interrupted else 0)),
        skipped=str(tally["skipped"] + (0 if s.interrupted else never)),
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
        suite = _add(
            root,
            "testsuite",
            name=file,
            tests=str(len(tests) + len(errors)),
            failures=str(_tally(tests)["failures"]),
            errors=str(_tally(tests)["errors"] + len(errors)),
            skipped=str(_tally(tests)["skipped"]),
            time=f"{sum(t['duration_ms'] for t in tests) / 1000:.3f}",
        )
        replayed = report.provenance.replay if report.provenance else None
        if replayed and report.provenance is not None:
            props = _add(suite, "properties")
            _add(props, "property", name="replayed_from", value=replayed)
            verified = report.provenance.replay_verified
            if verified is not None:  # false: no key checked the recording
                _add(props, "property", name="replay_verified", value=str(verified).lower())
        for text in errors:
            name = "hook error" if " hook " in text else LOAD_ERROR
            case = _add(suite, "testcase", name=name, classname=file, file=file)
            node = _add(case, "error", message=text, type="AgentHealthLoadError")
            node.text = _shown(text)
        for test in tests:
            _case(suite, test, s.repeats)
    if never:
        _never_started(root, report)
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data


def _never_started(root: ET.Element, report: reports.RunReport) -> None:
    """The tests that never started, as one testcase of a suite of their own: an error when
    the run was interrupted (CI shows red, as its exit code 130 says), else skipped, with why
    (``-x``, a misdirected agent) and what else did not run."""
    s = report.summary
    why = "; ".join(s.did_not_run) or f"{s.not_run} never started"
    if s.stopped and not s.interrupted:
        why = f"{s.stopped}: {why}"
    suite = _add(
        root,
        "testsuite",
        name=NOT_RUN,
        tests="1",
        failures="0",
        errors="1" if s.interrupted else "0",
        skipped="0" if s.interrupted else "1",
        time="0.000",
    )
    case = _add(suite, "testcase", name=f"{s.not_run} tests never started", classname=NOT_RUN)
    if s.interrupted:
        _add(case, "error", message=why, type="AgentHealthNotRun").text = _shown(why)
    else:
        _add(case, "skipped", message=why)


def write(path: Path, report: reports.RunReport) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(render(report))
    tmp.replace(path)
