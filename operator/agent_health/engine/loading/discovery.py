"""Which files of a folder are test files, and how strictly case files are read.

As Playwright's ``testMatch`` / ``testIgnore``: glob patterns (``*``, ``**``, ``?``,
``[abc]``, ``{a,b}``) matched against a file's path below the folder searched, anywhere in
it (``*.cases.json`` matches ``a/b/x.cases.json``). The config's ``test_match`` replaces
the defaults (:data:`DEFAULT_TEST_MATCH`, which cover upstream's ``*test-cases*.json`` and
``*benchmark*.json`` names); ``test_ignore`` leaves files out. A file named on the command
line is read whatever its name.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agent_health.engine.loading.casefiles import checks

DEFAULT_TEST_MATCH = (
    "test_*.py",
    "*_test.py",
    "*.test.py",
    "*.cases.json",
    "*.cases.jsonl",
    "test_*.json",
    "test_*.jsonl",
    "*test-cases*.json",
    "*test-cases*.jsonl",
    "*test_cases*.json",
    "*benchmark*.json",
)
CASE_SUFFIXES = (".json", ".jsonl")


class Discovery(NamedTuple):
    """The test match patterns and how case files are read."""

    test_match: tuple[str, ...] = DEFAULT_TEST_MATCH
    test_ignore: tuple[str, ...] = ()
    lenient: bool = False
    """Case files: load what upstream's validation refuses, with a warning for each problem."""
    forbid_unknown: bool = False
    """Case files: a field their format does not know is an error, not a warning."""

    @property
    def cases(self) -> checks.Options:
        """How case files are read. Their checks (pydantic models of upstream's format) load
        with the first case file: a suite of Python tests never imports them."""
        from agent_health.engine.loading.casefiles import checks

        return checks.Options(lenient=self.lenient, forbid_unknown=self.forbid_unknown)

    def is_test_file(self, relative: str) -> bool:
        """Whether ``relative`` (a path below the folder searched, with ``/``) is a test file."""
        return _matches(self.test_match, relative) and not self.is_ignored(relative)

    def is_ignored(self, relative: str) -> bool:
        return _matches(self.test_ignore, relative)


def of(
    test_match: Sequence[str] | None,
    test_ignore: Sequence[str],
    *,
    lenient: bool,
    forbid_unknown: bool | None,
    environ: Mapping[str, str] | None = None,
) -> Discovery:
    """The discovery of a run: the config's patterns, ``--lenient`` (or the config's
    ``lenient_cases``), and ``--forbid-unknown`` (``None``: on when ``$CI`` is set)."""
    env = os.environ if environ is None else environ
    forbid = (
        forbid_unknown
        if forbid_unknown is not None
        else env.get("CI", "").lower() not in ("", "0", "false")
    )
    return Discovery(
        test_match=tuple(test_match) if test_match is not None else DEFAULT_TEST_MATCH,
        test_ignore=tuple(test_ignore),
        lenient=lenient,
        forbid_unknown=forbid,
    )


def _matches(patterns: Sequence[str], relative: str) -> bool:
    # A path that does not end as a pattern's literal end (``.py`` of ``test_*.py``) cannot
    # match it: its regex is not compiled for it (a suite's config file, checked against
    # every default pattern, compiled eleven: 3 M instructions of a run, issue #40).
    return any(relative.endswith(_tail(p)) and _regex(p).fullmatch(relative) for p in patterns)


def _tail(pattern: str) -> str:
    """What ``pattern`` ends with after its last wildcard, class or brace (and a slash after
    it: ``**/`` may match nothing): every path it matches ends so (``""`` when it ends with
    one)."""
    return pattern[max(pattern.rfind(c) for c in "*?]}") + 1 :].lstrip("/")


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex; like Playwright, a pattern not anchored by ``/`` or ``**/``
    matches at any depth."""
    glob = pattern.removeprefix("./")
    anchored = glob.startswith("/")
    body = _translate(glob.lstrip("/"))
    return re.compile(body if anchored or glob.startswith("**/") else f"(?:.*/)?{body}")


def _translate(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 1)) > i + 1:
            inner = glob[i + 1 : end]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end
        elif c == "{" and (end := glob.find("}", i + 1)) > i:
            options = glob[i + 1 : end].split(",")
            out.append("(?:" + "|".join(_translate(o) for o in options) + ")")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
