"""``agent-health compare``: what changed between two reports (:mod:`.compare`), how each
conversation moved turn by turn (:mod:`.turns`), whether a side was replayed
(:mod:`.replayed`), and its terminal lines (:mod:`.render`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.comparing.compare import (
        CompareError,
        Comparison,
        Delta,
        compare_files,
        without,
    )
    from agent_health.engine.comparing.compare import compare as compare_reports
    from agent_health.engine.comparing.compare import load as load_report
    from agent_health.engine.comparing.render import render as render_comparison
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "CompareError": "compare",
            "Comparison": "compare",
            "Delta": "compare",
            "compare_files": "compare",
            "compare_reports": "compare:compare",
            "load_report": "compare:load",
            "without": "compare",
            "render_comparison": "render:render",
        },
    )

__all__ = [
    "CompareError",
    "Comparison",
    "Delta",
    "compare_files",
    "compare_reports",
    "load_report",
    "render_comparison",
    "without",
]
