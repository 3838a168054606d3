"""What every ledger store is: the :class:`Backend` protocol, cell names, and (shown here,
made when first read) the :class:`~.options.Options` a store may need.

The stores (:mod:`.filestore`, :mod:`.configmap`, :mod:`.objectstore`) implement it;
:mod:`.backends` picks one by URL. Neither imports the other's registry.
"""

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agent_health.ledger import errors

if TYPE_CHECKING:
    from agent_health.ledger.options import Options as Options


def __getattr__(name: str) -> Any:
    # Options is shown here, where the stores read it; its class is made when first read
    # (a local run's file ledger never reads it: issue #40).
    if name == "Options":
        from agent_health.ledger import options

        return options.Options
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_CELL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@runtime_checkable
class Backend(Protocol):
    """Per-cell append-only storage of ledger lines."""

    url: str

    async def append(self, cell: str, lines: Sequence[str]) -> None:
        """Append ``lines`` (without newlines) to ``cell``, in order, as one batch."""
        ...

    async def read(self, cell: str) -> list[str]:
        """Every line of ``cell`` in append order; ``[]`` for a cell never written."""
        ...

    async def cells(self) -> list[str]:
        """The names of every cell that has lines, sorted."""
        ...

    async def flush(self) -> None:
        """Make every appended line durable."""
        ...

    async def close(self) -> None:
        """Flush, then release connections."""
        ...


Factory = Callable[[str, "Options"], Backend]


def check_cell(cell: str) -> str:
    """``cell`` if it is a safe cell name (letters, digits, ``.``, ``_``, ``-``; ≤ 200)."""
    if not _CELL.match(cell):
        raise errors.BackendConfigError(
            f"bad cell name {cell!r}: use letters, digits, '.', '_' and '-' "
            "(at most 200, starting with a letter or digit)"
        )
    return cell


def text_of(lines: Sequence[str]) -> str:
    """``lines`` as a store holds them: each ended by a newline, in one string.

    >>> text_of(["a", "b"])
    'a\\nb\\n'

    Joined once: a line with its newline added first is a copy of it per line, and ledger
    lines are longer than what the allocator keeps small (an MCP route's carry their
    results), which made that join the largest part of writing a spool out.
    """
    return "\n".join([*lines, ""]) if lines else ""
