"""``run`` and ``list``: discover a suite, run its tests against an agent, report.

==========================  ====================================================
module                      what it holds
==========================  ====================================================
:mod:`.flags`               ``run``'s command line: every flag it takes
:mod:`.request`             what the flags ask of the run, checked in one place
:mod:`.handler`             the ``run`` handler: flags checked, suite loaded, run, report
:mod:`.execution`           the run in the event loop: ledger, agents, judge, session
:mod:`.reporting`           what the handler adds to the report; the ledger line
:mod:`.archive`             the run's history: opened beside the run, recorded after it
:mod:`.catalog`             ``list`` (and ``run --list``): the tests, not run
:mod:`.suite`               what both read first: config, discovery, case-file strictness
==========================  ====================================================

Importing this package is cheap: every module here imports the standard library and
``cli.common`` only; the engine, the connectors, the ledger and rich load inside the
handlers, for the command that runs.
"""

from __future__ import annotations

from typing import Any

from agent_health.cli.run import catalog, flags


def add_commands(sub: Any) -> None:
    flags.add_command(sub)
    catalog.add_command(sub)
