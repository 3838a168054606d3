"""A test's outcome: its status and score from its signals (:mod:`.grading`), and the tool
calls it claims held to what its gateway saw (:mod:`.claims`).

The one decision both graders make: the engine after a local body, the operator when it
grades a cell from its ledger — so a test passes or fails for the same reasons in both.
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.outcome.claims import PeerCalls, Sighting, as_seen
    from agent_health.engine.outcome.claims import check as check_claims
    from agent_health.engine.outcome.claims import from_objects as sightings
    from agent_health.engine.outcome.claims import reported as reported_calls
    from agent_health.engine.outcome.claims import served as served_tools
    from agent_health.engine.outcome.claims import tokens as gateway_tokens
    from agent_health.engine.outcome.grading import (
        JUDGE_ONLY,
        cause,
        cause_of,
        decide,
        score,
        skip_reason,
    )
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "PeerCalls": "claims",
            "Sighting": "claims",
            "as_seen": "claims",
            "check_claims": "claims:check",
            "gateway_tokens": "claims:tokens",
            "reported_calls": "claims:reported",
            "served_tools": "claims:served",
            "sightings": "claims:from_objects",
            "JUDGE_ONLY": "grading",
            "cause": "grading",
            "cause_of": "grading",
            "decide": "grading",
            "score": "grading",
            "skip_reason": "grading",
        },
    )

__all__ = [
    "JUDGE_ONLY",
    "PeerCalls",
    "Sighting",
    "as_seen",
    "cause",
    "cause_of",
    "check_claims",
    "decide",
    "gateway_tokens",
    "reported_calls",
    "score",
    "served_tools",
    "sightings",
    "skip_reason",
]
