"""The numbers behind every interval and comparison agent-health prints: the estimators
(:mod:`.stats`, drawing with :mod:`.resample`), the intervals a report carries and pass@k
(:mod:`.uncertainty`), two runs paired by test id (:mod:`.pairing`), and an agent matrix
side by side (:mod:`.matrix`). docs/statistics.md explains them.
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.statistics.matrix import Matrix, Pairing
    from agent_health.engine.statistics.matrix import Pair as MatrixPair
    from agent_health.engine.statistics.matrix import Side as MatrixSide
    from agent_health.engine.statistics.matrix import build as build_matrix
    from agent_health.engine.statistics.pairing import ALPHA, Paired, PairedTest
    from agent_health.engine.statistics.pairing import compare as pair_runs
    from agent_health.engine.statistics.pairing import render as render_paired
    from agent_health.engine.statistics.stats import pass_at_k, pass_hat_k, wilson
    from agent_health.engine.statistics.uncertainty import (
        CONFIDENCE,
        Interval,
        PassAtK,
        Tally,
        parse_pass_at,
        pass_at,
        proportion,
        tallies,
    )
    from agent_health.engine.statistics.uncertainty import key as matrix_key
    from agent_health.engine.statistics.uncertainty import score as score_interval
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "Matrix": "matrix",
            "MatrixPair": "matrix:Pair",
            "MatrixSide": "matrix:Side",
            "Pairing": "matrix",
            "build_matrix": "matrix:build",
            "matrix_key": "uncertainty:key",
            "ALPHA": "pairing",
            "Paired": "pairing",
            "PairedTest": "pairing",
            "pair_runs": "pairing:compare",
            "render_paired": "pairing:render",
            "pass_at_k": "stats",
            "pass_hat_k": "stats",
            "wilson": "stats",
            "CONFIDENCE": "uncertainty",
            "Interval": "uncertainty",
            "PassAtK": "uncertainty",
            "Tally": "uncertainty",
            "parse_pass_at": "uncertainty",
            "pass_at": "uncertainty",
            "proportion": "uncertainty",
            "score_interval": "uncertainty:score",
            "tallies": "uncertainty",
        },
    )

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "Interval",
    "Matrix",
    "MatrixPair",
    "MatrixSide",
    "Paired",
    "PairedTest",
    "Pairing",
    "PassAtK",
    "Tally",
    "build_matrix",
    "matrix_key",
    "pair_runs",
    "parse_pass_at",
    "pass_at",
    "pass_at_k",
    "pass_hat_k",
    "proportion",
    "render_paired",
    "score_interval",
    "tallies",
    "wilson",
]
