"""Parametrised tests: ``test.each(rows)("title {key}")`` declares one test per row.

Each row is a dict. The body takes the row's keys as parameters, next to its fixtures; the
title is formatted with the row (``str.format``, plus ``{index}``: the row's position, from
0), so each row is its own test with its own stable id (file and title, as for any test).

Example::

    from agent_health import test

    CASES = [
        {"service": "payment", "tool": "search_logs"},
        {"service": "search", "tool": "service_status"},
    ]

    @test.each(CASES)("diagnoses the {service} service", labels=["rca"])
    async def diagnoses(agent, expect, service, tool):
        result = await agent.run(f"Why is the {service} service failing?")
        expect(result).to_have_called_tool(tool)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from agent_health.sdk import declared, errors


class Declaring(Protocol):
    """What ``test.each`` declares through: the ``test`` object's one declaring path."""

    def _declare(
        self, name: str, *, mode: declared.Mode, reason: str | None, options: Mapping[str, Any]
    ) -> Callable[[declared.Body], declared.Body]: ...


class Each:
    """What ``test.each(rows)`` returns: call it with a title (and ``@test`` options)."""

    def __init__(self, api: Declaring, rows: Iterable[Mapping[str, Any]]) -> None:
        if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
            raise errors.DefinitionError(
                f"test.each takes a list of rows (dicts of parameter → value), got {rows!r}"
            )
        self._api = api
        self._rows = list(rows)
        for i, row in enumerate(self._rows):
            if not isinstance(row, Mapping) or not all(isinstance(k, str) for k in row):
                raise errors.DefinitionError(
                    f"test.each row {i} is {row!r}; each row must be a dict of parameter "
                    'name → value, e.g. {"service": "payment"}'
                )
        if not self._rows:
            raise errors.DefinitionError("test.each got no rows; give it at least one")

    def __call__(self, title: str, **options: Any) -> Callable[[declared.Body], declared.Body]:
        """One test per row, titled ``title.format(**row)``."""
        return self._declare(title, "run", None, options)

    def skip(
        self, title: str, *, reason: str = "", **options: Any
    ) -> Callable[[declared.Body], declared.Body]:
        """One skipped test per row."""
        return self._declare(title, "skip", reason or "marked skip", options)

    def fixme(
        self, title: str, *, reason: str = "", **options: Any
    ) -> Callable[[declared.Body], declared.Body]:
        """One known-broken (skipped) test per row."""
        return self._declare(title, "fixme", reason or "fixme", options)

    def only(self, title: str, **options: Any) -> Callable[[declared.Body], declared.Body]:
        """One focused test per row (only focused tests run)."""
        return self._declare(title, "only", None, options)

    def _declare(
        self, title: str, mode: declared.Mode, reason: str | None, options: Mapping[str, Any]
    ) -> Callable[[declared.Body], declared.Body]:
        names = [_title(title, i, row) for i, row in enumerate(self._rows)]

        def decorate(fn: declared.Body) -> declared.Body:
            for name, row in zip(names, self._rows, strict=True):
                values = MappingProxyType(dict(row))
                # Through the one declaring path (checks, describe groups, labels, only).
                self._api._declare(
                    name, mode=mode, reason=reason, options={**options, "values": values}
                )(fn)
            return fn

        return decorate


def _title(template: str, index: int, row: Mapping[str, Any]) -> str:
    if not isinstance(template, str) or not template.strip():
        raise errors.DefinitionError(f"test.each needs a non-empty title, got {template!r}")
    try:
        return template.format_map({"index": index, **row})
    except (KeyError, AttributeError, IndexError, ValueError) as err:
        raise errors.DefinitionError(
            f"test.each title {template!r} cannot be filled from row {index} "
            f"(keys: {', '.join(row) or 'none'}): {type(err).__name__}: {err}"
        ) from err


def check_row(
    owner: str, takes: Sequence[str], row: Mapping[str, Any], fixtures: Iterable[str]
) -> None:
    """Every parameter the body takes is a fixture or a key of the row, never both."""
    clash = sorted(set(row) & set(fixtures))
    if clash:
        raise errors.DefinitionError(
            f"{owner}: row key {clash[0]!r} is also a fixture's name; rename the key"
        )
    known = set(fixtures)
    missing = [p for p in takes if p not in row and p not in known]
    if missing:
        raise errors.DefinitionError(
            f"{owner} takes {missing[0]!r}, which is neither a fixture nor a key of its row "
            f"(row keys: {', '.join(row) or 'none'})"
        )
