"""A room's face: the names a package shows the rest of the house, loaded on first use.

A room (``engine/reports/``, ``engine/running/``, ...) keeps its modules to itself; its
``__init__`` names what other rooms may call and where each lives, and this module makes
those names load when first used (PEP 562), so importing a face costs nothing until a name
is read — ``agent-health list`` and ``--help`` never load the runner or a reporter::

    if TYPE_CHECKING:  # what type checkers and readers see
        from agent_health.engine.reports.report import RunReport
    else:
        __getattr__, __dir__ = faces.lazy(__name__, {"RunReport": "report"})

A value ``"module:attr"`` shows ``attr`` of ``module`` under another name (the face's names
are read without their module, so ``claims.check`` is ``outcome.check_claims``).
``tests/ship/test_ship_modules.py`` checks that each face's lazy names and its ``TYPE_CHECKING``
imports agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``'s face: each name of ``where``
    imported from its module (relative to ``package``) when first read, then kept."""

    def __getattr__(name: str) -> Any:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = found.partition(":")
        value = getattr(importlib.import_module(f"{package}.{module}"), attr or name)
        vars(sys.modules[package])[name] = value  # read once; later reads skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *vars(sys.modules[package])})

    return __getattr__, __dir__
