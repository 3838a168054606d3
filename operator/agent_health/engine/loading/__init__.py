"""Loading a suite: one loader for every test file and the config (:mod:`.loader`), which
files are tests (:mod:`.discovery`), case files as tests (:mod:`.datasuite`,
:mod:`.casefiles`), what ``agent-health list`` says (:mod:`.listing`), and which tests run
(:mod:`.select`, :mod:`.lastfailed`, :mod:`.quarantine`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.loading.discovery import Discovery
    from agent_health.engine.loading.discovery import of as discover
    from agent_health.engine.loading.lastfailed import NAME as LAST_FAILED
    from agent_health.engine.loading.lastfailed import choose as choose_last_failed
    from agent_health.engine.loading.lastfailed import failed as last_failed
    from agent_health.engine.loading.lastfailed import update as update_last_failed
    from agent_health.engine.loading.listing import entry as list_entry
    from agent_health.engine.loading.listing import line as list_line
    from agent_health.engine.loading.loader import (
        PATTERNS,
        Suite,
        find_config,
        load,
        load_config,
        notes,
    )
    from agent_health.engine.loading.quarantine import Entry as QuarantineEntry
    from agent_health.engine.loading.quarantine import QuarantineError
    from agent_health.engine.loading.quarantine import apply as apply_quarantine
    from agent_health.engine.loading.quarantine import read as read_quarantine
    from agent_health.engine.loading.quarantine import write as write_quarantine
    from agent_health.engine.loading.select import forbid_only, nothing_to_run, parse_shard
    from agent_health.engine.loading.select import select as select_tests
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "Discovery": "discovery",
            "discover": "discovery:of",
            "LAST_FAILED": "lastfailed:NAME",
            "choose_last_failed": "lastfailed:choose",
            "last_failed": "lastfailed:failed",
            "update_last_failed": "lastfailed:update",
            "list_entry": "listing:entry",
            "list_line": "listing:line",
            "PATTERNS": "loader",
            "Suite": "loader",
            "find_config": "loader",
            "load": "loader",
            "load_config": "loader",
            "notes": "loader",
            "QuarantineEntry": "quarantine:Entry",
            "QuarantineError": "quarantine",
            "apply_quarantine": "quarantine:apply",
            "read_quarantine": "quarantine:read",
            "write_quarantine": "quarantine:write",
            "forbid_only": "select",
            "nothing_to_run": "select",
            "parse_shard": "select",
            "select_tests": "select:select",
        },
    )

__all__ = [
    "LAST_FAILED",
    "PATTERNS",
    "Discovery",
    "QuarantineEntry",
    "QuarantineError",
    "Suite",
    "apply_quarantine",
    "choose_last_failed",
    "discover",
    "find_config",
    "forbid_only",
    "last_failed",
    "list_entry",
    "list_line",
    "load",
    "load_config",
    "notes",
    "nothing_to_run",
    "parse_shard",
    "read_quarantine",
    "select_tests",
    "update_last_failed",
    "write_quarantine",
]
