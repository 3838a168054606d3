"""The ``agent-health`` command: a thin entry point over one module per command group.

==========================  ====================================================
module                      commands
==========================  ====================================================
:mod:`.app`                 the entry point: assembles the groups, parses, dispatches
:mod:`.run`                 ``run``, ``list`` (a package: flags, handler, ...)
:mod:`.reports`             ``compare``, ``report``, ``show-report`` (served by :mod:`.serve`)
:mod:`.ledgers`             ``ledger verify``, ``grade``
:mod:`.history`             ``history [TEST]``, ``history import``, ``history prune``,
                            ``history --html``, ``flaky``
:mod:`.cluster`             ``operator``, ``cell``, ``gateway``, ``mcp``, ``crds``
:mod:`.common`              exit codes, usage errors, consoles, report writing
==========================  ====================================================

Exit codes of ``run``: 0 all passed, 1 any failed, 2 usage/config/load error,
3 errored tests only, 4 a budget stopped the run (nothing that ran failed or errored),
130 interrupted, 141 stdout's reader went away (the run stopped as interrupted, its reports
and ledger written). ``compare``: 0 no regression, 1 regression beyond the
thresholds, 2 a report file is missing, not JSON or of another version.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.cli.app import main
else:
    __getattr__, __dir__ = faces.lazy(__name__, {"main": "app"})

__all__ = ["console", "main"]


def console() -> int:
    """The ``agent-health`` program (its console script): the command line's modules
    imported with the cyclic collector off, then :func:`agent_health.cli.app.program`.

    What start-up imports (modules, classes, pydantic's schemas) lives as long as the
    program, and the collector's default pace (every 700 allocations) walked it over and
    over only to keep all of it: about 50 collections, 10-15 ms of CPU here. Frozen, the
    collector never walks it again. Not done on ``import
    agent_health.cli``, which also happens inside programs that go on (tests, notebooks).
    """
    gc.disable()
    try:
        from agent_health.cli import app
    finally:
        gc.freeze()
        gc.enable()
    return app.program()
