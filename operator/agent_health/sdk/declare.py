"""Declaring tests: the ``test`` object, fixtures by extension, hooks and groups.

Importing a test file only *declares*: each ``@test(...)`` appends a :class:`TestCase` to
the :class:`Collector` that the loader made current for that file. Nothing runs.

Example::

    from agent_health import test

    async def workspace():
        path = make_workspace()
        yield path
        remove(path)

    test = test.extend(workspace=workspace)

    @test("uses the workspace", labels=["smoke"])
    async def uses_workspace(agent, expect, workspace):
        result = await agent.run(f"list files in {workspace}")
        expect(result).to_have_called_tool("ls")
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import linecache
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from agent_health import timeouts
from agent_health.sdk import declared, errors, sources

if TYPE_CHECKING:
    from agent_health.sdk import parametrize

# The declarations live in their own module; these names are how the package reads them.
BUILTIN_FIXTURES = declared.BUILTIN_FIXTURES
HookKind = declared.HookKind
Mode = declared.Mode
Body = declared.Body
FixtureDef = declared.FixtureDef
Hook = declared.Hook
TestCase = declared.TestCase


@dataclass(eq=False, repr=False)
class Collector:
    """What importing one file declared."""

    file: str
    cases: list[TestCase] = field(default_factory=list)
    titles: dict[str, TestCase] = field(default_factory=dict)  # title → case, for duplicates
    _lines: list[str] | None = None  # the file's, read once as its first body is cut
    _blocks: dict[int, tuple[int, int]] | None = None  # the file's functions, when parsed
    hooks: list[Hook] = field(default_factory=list)
    describe_stack: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    @property
    def describe_path(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.describe_stack)

    @property
    def describe_labels(self) -> tuple[str, ...]:
        return tuple(label for _, labels in self.describe_stack for label in labels)

    def source_of(self, fn: Callable[..., Any]) -> str | None:
        """``inspect.getsource(fn)`` for a function of this file, from its lines read once.

        ``inspect.getsource`` tokenizes each body anew (about half a millisecond per test);
        this finds the same lines — from the first decorator to the end of the body, with
        the comments inspect counts as part of it — by a scan of the function's own lines
        (:func:`.sources.plain_block`), or where that cannot be sure in the file's syntax tree,
        parsed once. ``None`` when the function is not found there (``content_hash`` then
        asks inspect).
        """
        code = getattr(fn, "__code__", None)
        if code is None or code.co_filename != self.file:
            return None
        lines = self._lines
        if lines is None:
            linecache.checkcache(self.file)  # the file as imported now, not as last cached
            lines = self._lines = linecache.getlines(self.file)
        first = code.co_firstlineno
        # A lambda's or a comprehension's first line can be a later decorator's: the scan
        # reads a ``def``'s lines only.
        plain = 0 < first <= len(lines) and not code.co_name.startswith("<")
        found = sources.plain_block(lines, first) if plain else None
        if found is None:
            if self._blocks is None:
                self._blocks = sources.blocks(self.file)
            found = self._blocks.get(first)
            if found is None:
                return None
        return "".join(lines[found[0] - 1 : found[1]])

    def add(self, case: TestCase) -> None:
        title = case.title
        other = self.titles.get(title)
        if other is not None:
            each = (
                "; put a key that differs between rows (or {index}) in the test.each title"
                if case.values is not None
                else ""
            )
            raise errors.DefinitionError(
                f"duplicate test name {title!r} (lines {other.line} and {case.line}); "
                f"test names must be unique within a file{each}"
            )
        self.titles[title] = case
        self.cases.append(case)


_collector: contextvars.ContextVar[Collector] = contextvars.ContextVar("agent_health_collector")


@contextlib.contextmanager
def collecting(file: str) -> Iterator[Collector]:
    """Make a fresh collector current while a file is imported (used by the loader)."""
    collector = Collector(file=file)
    token = _collector.set(collector)
    try:
        yield collector
    finally:
        _collector.reset(token)
        if collector._lines is not None:
            # The file's lines were read to cut each body's source; a run keeps the sources,
            # not the whole file (a traceback reads it again from disk if it needs it).
            linecache.cache.pop(file, None)


def _params(fn: Callable[..., Any]) -> tuple[str, ...]:
    if isinstance(fn, types.FunctionType):
        code = fn.__code__
        plain = (
            not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
            and not hasattr(fn, "__wrapped__")  # inspect follows a decorator's wraps() to it
            and not hasattr(fn, "__signature__")
        )
        if plain:
            # A plain function's parameters are the first names of its code, as inspect
            # reads them (about a tenth of its cost, paid once per declared test).
            return tuple(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise errors.DefinitionError(
                f"{fn.__qualname__} takes *{p.name}; fixtures are injected by name only"
            )
        params.append(p.name)
    return tuple(params)


def _where(fn: Callable[..., Any]) -> tuple[str, int]:
    code = getattr(fn, "__code__", None)
    if code is None:
        return "<unknown>", 0
    return code.co_filename, code.co_firstlineno


def _check_params(owner: str, params: Sequence[str], fixtures: Mapping[str, FixtureDef]) -> None:
    for name in params:
        if name not in fixtures and name not in BUILTIN_FIXTURES:
            available = ", ".join(sorted({*BUILTIN_FIXTURES, *fixtures}))
            raise errors.DefinitionError(
                f"{owner} asks for unknown fixture {name!r}; available: {available} "
                "(add it with test.extend)"
            )


class Describe:
    """``with test.describe("group"):`` — groups tests; titles nest, hooks inside apply."""

    def __init__(self, name: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.labels = tuple(labels)

    def __enter__(self) -> Describe:
        _require_collector("test.describe").describe_stack.append((self.name, self.labels))
        return self

    def __exit__(self, *exc: object) -> None:
        _require_collector("test.describe").describe_stack.pop()


def _require_collector(what: str) -> Collector:
    try:
        return _collector.get()
    except LookupError:
        raise errors.DefinitionError(
            f"{what} used outside a test file being loaded; run files with `agent-health run`"
        ) from None


class TestAPI:
    """The ``test`` object. Immutable: ``extend`` returns a new one."""

    __test__ = False

    def __init__(self, fixtures: Mapping[str, FixtureDef] | None = None) -> None:
        self._fixtures: Mapping[str, FixtureDef] = MappingProxyType(dict(fixtures or {}))

    @property
    def fixtures(self) -> Mapping[str, FixtureDef]:
        return self._fixtures

    def __call__(
        self,
        name: str,
        *,
        labels: Sequence[str] = (),
        description: str | None = None,
        timeout: float | None = None,
        default_prompt: str | None = None,
        context: Sequence[Mapping[str, str]] | None = None,
        expected_outcomes: Sequence[str] = (),
        expected_trajectory: Sequence[Any] = (),
        skip_judge: bool = False,
        insights: Callable[..., Any] | Literal[False] | None = None,
    ) -> Callable[[Body], Body]:
        """Declare a test whose body is the decorated ``async def``.

        ``insights=fn`` explains this test with ``fn`` instead of the config's insights
        function; ``insights=False`` explains it with none.
        """
        return self._declare(
            name,
            mode="run",
            reason=None,
            options=dict(
                labels=tuple(labels),
                description=description,
                timeout=timeout,
                default_prompt=default_prompt,
                context=tuple(context) if context is not None else None,
                expected_outcomes=tuple(expected_outcomes),
                expected_trajectory=tuple(expected_trajectory),
                skip_judge=skip_judge,
                insights=insights,
            ),
        )

    def skip(self, name: str, *, reason: str = "", **options: Any) -> Callable[[Body], Body]:
        """Declare a test that is reported as skipped and never run."""
        return self._declare(name, mode="skip", reason=reason or "marked skip", options=options)

    def fixme(self, name: str, *, reason: str = "", **options: Any) -> Callable[[Body], Body]:
        """Declare a known-broken test: skipped, and the report says fixme."""
        return self._declare(name, mode="fixme", reason=reason or "fixme", options=options)

    def only(self, name: str, **options: Any) -> Callable[[Body], Body]:
        """Declare a focused test: when any test is ``only``, just those run."""
        return self._declare(name, mode="only", reason=None, options=options)

    def each(self, rows: Iterable[Mapping[str, Any]]) -> parametrize.Each:
        """Declare one test per row: ``@test.each(rows)("title {key}", **options)``.

        Each row is a dict; the body takes its keys as parameters (beside fixtures), and the
        title is formatted with the row (and ``{index}``, from 0) so every row's test has its
        own stable id::

            @test.each([{"service": "payment"}, {"service": "search"}])("diagnoses {service}")
            async def diagnoses(agent, expect, service):
                result = await agent.run(f"Why is the {service} service failing?")
                expect(result.output).to_contain(service)
        """
        from agent_health.sdk import parametrize  # test.each's: loaded by the first file using it

        return parametrize.Each(self, rows)

    def describe(self, name: str, *, labels: Sequence[str] = ()) -> Describe:
        return Describe(name, labels)

    def extend(self, **fixtures: Callable[..., Any]) -> TestAPI:
        """A new ``test`` that also provides ``fixtures`` (name → function)."""
        merged = dict(self._fixtures)
        for name, fn in fixtures.items():
            if not callable(fn):
                raise errors.DefinitionError(f"fixture {name!r} must be a function, got {fn!r}")
            merged[name] = FixtureDef(name=name, fn=fn, params=_params(fn))
        for fixture in merged.values():
            _check_params(f"fixture {fixture.name!r}", fixture.params, merged)
        _check_cycles(merged)
        return TestAPI(merged)

    def before_each(self, fn: Body) -> Body:
        return self._hook("before_each", fn)

    def after_each(self, fn: Body) -> Body:
        return self._hook("after_each", fn)

    def before_all(self, fn: Body) -> Body:
        return self._hook("before_all", fn)

    def after_all(self, fn: Body) -> Body:
        return self._hook("after_all", fn)

    def _hook(self, kind: HookKind, fn: Body) -> Body:
        params = _params(fn)
        if kind.endswith("_all"):
            # Hooks that run once per file get no per-test fixtures.
            allowed: Mapping[str, FixtureDef] = {}
            for name in params:
                raise errors.DefinitionError(
                    f"test.{kind} hook {fn.__qualname__} asks for fixture {name!r}; "
                    "all-hooks run once per file and take no fixtures"
                )
        else:
            allowed = self._fixtures
            _check_params(f"test.{kind} hook {fn.__qualname__}", params, allowed)
        collector = _require_collector(f"test.{kind}")
        file, line = _where(fn)
        collector.hooks.append(Hook(kind, fn, params, collector.describe_path, allowed, file, line))
        return fn

    def _declare(
        self, name: str, *, mode: Mode, reason: str | None, options: Mapping[str, Any]
    ) -> Callable[[Body], Body]:
        if not isinstance(name, str) or not name.strip():
            raise errors.DefinitionError(f"a test needs a non-empty name, got {name!r}")

        def decorate(fn: Body) -> Body:
            # A plain ``async def`` is told by its code's flag; anything else (a partial, a
            # method, a marked function) by inspect, which unwraps it to the same flag.
            plain_async = (
                fn.__class__ is types.FunctionType and fn.__code__.co_flags & inspect.CO_COROUTINE
            )
            if not plain_async and not inspect.iscoroutinefunction(fn):
                raise errors.DefinitionError(
                    f"test {name!r}: the body {getattr(fn, '__qualname__', fn)!r} "
                    "must be an `async def`"
                )
            takes = _params(fn)
            row = options.get("values")
            if row is None:
                _check_params(f"test {name!r}", takes, self._fixtures)
            else:
                from agent_health.sdk import parametrize

                parametrize.check_row(
                    f"test {name!r}", takes, row, {*BUILTIN_FIXTURES, *self._fixtures}
                )
                _check_params(f"test {name!r}", [p for p in takes if p not in row], self._fixtures)
            file, line = _where(fn)
            try:
                collector = _collector.get()
            except LookupError:
                return fn  # imported outside the loader: declare nothing
            opts = dict(options)
            opts["labels"] = (*collector.describe_labels, *tuple(opts.get("labels", ())))
            # Strings, said at the declaration: an int label crashed the run in the content
            # hash, and a skipped test's int prompt or reason failed its result's validation.
            odd = [label for label in opts["labels"] if not isinstance(label, str)]
            if odd:
                raise errors.DefinitionError(
                    f"test {name!r}: labels are strings; {odd[0]!r} is not"
                )
            prompt = opts.get("default_prompt")
            if prompt is not None and not isinstance(prompt, str):
                raise errors.DefinitionError(
                    f"test {name!r}: default_prompt= is the prompt, a string; got "
                    f"{type(prompt).__name__}"
                )
            if reason is not None and not isinstance(reason, str):
                raise errors.DefinitionError(
                    f"test {name!r}: reason= says why it is skipped, a string; got "
                    f"{type(reason).__name__}"
                )
            timeout = opts.get("timeout")
            wrong = timeouts.problem(timeout) if timeout is not None else None
            if wrong is not None:
                raise errors.DefinitionError(f"test {name!r}: timeout= {wrong}")
            chosen = opts.get("insights")
            if not (chosen is None or chosen is False or callable(chosen)):
                raise errors.DefinitionError(
                    f"test {name!r}: insights= takes a function (or False for none), got {chosen!r}"
                )
            case = TestCase(
                name=name,
                describe_path=collector.describe_path,
                fn=fn,
                params=takes,
                fixtures=self._fixtures,
                file=file,
                line=line,
                mode=mode,
                skip_reason=reason if mode in ("skip", "fixme") else None,
                **opts,
            )
            if case.source is None:  # the body's source, cut from the file's lines
                case.source = collector.source_of(fn)
            collector.add(case)
            return fn

        return decorate


def _check_cycles(fixtures: Mapping[str, FixtureDef]) -> None:
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2 or name not in fixtures:
            return
        if state.get(name) == 1:
            raise errors.DefinitionError(
                "fixtures depend on each other in a cycle: " + " -> ".join((*chain, name))
            )
        state[name] = 1
        for dep in fixtures[name].params:
            if dep != name:
                visit(dep, (*chain, name))
            else:
                raise errors.DefinitionError(f"fixture {name!r} asks for itself")
        state[name] = 2

    for fixture_name in fixtures:
        visit(fixture_name, ())


test = TestAPI()
