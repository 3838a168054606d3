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

from agent_health.cli.app import console, main

__all__ = ["console", "main"]
