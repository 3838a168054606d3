"""What a test file declares: each test (:class:`TestCase`), its hooks and its fixtures.

:mod:`agent_health.sdk.declare` makes them (``@test``, ``test.extend``, the hooks); the
engine reads them. A case file's tests (:mod:`agent_health.engine.loading.datasuite`) are
``TestCase`` too, with the case's own identity (``key``) and metadata.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

BUILTIN_FIXTURES = ("agent", "expect", "judge", "traces", "test_info")
HookKind = Literal["before_each", "after_each", "before_all", "after_all"]
Mode = Literal["run", "skip", "only", "fixme"]
Body = Callable[..., Any]


class FixtureDef(NamedTuple):
    """A fixture added by ``test.extend``: its function and the fixtures it asks for."""

    name: str
    fn: Callable[..., Any]
    params: tuple[str, ...]


class Hook(NamedTuple):
    kind: HookKind
    fn: Callable[..., Any]
    params: tuple[str, ...]
    scope: tuple[str, ...]
    fixtures: Mapping[str, FixtureDef]
    file: str
    line: int

    def applies_to(self, case: TestCase) -> bool:
        return case.describe_path[: len(self.scope)] == self.scope


@dataclass(eq=False, repr=False)
class TestCase:
    """One declared test. ``id`` is filled in by the loader (it knows the suite root)."""

    __test__ = False

    name: str
    describe_path: tuple[str, ...]
    fn: Body
    params: tuple[str, ...]
    fixtures: Mapping[str, FixtureDef]
    file: str
    line: int
    labels: tuple[str, ...] = ()
    description: str | None = None
    timeout: float | None = None
    default_prompt: str | None = None
    context: tuple[Mapping[str, str], ...] | None = None
    expected_outcomes: tuple[str, ...] = ()
    expected_trajectory: tuple[Any, ...] = ()
    skip_judge: bool = False
    insights: Callable[..., Any] | Literal[False] | None = None
    """This test's insights function; ``False``: none for this test; ``None``: the config's."""
    mode: Mode = "run"
    skip_reason: str | None = None
    id: str = ""
    hooks: tuple[Hook, ...] = ()
    source: str | None = None  # what content_hash reads instead of the body (data cases)
    values: Mapping[str, Any] | None = None  # a test.each row: injected by parameter name
    key: str | None = None
    """The test's identity in its file when it has one of its own (a case file's ``id``):
    its id is then ``FILE::KEY``, so a renamed case keeps its history; else its title."""
    metadata: Mapping[str, Any] | None = None
    """What a case file says of the case beyond the test (its ``id``, ``subcategory``,
    ``versions``, ``expectedPPL``, ...): in ``list --json`` and the reports as ``case``."""
    from_case_file: bool = False
    """A case file's test: its checks are written in the case file, so they point at the
    case (``file:line``), not at the code that runs them."""

    @functools.cached_property
    def title(self) -> str:
        # Read several times a test (context, result, progress line, ledger): made once.
        return " > ".join((*self.describe_path, self.name))

    @functools.cached_property
    def content_hash(self) -> str:
        """Changes when the name, labels or body source change (for comparisons)."""
        source = self.source
        if source is None:
            try:
                source = inspect.getsource(self.fn)
            except (OSError, TypeError):
                source = getattr(self.fn, "__qualname__", "")
        parts = [self.title, "\x00".join(self.labels), source]
        if self.values is not None:  # a test.each row: its values are part of what it tests
            parts.append(_canonical(self.values))
        # Each part's UTF-8 then \x01, hashed at once: the bytes the hash always read.
        parts.append("")
        return hashlib.sha256("\x01".join(parts).encode()).hexdigest()[:16]


def _canonical(values: Mapping[str, Any]) -> str:
    """A stable text of a test.each row, for the content hash (changing a value changes it)."""
    return json.dumps(dict(values), sort_keys=True, default=repr)
