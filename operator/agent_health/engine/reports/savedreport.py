"""A saved JSON report read back — by ``compare``, ``report``, ``show-report`` and ``--replay``
— and checked before anything trusts it.

A report is a file anyone can edit or write by hand, and each reader relies on a few of its
fields: ``compare`` on the statuses, scores and counts, ``--replay`` on the ids, repeats and
cells. :func:`read` refuses, in one line naming the file and the field, what would make a
reader crash or say something false:

* text that is not JSON we can hold (:mod:`agent_health.ledger.strictjson`): ``NaN`` or
  ``Infinity`` (a NaN score compares false with every threshold, and the paired test then
  finds "p = 0, better"), a number too large for a float, nesting past 256 levels;
* a ``version`` that is not one of the readable ones (``true`` is not ``1``);
* counts that are not whole numbers at least 0, rates and scores outside 0–1, tokens, cost
  and durations that are negative, ``repeats`` that is not a whole number from 1 to
  :data:`.report.MAX_REPEATS`, or not more than every test's ``repeat``;
* a test entry without an id or a known status, with a ``repeat`` that is not a whole
  number, or listed twice (the same agent, id and repeat);
* a timed-out test's ``partial`` (what the agent had sent) that is not an object of a known
  ``source``, whole ``bytes`` and ``events``, a string ``text`` and a list of steps.

Fields that no reader here uses are left to the report's model (``report`` and
``show-report`` validate the whole file with it, :mod:`.reporters.json_file`); ``compare``
reads minimal reports too (an id and a status per test).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, get_args

from agent_health import statuses
from agent_health.connectors import partial as partial_mod
from agent_health.engine.reports import report
from agent_health.ledger import strictjson
from agent_health.sdk import errors

PARTIAL_SOURCES: tuple[str, ...] = get_args(partial_mod.Source)
_COUNTS = ("total", "passed", "failed", "errored", "skipped", "flaky_count", "not_run")
_MORE_COUNTS = ("unpriced", "tokens_unreported", "tokens", "input_tokens", "output_tokens")
_FRACTIONS = ("pass_rate", "score", "pass_at_k", "pass_hat_k")


class ReportFileError(errors.AgentHealthError):
    """A JSON report that cannot be read: missing, not JSON, another version, bad fields."""


def read(path: Path) -> dict[str, Any]:
    """The report at ``path`` as JSON data, checked (see the module docstring); raises
    :class:`ReportFileError` naming the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ReportFileError(f"{path}: no such report file") from err
    except IsADirectoryError as err:
        raise ReportFileError(f"{path}: a directory, not a JSON report file") from err
    except (OSError, UnicodeDecodeError) as err:
        raise ReportFileError(f"{path}: cannot read it ({err})") from err
    try:
        data = strictjson.loads(text)
    except strictjson.JSONError as err:
        raise ReportFileError(f"{path}: not JSON we can read ({err})") from None
    try:
        check(data)
    except _Bad as bad:
        raise ReportFileError(f"{path}: {bad}") from None
    return data  # type: ignore[no-any-return]  # check() proved it a dict


class _Bad(Exception):
    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}" if where else what)


def check(data: Any) -> None:
    """Raise ``_Bad`` (``field: what is wrong``) at the first field a reader cannot trust."""
    if not isinstance(data, dict) or "version" not in data:
        raise _Bad("", "not an agent-health JSON report (no version field)")
    version = data["version"]
    if not _whole(version) or version not in report.READABLE_VERSIONS:
        readable = " or ".join(str(v) for v in report.READABLE_VERSIONS)
        raise _Bad(
            "version",
            f"{version!r} is not a report version this agent-health reads ({readable}); "
            "re-run with this agent-health",
        )
    summary, tests = data.get("summary"), data.get("tests")
    if not isinstance(summary, dict) or not isinstance(tests, list):
        raise _Bad("", "not an agent-health JSON report (no summary object or tests list)")
    _summary(summary)
    seen: dict[tuple[Any, str, int], int] = {}
    for i, entry in enumerate(tests):
        key = _entry(f"tests[{i}]", entry)
        if key in seen:
            agent = f" against agent {key[0]!r}" if key[0] is not None else ""
            raise _Bad(
                f"tests[{i}]",
                f"test {key[1]!r} repeat {key[2]}{agent} is listed twice (also tests[{seen[key]}])",
            )
        seen[key] = i
    repeats = summary.get("repeats")
    last = max((k[2] for k in seen), default=-1)
    if repeats is not None and last >= repeats:
        raise _Bad(
            "summary.repeats",
            f"{repeats}, but tests[{seen[next(k for k in seen if k[2] == last)]}] is repeat "
            f"{last} (counted from 0)",
        )
    provenance = data.get("provenance")
    if provenance is not None:
        if not isinstance(provenance, dict):
            raise _Bad("provenance", f"must be an object or null, not {_shown(provenance)}")
        for name in ("ledger", "replay"):
            _field(provenance, name, f"provenance.{name}", _text, "a string or null")
        _field(provenance, "replay_verified", "provenance.replay_verified", _flag, "true/false")


def _summary(summary: Mapping[str, Any]) -> None:
    for name in (*_COUNTS, *_MORE_COUNTS):
        _field(summary, name, f"summary.{name}", _count, "a whole number, at least 0")
    for name in _FRACTIONS:
        _field(summary, name, f"summary.{name}", _fraction, "a number from 0 to 1, or null")
    for name in ("cost_usd", "duration_ms"):
        _field(summary, name, f"summary.{name}", _amount, "a number, at least 0")
    _field(
        summary,
        "repeats",
        "summary.repeats",
        lambda v: _whole(v) and 1 <= v <= report.MAX_REPEATS,
        f"a whole number from 1 to {report.MAX_REPEATS:,}",
    )
    causes = summary.get("errored_by_cause")
    if causes is not None:
        if not isinstance(causes, dict):
            raise _Bad("summary.errored_by_cause", f"must be an object, not {_shown(causes)}")
        for cause in statuses.CAUSES:
            where = f"summary.errored_by_cause.{cause}"
            _field(causes, cause, where, _count, "a whole number, at least 0")


def _entry(where: str, entry: Any) -> tuple[Any, str, int]:
    """Check one test entry; its (agent, id, repeat)."""
    if not isinstance(entry, dict):
        raise _Bad(where, f"must be a test entry (an object), not {_shown(entry)}")
    test_id = entry.get("id")
    if not isinstance(test_id, str) or not test_id:
        raise _Bad(f"{where}.id", f"must be the test's id (a string), not {_shown(test_id)}")
    if entry.get("status") not in statuses.STATUSES:
        raise _Bad(
            f"{where}.status",
            f"{_shown(entry.get('status'))} is not a status ({', '.join(statuses.STATUSES)})",
        )
    _field(
        entry,
        "repeat",
        f"{where}.repeat",
        lambda v: _whole(v) and 0 <= v < report.MAX_REPEATS,
        "a whole number, at least 0 (the repeat, counted from 0)",
    )
    _field(entry, "score", f"{where}.score", _fraction, "a number from 0 to 1, or null")
    _field(entry, "duration_ms", f"{where}.duration_ms", _amount, "a number, at least 0")
    for name in ("name", "content_hash"):
        _field(entry, name, f"{where}.{name}", lambda v: isinstance(v, str), "a string")
    for name in ("error", "agent", "ledger_cell"):
        _field(entry, name, f"{where}.{name}", _text, "a string or null")
    _field(entry, "cause", f"{where}.cause", lambda v: v is None or v in statuses.CAUSES, "a cause")
    _field(entry, "replayed", f"{where}.replayed", _flag, "true or false")
    _partial(f"{where}.partial", entry.get("partial"))
    return entry.get("agent"), test_id, entry.get("repeat") or 0


def _partial(where: str, partial: Any) -> None:
    """What a timed-out agent had sent: the terminal, JUnit and the HTML report show it."""
    if partial is None:
        return
    if not isinstance(partial, dict):
        raise _Bad(where, f"must be an object or null, not {_shown(partial)}")
    if partial.get("source") not in PARTIAL_SOURCES:
        raise _Bad(
            f"{where}.source",
            f"{_shown(partial.get('source'))} is not one of {', '.join(PARTIAL_SOURCES)}",
        )
    _field(partial, "bytes", f"{where}.bytes", _count, "a whole number, at least 0")
    _field(partial, "events", f"{where}.events", _count, "a whole number, at least 0, or null")
    _field(partial, "text", f"{where}.text", _text, "a string")
    _field(partial, "truncated", f"{where}.truncated", _flag, "true or false")
    steps = partial.get("trajectory")
    if steps is not None and not (
        isinstance(steps, list) and all(isinstance(s, dict) for s in steps)
    ):
        raise _Bad(f"{where}.trajectory", f"must be a list of steps, not {_shown(steps)}")


def _field(
    data: Mapping[str, Any], name: str, where: str, ok: Callable[[Any], bool], want: str
) -> None:
    """A field that, when present and not null, must satisfy ``ok``."""
    value = data.get(name)
    if value is not None and not ok(value):
        raise _Bad(where, f"must be {want}, not {_shown(value)}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _whole(value) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fraction(value: Any) -> bool:
    return _number(value) and 0 <= value <= 1


def _amount(value: Any) -> bool:
    return _number(value) and value >= 0


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
