"""One raw case → a :class:`~.model.Case`, or the problems that keep it from loading.

Every problem of a case is found in one pass (pydantic's errors, upstream's rules, unknown
fields), each naming the field, what is wrong and what to do. Upstream's rules — a
category, a difficulty of Easy/Medium/Hard, both keys of a context item, no blank expected
outcome — are errors, or warnings when the file is read ``lenient`` (hand-written files).
A field the format does not know is a warning (with "did you mean" for a near miss), or an
error under ``forbid_unknown``. ``followUpQuestions`` are checked as the other fields are
(a trigger of ``results_available``, ``error`` or ``always``, a non-empty question).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_health.engine.loading.casefiles import model
from agent_health.engine.loading.casefiles.positions import Path

LineOf = Callable[[Path], int | None]


@dataclass(frozen=True)
class Options:
    """How strictly a case file is read."""

    lenient: bool = False
    """Load what upstream's validation refuses, with a warning for each problem."""
    forbid_unknown: bool = False
    """A field the format does not know is an error, not a warning."""


@dataclass(frozen=True)
class Problem:
    """One problem of a case file: an error keeps the file from loading; a warning does not."""

    file: str
    line: int | None
    message: str
    error: bool = True


HINTS = {
    "name": "give the case a name (a non-empty string)",
    "id": "give a non-empty string, or leave id out",
    "initialPrompt": "give the prompt the case sends to the agent",
    "category": 'give "category": "..." or a "category:..." label (upstream requires one)',
    "difficulty": 'give "difficulty": "Easy", "Medium" or "Hard" (or a "difficulty:..." label)',
    "context": 'write it as a list of {"description": "...", "value": "..."}',
    "expectedOutcomes": "write it as a list of claims the judge checks",
    "expectedTrajectory": 'write it as a list of {"step": 1, "description": "...", '
    '"requiredTools": ["..."]}',
    "tools": 'write it as a list of {"name": "...", "description": "...", "parameters": {...}}',
    "followUpQuestions": 'write it as a list of {"trigger": "always", "question": "...", '
    '"businessValue": "..."}',
    "timeout": "give the test's timeout in seconds, or leave it out for --timeout's",
}
NOT_FINITE = (
    "is not a finite number (NaN, Infinity, or a number too large for a 64-bit float, such "
    "as 1e999); JSON has no such number, and no report could hold it: give a finite one"
)
JSON_TYPES = {
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    list: "a list",
    dict: "an object",
    type(None): "null",
}
_WHAT = {
    "missing": "missing",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "string_too_short": "is empty",
}


def json_type(value: Any) -> str:
    return JSON_TYPES.get(type(value), type(value).__name__)


def field_path(loc: Sequence[str | int]) -> str:
    """``("context", 0, "value")`` → ``context[0].value``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def did_you_mean(key: str, known: Iterable[str]) -> str | None:
    """The known key ``key`` is most likely a misspelling of, if any."""
    lowered = {k.lower(): k for k in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


def unknown_keys(
    raw: dict[str, Any], known: Sequence[str], prefix: Path = ()
) -> list[tuple[Path, str | None]]:
    """Each key of ``raw`` outside ``known``, with the known key it most likely means."""
    return [
        ((*prefix, key), did_you_mean(key, known))
        for key in raw
        if key not in known and not key.startswith("$")  # "$schema" and kin are for editors
    ]


def unknown_message(path: Path, guess: str | None, forbid: bool) -> str:
    hint = f"did you mean {guess!r}?" if guess else "it is not part of the case format"
    fate = (
        "refused: --forbid-unknown is on (it is when CI is set); fix or remove it"
        if forbid
        else "ignored"
    )
    return f"{field_path(path)}: unknown field; {hint} ({fate})"


def check_case(
    raw: Any,
    where: str,
    path: Path,
    line_of: LineOf,
    file: str,
    options: Options,
    not_finite: Sequence[Path] = (),
) -> tuple[model.Case | None, list[Problem]]:
    """The case at ``path`` of ``file`` (``where`` names it: ``case [1] 'name'``);
    ``not_finite``: where in it the parser read a number that is not finite."""
    found: list[Problem] = []

    def problem(at: Path, message: str, error: bool = True, upstreams: bool = False) -> None:
        if upstreams and error:  # a rule of upstream's validation: --lenient relaxes it
            message += " (--lenient loads it anyway)"
        found.append(Problem(file, line_of((*path, *at)), f"{where}: {message}", error))

    if not isinstance(raw, dict):
        problem(
            (),
            f"is {json_type(raw)}; a case is an object "
            '{"name": "...", "initialPrompt": "...", ...}',
        )
        return None, found
    unknown = _unknown(raw)
    # A misspelt key of a missing field is named in that field's error, not twice.
    meant = {field_path((*at[:-1], guess)): at for at, guess in unknown if guess}
    refused: set[Path] = set()  # fields pydantic refused: a NaN there is said once
    try:
        case: model.Case | None = model.Case.model_validate(raw)
    except ValidationError as err:
        case = None
        for e in err.errors():
            at = tuple(e["loc"])
            refused.add(at)
            name = field_path(at)
            what = _WHAT.get(e["type"], e["msg"])
            if e["type"] in _WHAT and e["type"] not in ("missing", "string_too_short"):
                what += f", got {json_type(e['input'])}"
            hint = HINTS.get(str(at[0]), "")
            if e["type"] == "missing" and name in meant:
                hint = f"the case has {field_path(meant.pop(name))!r}: did you mean {name!r}?"
            problem(at, f"{name}: {what}" + (f"; {hint}" if hint else ""))
    for at in not_finite:
        if at not in refused:
            problem(at, f"{field_path(at)}: {NOT_FINITE}")
    for at, guess in unknown:
        if guess is None or field_path((*at[:-1], guess)) in meant:
            problem(at, unknown_message(at, guess, options.forbid_unknown), options.forbid_unknown)
    upstream = not options.lenient
    _categorised(raw, problem, upstream)
    _contexts(raw, problem, upstream)
    blanks = _blank_outcomes(raw, problem, upstream)
    if case is None or any(p.error for p in found):
        return None, found
    if blanks:
        kept = [o for i, o in enumerate(case.expected_outcomes) if i not in blanks]
        case = case.model_copy(update={"expected_outcomes": kept})
    return case, found


def _unknown(raw: dict[str, Any]) -> list[tuple[Path, str | None]]:
    found = unknown_keys(raw, tuple(model.CASE_FIELDS))
    for field, keys in model.NESTED_FIELDS.items():
        items = raw.get(field)
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    found.extend(unknown_keys(item, keys, (field, i)))
    return found


Report = Callable[..., None]
"""``problem(at, message, error, upstreams)``: record one problem of the case."""


def _categorised(raw: dict[str, Any], problem: Report, upstream: bool) -> None:
    """Upstream requires a category and an Easy/Medium/Hard difficulty; ``labels`` with
    ``category:`` / ``difficulty:`` stand in for the fields (they replace them upstream)."""
    given = raw.get("labels")
    labels: list[Any] = given if isinstance(given, list) else []
    by_label = {
        prefix: next(
            (
                label[len(prefix) + 1 :]
                for label in labels
                if isinstance(label, str) and label.startswith(f"{prefix}:")
            ),
            None,
        )
        for prefix in ("category", "difficulty")
    }
    category = raw.get("category")
    if category is None and not by_label["category"]:
        problem(("category",), f"category: missing; {HINTS['category']}", upstream, True)
    elif isinstance(category, str) and not category:
        problem(("category",), f"category: is empty; {HINTS['category']}", upstream, True)
    difficulty = raw.get("difficulty")
    stated, at = (
        (difficulty, ("difficulty",))
        if "difficulty" in raw
        else (by_label["difficulty"], ("labels",))
    )
    if stated is None:
        problem(("difficulty",), f"difficulty: missing; {HINTS['difficulty']}", upstream, True)
    elif isinstance(stated, str) and stated not in model.DIFFICULTIES:
        near = did_you_mean(stated, model.DIFFICULTIES)
        label = "difficulty" if at == ("difficulty",) else "the difficulty: label"
        problem(
            at,
            f"{label}: {stated!r} is not one of Easy, Medium, Hard"
            + (f"; did you mean {near!r}?" if near else "; use one of upstream's three")
            + ("" if upstream else " (kept as written)"),
            upstream,
            True,
        )


def _contexts(raw: dict[str, Any], problem: Report, upstream: bool) -> None:
    items = raw.get("context")
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        if isinstance(item, dict) and "description" not in item:
            problem(
                ("context", i),
                f"context[{i}].description: missing; every context item has both "
                '"description" and "value"'
                + ("" if upstream else " (sent with an empty description)"),
                upstream,
                True,
            )


def _blank_outcomes(raw: dict[str, Any], problem: Report, upstream: bool) -> set[int]:
    items = raw.get("expectedOutcomes")
    if not isinstance(items, list):
        return set()
    blank = {i for i, o in enumerate(items) if isinstance(o, str) and not o.strip()}
    for i in sorted(blank):
        problem(
            ("expectedOutcomes", i),
            f"expectedOutcomes[{i}]: is blank; write the claim the judge checks, or remove it"
            + ("" if upstream else " (left out)"),
            upstream,
            True,
        )
    return blank
