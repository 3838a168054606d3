"""Reading a case file in each form upstream writes, into raw cases and where they are.

The forms (:data:`FORMS`): a list of cases; one case object (upstream wraps it into a
list); ``{"name", "testCases": [...]}``; ``{"benchmarks": [...]}``, each benchmark holding
``testCases`` or naming ``testCaseIds``; one benchmark naming ``testCaseIds``; and JSONL,
one case a line. ``testCaseIds`` are resolved by :mod:`agent_health.engine.loading.datasuite`
against the case files beside the benchmark. Anything else — another shape, CSV, a file
too deeply nested to read — is a problem saying which forms are read.

Python's :mod:`json` reads more than JSON says, and silently: a key written twice in one
object keeps its last value (a reviewer reads the first, a check that never runs), and
``NaN``, ``Infinity`` or ``1e999`` (too large for a float) read as numbers no JSON output
can hold again. Each is a problem naming the file, the line, the case and the field: a
number that is not finite is an error; a repeated key is an error, or a warning under
``lenient`` (JSON's own rule, and upstream's ``JSON.parse``: the last is read).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent_health.engine.loading.casefiles import checks, model, positions

FORMS = (
    'a list of cases [{"name": ..., "initialPrompt": ...}], one case object, '
    '{"name": ..., "testCases": [...]}, {"benchmarks": [...]}, a benchmark '
    '{"name": ..., "testCaseIds": [...]} beside its case files, or JSONL (.jsonl, one case '
    "a line)"
)
SUFFIXES = (".json", ".jsonl")
MAX_DEPTH = 64
"""Deeper than any case (tool parameters included) and shallow enough for every reader."""


@dataclass(frozen=True)
class RawCase:
    """One case as read, before it is checked."""

    raw: Any
    path: positions.Path
    where: str  # "case [2]", "line 3", "benchmark 'smoke' case [0]"
    benchmark: str | None = None
    not_finite: tuple[positions.Path, ...] = ()
    """Where in the case a number is not finite (NaN, Infinity, 1e999): each a problem."""

    @property
    def named(self) -> str:
        """``case [2] 'payment outage'``: where it is, and its name when it has one."""
        name = self.raw.get("name") if type(self.raw) is dict else None
        return f"{self.where} {name!r}" if isinstance(name, str) and name else self.where


@dataclass(frozen=True)
class Reference:
    """A benchmark's ``testCaseIds``: cases of the case files beside it."""

    benchmark: str
    ids: tuple[tuple[int, str], ...]  # (index in testCaseIds, id)
    line: int | None


@dataclass(frozen=True)
class Odd:
    """A place where the text says more than the value read from it: a key written more
    than once in one object (``key``, ``times``), or a number that is not finite."""

    path: positions.Path
    key: str | None = None
    times: int = 0


@dataclass
class Document:
    """What one file holds."""

    file: Path
    cases: list[RawCase] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    problems: list[checks.Problem] = field(default_factory=list)
    lines: positions.Lines | None = None
    jsonl: bool = False
    odd: list[Odd] = field(default_factory=list)
    """What the JSON parser took silently (a repeated key, a number that is not finite),
    reported once the cases are known (:func:`_report_odd`)."""

    def line_of(self, path: positions.Path) -> int | None:
        if self.jsonl:  # a JSONL case's path starts with its line number
            return int(path[0]) if path else None
        return self.lines.of(path) if self.lines is not None else None

    def problem(self, path: positions.Path, message: str, error: bool = True) -> None:
        self.problems.append(checks.Problem(str(self.file), self.line_of(path), message, error))


def read(file: Path, options: checks.Options) -> Document:
    """The raw cases, benchmark references and file-level problems of ``file``."""
    doc = Document(file)
    suffix = file.suffix.lower()
    if suffix not in SUFFIXES:
        what = "CSV" if suffix == ".csv" else f"a {suffix or 'suffixless'} file"
        doc.problem(
            (),
            f"{what} is not a case-file form agent-health reads; it reads Python test files "
            f"(.py) and case files: {FORMS}",
        )
        return doc
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except OSError as err:
        doc.problem((), f"cannot read: {err.strerror or err}")
        return doc
    except UnicodeDecodeError as err:
        doc.problem((), f"not UTF-8 text (byte {err.start}); save the file as UTF-8")
        return doc
    if suffix == ".jsonl":
        doc.jsonl = True
        _jsonl(doc, text)
        _report_odd(doc, options)
        return doc
    data = _parse(doc, text, first_line=1)
    if data is _NOTHING:
        return doc
    doc.lines = positions.Lines(text)
    _forms(doc, data, options)
    _report_odd(doc, options)
    return doc


_NOTHING: Any = object()


def _parse(doc: Document, text: str, first_line: int, at: positions.Path = ()) -> Any:
    """``text`` as JSON, or :data:`_NOTHING` after saying why it is not readable; what the
    parser took silently is kept in ``doc.odd`` (``at``: where ``text`` is in the file)."""
    repeated: dict[int, tuple[dict[str, Any], Counter[str]]] = {}
    not_finite: list[float] = []  # seen while parsing: only then is the value walked

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(items)  # a plain dict, as json.loads makes: the last of a key wins
        if len(made) < len(items):
            counts = Counter(key for key, _ in items)
            repeated[id(made)] = (made, counts)  # kept alive: its id names it until read
        return made

    def number(literal: str) -> float:
        value = float(literal)  # NaN, Infinity, or 1e999 (too large: infinity)
        if not math.isfinite(value):
            not_finite.append(value)
        return value

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_float=number, parse_constant=number)
    except json.JSONDecodeError as err:
        hint = ""
        if err.msg == "Extra data" and not doc.jsonl:
            hint = "; one JSON value a line is JSONL: name the file .jsonl"
        line = first_line + err.lineno - 1
        doc.problems.append(checks.Problem(str(doc.file), line, f"invalid JSON: {err.msg}{hint}"))
        return _NOTHING
    except RecursionError:
        doc.problems.append(
            checks.Problem(
                str(doc.file),
                first_line if doc.jsonl else None,
                f"nested too deeply to read; a case file nests at most {MAX_DEPTH} levels",
            )
        )
        return _NOTHING
    except ValueError as err:  # e.g. an integer with more digits than Python reads
        doc.problems.append(checks.Problem(str(doc.file), first_line, f"unreadable JSON: {err}"))
        return _NOTHING
    if _too_deep(data):
        doc.problems.append(
            checks.Problem(
                str(doc.file),
                first_line if doc.jsonl else None,
                f"nested more than {MAX_DEPTH} levels deep; a case file nests at most "
                f"{MAX_DEPTH} (every reader of the reports must be able to walk it)",
            )
        )
        return _NOTHING
    if repeated or not_finite:
        doc.odd.extend(_odd(data, {k: counts for k, (_, counts) in repeated.items()}, at))
    return data


def _odd(data: Any, repeated: dict[int, Counter[str]], at: positions.Path) -> list[Odd]:
    """Each repeated key (by the id of its object) and each number that is not finite in
    ``data``, in document order; walked without recursion (the depth is bounded already)."""
    found: list[Odd] = []
    todo: list[tuple[Any, positions.Path]] = [(data, at)]
    while todo:
        value, path = todo.pop()
        if type(value) is float:
            if not math.isfinite(value):
                found.append(Odd(path))
            continue
        if type(value) is dict:
            counts = repeated.get(id(value)) if repeated else None
            if counts is not None:
                found.extend(Odd((*path, k), k, n) for k, n in counts.items() if n > 1)
            todo.extend(reversed([(v, (*path, k)) for k, v in value.items()]))
        elif type(value) is list:
            todo.extend(reversed([(v, (*path, i)) for i, v in enumerate(value)]))
    return found


def _report_odd(doc: Document, options: checks.Options) -> None:
    """One problem per repeated key, naming the case it is in (when it is in one) and the
    field; a number that is not finite is its case's problem (:func:`.checks.check_case`
    says it once, beside the field's other problems), or the file's outside any case."""
    for odd in doc.odd:
        at = next((i for i, c in enumerate(doc.cases) if odd.path[: len(c.path)] == c.path), None)
        case = doc.cases[at] if at is not None else None
        if odd.key is None and case is not None and at is not None:
            inner = odd.path[len(case.path) :]
            doc.cases[at] = replace(case, not_finite=(*case.not_finite, inner))
            continue
        if case is not None:
            inner = odd.path[len(case.path) :]
        else:  # outside any case: a JSONL line's path starts with its line, named already
            inner = odd.path[1:] if doc.jsonl else odd.path
        where = f"{case.named}: " if case is not None else ""
        field_name = checks.field_path(inner) or "the value"
        if odd.key is None:
            doc.problem(odd.path, f"{where}{field_name}: {checks.NOT_FINITE}")
            continue
        fate = "--lenient: the last is read" if options.lenient else "--lenient reads the last"
        doc.problem(
            odd.path,
            f"{where}{field_name}: the key {odd.key!r} is written {odd.times} times in one "
            "object; JSON reads only the last, so a reader of the file sees a value that never "
            f"runs: keep one ({fate})",
            not options.lenient,
        )


def _too_deep(data: Any) -> bool:
    """Whether ``data`` nests deeper than :data:`MAX_DEPTH`, found without recursion."""
    if type(data) not in _CONTAINERS:
        return False
    todo = [(data, 1)]
    while todo:  # containers only: most values of a case file are strings
        value, level = todo.pop()
        if level > MAX_DEPTH:
            return True
        for item in value.values() if type(value) is dict else value:
            if type(item) in _CONTAINERS:
                todo.append((item, level + 1))
    return False


_CONTAINERS = (dict, list)  # what json.loads makes: exactly these types, never subclasses


def _jsonl(doc: Document, text: str) -> None:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        data = _parse(doc, line, first_line=number, at=(number,))
        if data is not _NOTHING:
            doc.cases.append(RawCase(data, (number,), f"line {number}"))
    if not doc.cases and not doc.problems:
        doc.problem((), _EMPTY)


_EMPTY = 'holds no case (upstream: "Array cannot be empty"); add at least one, or remove the file'


def _forms(doc: Document, data: Any, options: checks.Options) -> None:
    if isinstance(data, list):
        _cases(doc, data, (), "case", None, options)
        return
    if not isinstance(data, dict):
        doc.problem((), f"holds {checks.json_type(data)}; {_NOT_A_FORM}")
        return
    if "benchmarks" in data:
        _unknown(doc, data, ("benchmarks", "total"), (), options)
        benchmarks = data["benchmarks"]
        if not isinstance(benchmarks, list) or not benchmarks:
            doc.problem(("benchmarks",), "benchmarks: must be a non-empty list of benchmarks")
            return
        for b, item in enumerate(benchmarks):
            _benchmark(doc, item, ("benchmarks", b), options)
    elif "testCaseIds" in data:
        _benchmark(doc, data, (), options)
    elif "testCases" in data:
        _unknown(doc, data, model.WRAPPER_FIELDS, (), options)
        name = data.get("name")
        _cases(doc, data["testCases"], ("testCases",), "case", _name(name), options)
    elif "initialPrompt" in data or "name" in data:
        doc.cases.append(RawCase(data, (), "case [0]"))  # one case: upstream wraps it
    else:
        keys = ", ".join(repr(k) for k in list(data)[:5]) or "no keys"
        doc.problem((), f"holds an object with {keys}; {_NOT_A_FORM}")


_NOT_A_FORM = f"that is not a case-file form agent-health reads; the forms are: {FORMS}"


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _cases(
    doc: Document,
    items: Any,
    at: positions.Path,
    word: str,
    benchmark: str | None,
    options: checks.Options,
) -> None:
    prefix = f"benchmark {benchmark!r} " if benchmark and at else ""
    if not isinstance(items, list):
        doc.problem(
            at,
            f"{checks.field_path(at) or 'the file'}: must be a list of cases, got "
            f"{checks.json_type(items)}",
        )
        return
    if not items:
        doc.problem(at, f"{checks.field_path(at) or 'the file'} {_EMPTY}", not options.lenient)
        return
    for i, raw in enumerate(items):
        doc.cases.append(RawCase(raw, (*at, i), f"{prefix}{word} [{i}]", benchmark))


def _benchmark(doc: Document, item: Any, at: positions.Path, options: checks.Options) -> None:
    where = checks.field_path(at) or "the benchmark"
    if not isinstance(item, dict):
        doc.problem(at, f"{where}: is {checks.json_type(item)}; a benchmark is an object")
        return
    _unknown(doc, item, model.BENCHMARK_FIELDS, at, options)
    name = _name(item.get("name"))
    if name is None:
        doc.problem((*at, "name"), f"{where}: name: missing; give the benchmark a name")
        return
    if "testCases" in item:
        _cases(doc, item["testCases"], (*at, "testCases"), "case", name, options)
    ids = item.get("testCaseIds")
    if ids is None:
        if "testCases" not in item:
            doc.problem(
                at,
                f"benchmark {name!r}: names no cases; list the ids of cases in the case "
                'files beside it as "testCaseIds", or hold the cases in "testCases"',
            )
        return
    if not isinstance(ids, list) or not ids:
        doc.problem(
            (*at, "testCaseIds"),
            f"benchmark {name!r}: testCaseIds: must be a non-empty list of case ids",
        )
        return
    good = []
    for k, value in enumerate(ids):
        if isinstance(value, str) and value:
            good.append((k, value))
        else:
            doc.problem(
                (*at, "testCaseIds", k),
                f"benchmark {name!r}: testCaseIds[{k}]: is {checks.json_type(value)}; "
                "a case id is a non-empty string",
            )
    doc.references.append(Reference(name, tuple(good), doc.line_of(at)))


def _unknown(
    doc: Document,
    data: dict[str, Any],
    known: tuple[str, ...],
    at: positions.Path,
    options: checks.Options,
) -> None:
    for path, guess in checks.unknown_keys(data, known, at):
        doc.problem(
            path,
            checks.unknown_message(path, guess, options.forbid_unknown),
            options.forbid_unknown,
        )
