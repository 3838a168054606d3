"""Resolving fixtures for one test: setup in dependency order, teardown LIFO, all errors kept.

As in pytest, a generator fixture yields exactly once: its code before ``yield`` is setup,
after it teardown; no yield, or a second one, is an error. Teardowns run last-in-first-out
in a ``finally`` and every error they raise is collected.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent_health.sdk import declare, errors

Teardown = Callable[[], Awaitable[None]]


class FixtureScope:
    """The fixtures of one running test."""

    def __init__(
        self,
        builtins: Mapping[str, Callable[[], Any]],
        defs: Mapping[str, declare.FixtureDef],
        values: Mapping[str, Any] | None = None,
    ) -> None:
        self._builtins = builtins
        self._defs = defs
        # A test.each row's values, given by parameter name like fixtures (never clash).
        self._values: dict[str, Any] = dict(values or {})
        self._teardowns: list[tuple[str, Teardown]] = []

    async def get(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        fixture = self._defs.get(name)
        if fixture is None:
            make = self._builtins.get(name)
            if make is None:
                raise errors.DefinitionError(f"unknown fixture {name!r}")
            value = make()
        else:
            kwargs = {p: await self.get(p) for p in fixture.params}
            value = await self._setup(fixture, kwargs)
        self._values[name] = value
        return value

    async def call(self, fn: Callable[..., Any], params: tuple[str, ...]) -> Any:
        """Call ``fn`` with its fixtures; await it when it is a coroutine function."""
        kwargs = {}
        for p in params:
            # A value or a built-in is at hand (agent, expect: most of what a body takes);
            # only a fixture of test.extend is set up, by get().
            if p in self._values:
                kwargs[p] = self._values[p]
            elif p not in self._defs and p in self._builtins:
                kwargs[p] = self._values[p] = self._builtins[p]()
            else:
                kwargs[p] = await self.get(p)
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    async def _setup(self, fixture: declare.FixtureDef, kwargs: dict[str, Any]) -> Any:
        fn = fixture.fn
        name = fixture.name
        if inspect.isasyncgenfunction(fn):
            agen = fn(**kwargs)
            try:
                value = await agen.__anext__()
            except StopAsyncIteration:
                raise errors.FixtureError(f"fixture {name!r} did not yield a value") from None

            async def finish_async() -> None:
                try:
                    await agen.__anext__()
                except StopAsyncIteration:
                    return
                await agen.aclose()
                raise errors.FixtureError(f"fixture {name!r} yielded more than once")

            self._teardowns.append((name, finish_async))
            return value
        if inspect.isgeneratorfunction(fn):
            gen = fn(**kwargs)
            try:
                value = next(gen)
            except StopIteration:
                raise errors.FixtureError(f"fixture {name!r} did not yield a value") from None

            async def finish_sync() -> None:
                try:
                    next(gen)
                except StopIteration:
                    return
                gen.close()
                raise errors.FixtureError(f"fixture {name!r} yielded more than once")

            self._teardowns.append((name, finish_sync))
            return value
        value = fn(**kwargs)
        if inspect.isawaitable(value):
            value = await value
        return value

    @property
    def has_teardown(self) -> bool:
        """Whether a generator fixture is waiting for its teardown."""
        return bool(self._teardowns)

    async def teardown(self) -> list[errors.FixtureError]:
        """Run every teardown, last-in-first-out; return one error per failure, each raised
        from what the teardown raised, so whoever that blames is blamed (an agent that broke
        the connection a teardown closes is the agent's fault, not the test's), as pytest
        keeps every finalizer's exception."""
        failures: list[errors.FixtureError] = []
        while self._teardowns:
            name, finish = self._teardowns.pop()
            try:
                await finish()
            except errors.FixtureError as err:
                failures.append(err)
            except Exception as err:
                failure = errors.FixtureError(
                    f"teardown of fixture {name!r} failed: {type(err).__name__}: {err}"
                )
                failure.__cause__ = err
                failures.append(failure)
        return failures


def asks_for(case: declare.TestCase, name: str) -> bool:
    """Whether running ``case`` asks for the built-in fixture ``name``: its body, one of its
    ``before_each``/``after_each`` hooks, or a fixture they take (at any depth) names it.

    Static, as discovery is: a body that takes ``agent`` and then never calls ``agent.run()``
    still asks for it. A test.each value or a ``test.extend`` fixture of the same name is not
    the built-in one (:class:`FixtureScope` gives them first).
    """
    values = case.values or {}
    if name in case.params and name not in values and name not in case.fixtures:
        return True  # the body takes it itself (most tests): what the walk below finds too
    seen: set[str] = set()

    def asks(params: tuple[str, ...]) -> bool:
        for param in params:
            if param in values or param in seen:
                continue
            seen.add(param)
            fixture = case.fixtures.get(param)
            if fixture is None and param == name:
                return True
            if fixture is not None and asks(fixture.params):
                return True
        return False

    hooks = (h.params for h in case.hooks if h.kind in ("before_each", "after_each"))
    return any(asks(params) for params in (case.params, *hooks))
