"""Read-only values: what an agent answered cannot be rewritten after the fact.

A ``RunResult`` is the record of one run; matchers, metrics, judges and the ledger all read
it. If a body could rewrite ``step.tool_args[...]`` or ``result.raw[...]`` after the run,
every one of them would see the rewritten values. :func:`freeze` turns JSON-like data into
:class:`ReadOnlyDict` and :class:`ReadOnlyList` all the way down: subclasses of ``dict`` and
``list``, so they compare equal to plain ones, serialize to JSON and pass ``isinstance``
checks, but every mutating method raises ``TypeError`` saying the value is read-only.
:class:`ReadOnlyModel` does the same for the pydantic models of a result (where pydantic's
own frozen models raise a ``ValidationError``).

``dict(value)`` and ``list(value)`` are ordinary mutable (shallow) copies; ``copy.copy`` and
``copy.deepcopy`` give the value itself, as for a tuple: it cannot change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

PART = "this part of a RunResult"
HINT = "change a copy instead (dict(...), list(...), or model_copy(update=...))"


def _refuse(what: str, action: str) -> NoReturn:
    raise TypeError(f"{what} is read-only: cannot {action}; {HINT}")


class MissingFromAnswer(KeyError, AssertionError):
    """A key the agent's answer does not have (``tool_args["x"]``, ``result.json()["x"]``).

    Still a ``KeyError`` (code that catches one keeps working), and an ``AssertionError``: the
    test *fails* — the agent's answer lacks what the test needs — instead of erroring with
    cause ``test``, which would leave it out of the pass rate. An agent cannot escape a check
    by leaving out the field the check reads.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "missing key"


class ReadOnlyDict(dict[str, Any]):
    """A ``dict`` that refuses every change (see the module docstring). Reading a key it does
    not have raises :class:`MissingFromAnswer`."""

    __slots__ = ()

    def __missing__(self, key: str) -> NoReturn:
        have = ", ".join(map(repr, list(self)[:10])) or "none"
        raise MissingFromAnswer(f"the agent's answer has no key {key!r} (its keys: {have})")

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        _refuse(PART, f"set key {key!r}")

    def __delitem__(self, key: str) -> NoReturn:
        _refuse(PART, f"delete key {key!r}")

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _refuse(PART, "update it")

    def clear(self) -> NoReturn:
        _refuse(PART, "clear it")

    def pop(self, *args: Any) -> NoReturn:
        _refuse(PART, "pop from it")

    def popitem(self) -> NoReturn:
        _refuse(PART, "pop from it")

    def setdefault(self, *args: Any) -> NoReturn:
        _refuse(PART, "set a default in it")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(PART, "update it")

    def __reduce__(self) -> tuple[Any, ...]:
        # copy, deepcopy and pickle rebuild it whole instead of item by item.
        return (ReadOnlyDict, (dict(self),))

    def __copy__(self) -> ReadOnlyDict:
        return self  # immutable: a copy is itself, as for a tuple

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyDict:
        return self


class ReadOnlyList(list[Any]):
    """A ``list`` that refuses every change (see the module docstring)."""

    __slots__ = ()

    def __setitem__(self, index: Any, value: Any) -> NoReturn:
        _refuse(PART, f"set item {index!r}")

    def __delitem__(self, index: Any) -> NoReturn:
        _refuse(PART, f"delete item {index!r}")

    def __iadd__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _refuse(PART, "extend it")

    def __imul__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _refuse(PART, "repeat it")

    def append(self, value: Any) -> NoReturn:
        _refuse(PART, "append to it")

    def extend(self, values: Iterable[Any]) -> NoReturn:
        _refuse(PART, "extend it")

    def insert(self, index: Any, value: Any) -> NoReturn:
        _refuse(PART, "insert into it")

    def pop(self, index: Any = -1) -> NoReturn:
        _refuse(PART, "pop from it")

    def remove(self, value: Any) -> NoReturn:
        _refuse(PART, "remove from it")

    def clear(self) -> NoReturn:
        _refuse(PART, "clear it")

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(PART, "sort it in place (use sorted(...))")

    def reverse(self) -> NoReturn:
        _refuse(PART, "reverse it in place (use reversed(...))")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyList, (list(self),))

    def __copy__(self) -> ReadOnlyList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyList:
        return self


_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """``value`` with every dict and list in it made read-only (tuples stay tuples).

    One pass, by exact type first: it runs on every agent answer (``bench/`` measures it).
    """
    kind = type(value)
    if kind is dict:
        return ReadOnlyDict({k: v if type(v) in _SCALARS else freeze(v) for k, v in value.items()})
    if kind is list:
        return ReadOnlyList([v if type(v) in _SCALARS else freeze(v) for v in value])
    if kind in _SCALARS or kind is ReadOnlyDict or kind is ReadOnlyList:
        return value  # a read-only value is only made here: read-only all the way down
    if isinstance(value, dict):
        return ReadOnlyDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return ReadOnlyList([freeze(v) for v in value])
    if kind is tuple:
        return tuple(freeze(v) for v in value)
    return value


class ReadOnlyModel(BaseModel):
    """A pydantic model whose fields cannot be set or deleted once it is made (``TypeError``).

    Private attributes (underscore names declared with ``PrivateAttr``) stay settable: they
    are caches, not data. Subclasses still declare ``frozen=True`` so they hash and pydantic
    knows them as immutable.
    """

    # Its subclasses are built when first used: a command that makes none (``list`` without a
    # config file) never pays for pydantic's schema machinery.
    model_config = ConfigDict(defer_build=True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__private_attributes__:
            super().__setattr__(name, value)
            return
        _refuse(f"{type(self).__name__}", f"set {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self.__private_attributes__:
            super().__delattr__(name)
            return
        _refuse(f"{type(self).__name__}", f"delete {name!r}")
