"""The engine: loading test files, running them, deciding their outcome, and reporting.

It lives in rooms, one concept each, each depending only on the rooms below it (an
import-linter layers contract in ``pyproject.toml`` holds the order; docs/architecture.md
draws it). Top to bottom:

* :mod:`.controller` — ``agent-health cell``: one test inside a cell pod (cold or warm);
* :mod:`.reporters` — the terminal, JSON, JUnit, HTML and Markdown reporters (Markdown shows
  a comparison);
* :mod:`.comparing` — ``agent-health compare``: what changed between two reports;
* :mod:`.running` — one (test, repeat) and a session of many, fixtures, the agent a run
  starts; :mod:`.recording` — a local run's in-process gateway and ledger cells, its peers,
  its OTLP receiver, replaying a recording; :mod:`.loading` — test files, case files,
  discovery and choosing which tests run;
* :mod:`.reports` — the run report, one test's entry in it, insights, a saved report read back;
* :mod:`.outcome` — a test's status and score, and its tool claims held to the gateway's
  record (the operator grades with it too); :mod:`.statistics` — intervals, paired tests,
  an agent matrix; :mod:`.budget` — what a run may spend; :mod:`.visible` — outside text made
  safe to show.
"""
